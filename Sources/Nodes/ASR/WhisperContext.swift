import CWhisper
import Foundation

/// How much of Whisper's 30 s encoder window a decoding runs (`asr` `audio_ctx`).
///
/// Whisper's encoder turns 30 s of audio into 1500 frames of 20 ms, whatever the utterance's length, so
/// a 2 s utterance pays for 30 s of encoding. whisper.cpp can run the encoder over the first N frames
/// only; the decoder's cross-attention then reads N frames too. `auto` sizes N to the utterance with a
/// margin of silence after it; short contexts make small models loop more often, so every decoding with
/// a reduced context is checked (``WhisperGuard``) and decoded again with a larger one when a check trips.
enum WhisperAudioContext: Sendable, Hashable, CustomStringConvertible {
    /// Sized to each utterance (the default).
    case auto
    /// The model's whole window, as Whisper was trained.
    case full
    /// At least this many encoder frames (more when the utterance is longer).
    case frames(Int)

    /// Encoder frames per second of audio (20 ms each).
    static let framesPerSecond = 50
    /// The model's window (every Whisper model: 30 s).
    static let window = 1500
    /// Silence kept after the utterance in `auto` (frames): the decoder sees where the speech ends. At least
    /// this many frames, and at least half the utterance's own (measured: with 64 frames alone, tiny.en on
    /// recorded prompts lost 3 points of word error rate against the whole window; short contexts hear short
    /// utterances worst).
    static let margin = 64
    /// Contexts are rounded up to a multiple of this (ggml's kernels like aligned sizes).
    static let step = 32
    /// The smallest context `auto` runs (3.84 s). Measured against 256 (5.12 s) on the benchmark prompts
    /// (41 utterances of people, tiny.en): the same word error rate (0.015) in 0.83× the decoding time; and
    /// four serve sessions ending their sentences together beside a busy process came within 1 s of
    /// `speech_end` (p95 0.88–0.97 s, against 1.26–1.74 s). 160 kept the words too but sent more decodings
    /// back to a larger context, and took longer in all.
    static let minimum = 192

    /// Parses the parameter: `auto`, `full` or a number of frames (1...1500); nil when it is none of these.
    init?(parameter: String?) {
        guard let parameter else { self = .auto; return }
        switch parameter.trimmingCharacters(in: .whitespaces).lowercased() {
        case "", "auto": self = .auto
        case "full", "0": self = .full
        default:
            guard let n = Int(parameter), n >= 1, n <= Self.window else { return nil }
            self = .frames(n)
        }
    }

    var description: String {
        switch self {
        case .auto: "auto"
        case .full: "full"
        case .frames(let n): String(n)
        }
    }

    /// The frames `samples` (16 kHz) occupy, rounded up.
    static func framesNeeded(samples: Int) -> Int { (samples * framesPerSecond + 15_999) / 16_000 }

    static func roundUp(_ n: Int) -> Int { (n + step - 1) / step * step }

    /// The contexts to try, in order, for `samples` of audio (16 kHz): the first that passes the checks is
    /// kept; the last is always the whole window. A context of `window` means the whole window.
    func ladder(samples: Int) -> [Int] {
        let needed = Self.framesNeeded(samples: samples)
        let first: Int
        switch self {
        case .full: return [Self.window]
        case .auto: first = max(Self.minimum, Self.roundUp(needed + max(Self.margin, needed / 2)))
        case .frames(let n): first = max(n, Self.roundUp(needed + Self.margin / 2))
        }
        guard first < Self.window else { return [Self.window] }
        let second = Self.roundUp(max(first * 2, first + 256))
        return second < Self.window ? [first, second, Self.window] : [first, Self.window]
    }
}

/// Checks that catch a decoding that went wrong, the failures short contexts cause in small models: the
/// same words over and over, text that compresses too well (Whisper's own test: ratio above 2.4), more
/// words than anyone says in the time, or a segment that ran into the token bound.
enum WhisperGuard {
    /// Whisper's compression-ratio threshold.
    static let compressionThreshold = 2.4

    /// Tokens a segment may take for audio of `durationMs`: twice fast speech (about 4 tokens a second)
    /// plus room for timestamps and punctuation.
    static func maxTokens(durationMs: Int) -> Int { 16 + durationMs * 8 / 1000 }

    /// The mean log-probability of a decoding's text tokens under which a reduced context's result is
    /// not trusted. Measured on the benchmark prompts (tiny.en): correct decodings -0.05 to -0.37, the
    /// reduced context's misheard short prompts -0.77 ("Agent Log-In") and -1.23 (a stray backslash for
    /// "Followed by the pound key"); the whole window on the same audio -0.65 and -0.53, right.
    static let confidenceThreshold = -0.6

