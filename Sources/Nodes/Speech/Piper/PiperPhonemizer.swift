import CEspeakNG
import PipelineCore

/// Text to the IPA phonemes a Piper voice reads, as Piper makes them: eSpeak NG's phonemes in IPA
/// (`espeakPHONEMES_IPA`) with the voice's espeak voice, clause by clause, each clause followed by its
/// punctuation (`,` `;` `:` and the sentence's `.` `!` `?`, which the voices were trained with) and a
/// space between clauses.
///
/// The library's `espeak_TextToPhonemes` reads one clause per call and does not say which punctuation
/// ended it, so the text is cut into clauses here first (``clauses(_:)``, a pure function) and each is
/// phonemized alone. eSpeak NG's language-switch marks (`(fr)`) are taken out.
enum PiperPhonemizer {
    /// Punctuation that ends a clause inside a sentence (when white space follows).
    static let clausePunctuation: [Character: Character] = [",": ",", ";": ";", ":": ":", "，": ",", "、": ",", "；": ";", "：": ":"]
    /// Punctuation that ends the sentence (at its end).
    static let sentencePunctuation: [Character: Character] = [".": ".", "!": "!", "?": "?", "…": ".", "。": ".", "！": "!", "？": "?"]

    /// A clause's text and the punctuation (as a phoneme) that ends it, if any.
    struct Clause: Equatable {
        var text: String
        var punctuation: Character?
    }

    /// The clauses of `sentence`: cut after `,` `;` `:` followed by white space, the sentence's final
    /// `.` `!` `?` (with closing quotes or brackets after it) kept as the last clause's punctuation.
    static func clauses(_ sentence: String) -> [Clause] {
        let chars = Array(sentence)
        var clauses: [Clause] = []
        var current = ""
        var i = 0
        while i < chars.count {
            let c = chars[i]
            if let p = clausePunctuation[c], i + 1 == chars.count || chars[i + 1].isWhitespace {
                clauses.append(Clause(text: current, punctuation: p))
                current = ""
                i += 1
                continue
            }
            current.append(c)
            i += 1
        }
        clauses.append(Clause(text: current, punctuation: nil))
        // The sentence's own end: its last punctuation mark, before any closing quotes or brackets.
        if var last = clauses.popLast() {
            var body = Substring(last.text)
            while let l = body.last, l.isWhitespace || SentenceSplitter.closers.contains(l) { body.removeLast() }
            if let l = body.last, let p = sentencePunctuation[l] {
                while let l = body.last, sentencePunctuation[l] != nil { body.removeLast() }
                last = Clause(text: String(body), punctuation: p)
            }
            clauses.append(last)
        }
        return clauses.filter { $0.text.contains(where: { $0.isLetter || $0.isNumber }) }
    }

    /// The phonemes of `sentence` in espeak voice `voice`.
    static func phonemes(_ sentence: String, voice: String) throws -> String {
        let clauses = clauses(sentence)
        if clauses.isEmpty { return "" }
        return try EspeakLibrary.withLibrary {
            guard espeak_SetVoiceByName(voice) == EE_OK else {
                throw NodeError(.voiceUnavailable, "espeak-ng has no voice '\(voice)' (the Piper voice's espeak.voice)")
            }
            var out = ""
            for (n, clause) in clauses.enumerated() {
                let spoken = phonemesOfClause(clause.text)
                if spoken.isEmpty { continue }
                if !out.isEmpty && !out.hasSuffix(" ") { out += " " }
                out += spoken
                if let p = clause.punctuation { out.append(p) }
                if n + 1 < clauses.count { out += " " }
            }
            return out.trimmingTrailingSpaces
        }
    }

    /// eSpeak NG's IPA phonemes for one clause (each call of the library reads up to a clause's end;
    /// the calls' results are joined by spaces). Call under the library's lock.
    private static func phonemesOfClause(_ text: String) -> String {
        var parts: [String] = []
        text.withCString { chars in
            var pointer: UnsafeRawPointer? = UnsafeRawPointer(chars)
            // A clause the library cuts again (an abbreviation's period) takes a few calls; the bound
            // stops a library that would not advance.
            var calls = 0
            while pointer != nil, calls < 10_000 {
                calls += 1
                let before = pointer
                guard let result = espeak_TextToPhonemes(&pointer, Int32(espeakCHARS_UTF8), Int32(espeakPHONEMES_IPA)) else { break }
                let piece = withoutLanguageMarks(String(cString: result)).strippingSpaces
                if !piece.isEmpty { parts.append(piece) }
                if pointer == before { break }
            }
        }
        return parts.joined(separator: " ")
    }

    /// `text` without eSpeak NG's language-switch marks: `(en)`, `(fr)`, `(zh)`.
    static func withoutLanguageMarks(_ text: String) -> String {
        guard text.contains("(") else { return text }
        var out = ""
        var skipping = false
        for c in text {
            if c == "(" { skipping = true; continue }
            if skipping { if c == ")" { skipping = false }; continue }
            out.append(c)
        }
        return out
    }
}

extension String {
    fileprivate var trimmingTrailingSpaces: String {
        var s = Substring(self)
        while s.last == " " { s.removeLast() }
        return String(s)
    }

    fileprivate var strippingSpaces: String {
        var s = Substring(self)
        while let f = s.first, f == " " || f == "\t" { s.removeFirst() }
        while let l = s.last, l == " " || l == "\t" { s.removeLast() }
        return String(s)
    }
}
