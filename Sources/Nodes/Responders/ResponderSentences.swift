/// Cuts text that arrives in pieces (a streamed chat answer) into sentences, so each can be passed
/// on — and synthesized — as soon as it is complete.
///
/// A sentence ends at `.`, `!`, `?` or `…` followed by white space (so `3.14`, `example.com` and
/// `"Yes!" she said` are not cut inside), at `。`, `！`, `？` (CJK text has no space after them),
/// and at a line break. Closing quotes and brackets right after the mark stay with the sentence.
/// Abbreviations (`Mr.`, `e.g.`, `U.S.`, a single initial) and list numbers (`1.`) do not end one;
/// pieces with no letter or digit (`...`, `—`) are left out. The rules follow the `tts` node's
/// `SentenceSplitter`, which cuts a whole text; this one cuts text that is still coming, and says a
/// sentence is complete only once the text after it shows that it is.
/// Pure value: no clocks, no I/O.
///
/// ```swift
/// var s = ResponderSentences()
/// s.push("Hello there. How ar")   // ["Hello there."]
/// s.push("e you?")                // [] — the `?` may still be followed by more
/// s.finish()                      // "How are you?"
/// ```
struct ResponderSentences: Sendable {
    private var pending: [Character] = []
    /// How far ``pending`` has been searched for a boundary.
    private var scanned = 0

    init() {}

    /// Adds a piece of text; returns the sentences it completes (trimmed, non-empty), in order.
    mutating func push(_ piece: String) -> [String] {
        pending.append(contentsOf: piece)
        var out: [String] = []
        var start = 0
        var i = max(scanned, 0)
        while i < pending.count {
            let c = pending[i]
            if c.isNewline {
                emit(start..<i, into: &out)
                start = i + 1
                i += 1
                continue
            }
            if Self.fullWidthEnds.contains(c) {
                var j = i + 1
                while j < pending.count, Self.fullWidthEnds.contains(pending[j]) || Self.closers.contains(pending[j]) { j += 1 }
                if j == pending.count { break }   // more marks or closers may follow
                emit(start..<j, into: &out)
                start = j
                i = j
                continue
            }
            if Self.ends.contains(c) {
                var j = i + 1
                while j < pending.count, Self.ends.contains(pending[j]) || Self.closers.contains(pending[j]) { j += 1 }
                if j == pending.count { break }   // the next piece decides
                if pending[j].isWhitespace, !isAbbreviation(start..<i, mark: c) {
                    emit(start..<j, into: &out)
                    start = j
                }
                i = j
                continue
            }
            i += 1
        }
        pending.removeFirst(start)
        scanned = i - start
        return out
    }

    /// The text left after the last complete sentence (trimmed), or nil when there is none; the
    /// splitter is empty afterwards.
    mutating func finish() -> String? {
        let rest = Self.trimmed(pending[...])
        pending = []
        scanned = 0
        return rest.contains(where: { $0.isLetter || $0.isNumber }) ? rest : nil
    }

    /// Drops what is pending (an interrupted answer).
    mutating func reset() {
        pending = []
        scanned = 0
    }

    /// Splits a whole text at once.
    static func split(_ text: String) -> [String] {
        var s = ResponderSentences()
        var out = s.push(text)
        if let rest = s.finish() { out.append(rest) }
        return out
    }

    private func emit(_ range: Range<Int>, into out: inout [String]) {
        let s = Self.trimmed(pending[range])
        if s.contains(where: { $0.isLetter || $0.isNumber }) { out.append(s) }
    }

    /// True when the `.` at the end of `range` closes an abbreviation, an initial or a list number
    /// rather than a sentence.
    private func isAbbreviation(_ range: Range<Int>, mark: Character) -> Bool {
        guard mark == "." else { return false }
        var k = range.upperBound
        while k > range.lowerBound, !pending[k - 1].isWhitespace { k -= 1 }
        var word = Substring(String(pending[k..<range.upperBound]))
        while let f = word.first, !f.isLetter && !f.isNumber { word.removeFirst() }
        if word.isEmpty { return false }
        // "1." at the start of a line or sentence: a numbered list.
        if word.allSatisfy(\.isNumber), Self.trimmed(pending[range.lowerBound..<k]).isEmpty { return true }
        if word.count == 1 { return word.first!.isUppercase }
        if word.contains(".") { return true }   // e.g. U.S.
        return Self.abbreviations.contains(word.lowercased())
    }

    private static func trimmed(_ chars: ArraySlice<Character>) -> String {
        var s = chars
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return String(s)
    }

    private static let ends: Set<Character> = [".", "!", "?", "…"]
    private static let fullWidthEnds: Set<Character> = ["。", "！", "？", "｡"]
    private static let closers: Set<Character> = ["\"", "'", "”", "’", ")", "]", "}", "»", "」", "』", "）", "》", "*", "_"]
    private static let abbreviations: Set<String> = [
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "cf", "approx", "fig", "mt", "ft", "inc", "ltd",
        "dept", "gov", "sgt", "capt", "lt", "rev",
    ]
}
