/// Cuts text into the sentences the `tts` node synthesizes one at a time, so the first one can be
/// heard while the rest are still being made.
///
/// A pure function of the text. A sentence ends
/// - at `.`, `!`, `?`, `…` (and runs of them, with closing quotes and brackets) followed by
///   white space or the end of the text — but not at the period of an abbreviation (`Mr.`, `e.g.`),
///   an initial (`J. Smith`) or a dotted acronym (`U.S.`);
/// - at the CJK marks `。`, `！`, `？`, `；` whatever follows (CJK text has no spaces);
/// - at a line break (list items, paragraphs).
///
/// Pieces are trimmed; pieces with nothing to say (no letter or digit: `...`, `—`) are left out.
///
/// ```swift
/// SentenceSplitter.sentences(in: "Hello there. Dr. Smith is in! 你好。再见")
/// // ["Hello there.", "Dr. Smith is in!", "你好。", "再见"]
/// ```
public enum SentenceSplitter {
    /// Words whose period does not end a sentence (lower case, without the period).
    static let abbreviations: Set<String> = [
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "vs", "etc", "fig", "approx", "mt", "ft", "inc", "ltd",
        "dept", "gov", "sgt", "capt", "lt", "rev",
    ]

    /// The sentences of `text`, in order.
    public static func sentences(in text: String) -> [String] {
        let chars = Array(text)
        var pieces: [String] = []
        var start = 0
        var i = 0
        func cut(_ end: Int) {
            let piece = String(chars[start..<end]).trimmingWhitespace
            if piece.contains(where: { $0.isLetter || $0.isNumber }) { pieces.append(piece) }
            start = end
        }
        while i < chars.count {
            let c = chars[i]
            if c.isNewline {
                cut(i)
                i += 1
                start = i
                continue
            }
            if cjkTerminators.contains(c) {
                var end = i + 1
                while end < chars.count, cjkTerminators.contains(chars[end]) || closers.contains(chars[end]) { end += 1 }
                cut(end)
                i = end
                continue
            }
            if terminators.contains(c) {
                var end = i + 1
                while end < chars.count, terminators.contains(chars[end]) || closers.contains(chars[end]) { end += 1 }
                let followedBySpace = end == chars.count || chars[end].isWhitespace
                if followedBySpace && !(c == "." && end == i + 1 && isAbbreviation(chars, before: i, from: start)) {
                    cut(end)
                }
                i = end
                continue
            }
            i += 1
        }
        cut(chars.count)
        return pieces
    }

    static let terminators: Set<Character> = [".", "!", "?", "…"]
    static let cjkTerminators: Set<Character> = ["。", "！", "？", "；", "｡"]
    static let closers: Set<Character> = ["\"", "'", ")", "]", "}", "”", "’", "」", "』", "）", "》"]

    /// True when the word that ends at the period at `dot` is an abbreviation, an initial or a
    /// dotted acronym.
    private static func isAbbreviation(_ chars: [Character], before dot: Int, from start: Int) -> Bool {
        var j = dot
        while j > start, !chars[j - 1].isWhitespace { j -= 1 }
        var word = String(chars[j..<dot])
        while let first = word.first, !first.isLetter && !first.isNumber { word.removeFirst() }
        if word.isEmpty { return false }
        if word.count == 1 { return word.first!.isUppercase }
        if word.contains(".") { return true }
        return abbreviations.contains(word.lowercased())
    }
}

extension String {
    /// The string without leading and trailing white space (and line breaks).
    fileprivate var trimmingWhitespace: String {
        var s = Substring(self)
        while let f = s.first, f.isWhitespace { s.removeFirst() }
        while let l = s.last, l.isWhitespace { s.removeLast() }
        return String(s)
    }
}