    /// The mean log-probability a sentence said over must keep, cut to its first copy, to stand without a larger
    /// context. A loop is a short context's failure, so its first copy needs more than a plain decoding's
    /// confidence: "Please turn on the lights in the garaja." (flite) loops at 192 frames with -0.37 and at 256
    /// with -0.44; the whole window hears "garage". At -0.3 neither stands; the benchmark prompts cut no loop.
    static let loopCutConfidence = -0.3

    /// Audio at least this long that decodes to no word at all is decoded again (a short context that
    /// missed the speech the VAD heard).
    static let wordlessMs = 1000

    /// Why the decoding looks wrong, or nil: `token_limit`, `no_words`, `length`, `repetition`,
    /// `compression` or `confidence`.
    static func failure(text: String, tokensPerSegment: [Int], durationMs: Int, meanLogProbability: Double = 0) -> String? {
        let limit = maxTokens(durationMs: durationMs)
        if tokensPerSegment.contains(where: { $0 >= limit - 1 }) { return "token_limit" }
        let words = text.lowercased().split(whereSeparator: { $0.isWhitespace }).map { $0.filter { $0.isLetter || $0.isNumber } }.filter { !$0.isEmpty }
        if words.isEmpty && durationMs >= wordlessMs && !WhisperEngine.isNonSpeechTag(text.trimmingCharacters(in: .whitespaces)) { return "no_words" }
        if words.count > 4 + durationMs * 6 / 1000 { return "length" }
        if repeats(words) { return "repetition" }
        let bytes = Array(text.utf8)
        if bytes.count >= 40, vp_whisper_compression_ratio(bytes, bytes.count) > compressionThreshold { return "compression" }
        if meanLogProbability < confidenceThreshold { return "confidence" }
        return nil
    }

    /// Where a decoding that "starts its sentence over" ends its first sentence, or nil: the text is one
    /// sentence of at least three words closed by `.`, `?` or `!`, then that same sentence again and again
    /// (the last copy may be cut off, even inside a word) and nothing else. tiny.en does this in a reduced
    /// context ("Close the window in the bedroom. Close the window in the bedroom. Close the window in t"
    /// for a 2 s utterance at 256 frames: 31 tokens; again twice at 512; once in the whole window); the
    /// first copy is what the whole window hears, at a fraction of the cost. The result is a byte offset
    /// into `text`'s UTF-8.
    static func sentenceSaidOver(_ text: String) -> Int? {
        let bytes = Array(text.utf8)
        func words(_ slice: ArraySlice<UInt8>) -> [String] {
            String(decoding: slice, as: UTF8.self).lowercased().split(whereSeparator: { $0.isWhitespace })
                .map { $0.filter { $0.isLetter || $0.isNumber } }.filter { !$0.isEmpty }
        }
        // The first sentence end: a closing mark followed by a space (the sentence said again after it).
        guard let end = bytes.indices.first(where: { i in
            [UInt8(ascii: "."), UInt8(ascii: "?"), UInt8(ascii: "!")].contains(bytes[i]) && i + 1 < bytes.count && bytes[i + 1] == UInt8(ascii: " ")
        }) else { return nil }
        let sentence = words(bytes[...end])
        let rest = words(bytes[(end + 1)...])
        guard sentence.count >= 3, !rest.isEmpty else { return nil }
        for (i, word) in rest.enumerated() {
            let expected = sentence[i % sentence.count]
            if word == expected { continue }
            // Only the very last word may be cut short.
            guard i == rest.count - 1, expected.hasPrefix(word) else { return nil }
        }
        return end + 1
    }

    /// True when a run of 1 to 4 words repeats back to back (a single word 5 times, a longer phrase 4 times),
    /// or a run of 3 words or more is said twice in a row (a decoder that starts its sentence over).
    static func repeats(_ words: [String]) -> Bool {
        if words.count >= 6 {
            for n in 3...(words.count / 2) {
                for i in 0...(words.count - 2 * n) where words[i..<(i + n)] == words[(i + n)..<(i + 2 * n)] { return true }
            }
        }
        for n in 1...4 {
            let needed = n == 1 ? 5 : 4
            guard words.count >= n * needed else { continue }
            var i = 0
            while i + n * needed <= words.count {
                var count = 1
                while i + (count + 1) * n <= words.count, Array(words[(i + count * n)..<(i + (count + 1) * n)]) == Array(words[i..<(i + n)]) {
                    count += 1
                }
                if count >= needed { return true }
                i += 1
            }
        }
        return false
    }
}
