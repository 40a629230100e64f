/// Cuts one sentence into the pieces a neural voice synthesizes one at a time, so that the first
/// audio leaves early and no piece is too long for the model. A pure function of the text.
///
/// - A sentence of more than ``Limits/firstWords`` words is cut after its first clause (a word ending
///   in `,` `;` `:` or a dash) that has at least ``Limits/minimumWords`` words: the short first piece
///   is heard while the rest is made. With ``Limits/phraseCut`` and no such clause, it is cut before
///   the first word that starts a phrase (``phraseStarts``: `and`, `at`, `with`, `because`…) among
///   its words ``Limits/minimumWords`` + 1 to ``Limits/firstWords``.
/// - Every piece has at most ``Limits/maxWords`` words and ``Limits/maxCharacters`` characters: a
///   longer stretch is cut at its last clause end, else between words; a "word" longer than the
///   character bound (no spaces at all) is cut into parts.
///
/// ```swift
/// PiperPieces.pieces("Well, after a long day at the office, I finally went home to rest.")
/// // ["Well, after a long day at the office,", "I finally went home to rest."]
/// ```
public enum PiperPieces {
    /// The bounds of the pieces.
    public struct Limits: Sendable {
        /// A sentence longer than this (in words) has its first clause cut off.
        public var firstWords = 8
        /// A clause cut off has at least this many words.
        public var minimumWords = 3
        /// Longest piece, in words.
        public var maxWords = 24
        /// Longest piece, in characters.
        public var maxCharacters = 240
        /// Whether a long sentence without an early clause is cut before a phrase's first word.
        public var phraseCut = true
        /// Whether a long sentence's beginning is cut off at all (false: pieces only as long as the bounds ask).
        public var cutFirst = true

        public init() {}

        /// Bounds for a sentence someone is waiting for (the first of an answer): the first piece short.
        public static let eager = Limits()
        /// Bounds for a sentence whose audio follows the one still playing: whole sentences, bounded.
        public static var relaxed: Limits {
            var l = Limits()
            l.cutFirst = false
            l.phraseCut = false
            return l
        }
    }

    /// Words (lower case) that start a phrase in English: a long sentence's first piece may end before
    /// one (`The package weighs fifteen kilograms | and costs…`).
    static let phraseStarts: Set<String> = [
        "and", "but", "or", "because", "so", "that", "which", "who", "when", "where", "while", "if", "then",
        "at", "in", "on", "for", "with", "from", "to", "into", "over", "under", "after", "before", "by", "about",
    ]

    static let clauseEnds: Set<Character> = [",", ";", ":", "—", "–", "，", "、", "；", "："]
    static let closers: Set<Character> = ["\"", "'", ")", "]", "}", "”", "’", "»"]

    /// The pieces of `sentence`, in order; together they hold all of its words.
    public static func pieces(_ sentence: String, limits: Limits = Limits()) -> [String] {
        let words = words(of: sentence, maxCharacters: limits.maxCharacters)
        if words.isEmpty { return [] }
        var pieces: [String] = []
        var start = 0
        if limits.cutFirst, words.count > limits.firstWords {
            let end = min(words.count - 1, limits.maxWords)
            if let cut = (limits.minimumWords - 1..<max(limits.minimumWords - 1, end)).first(where: { endsClause(words[$0]) }),
               cut + 1 < words.count {
                pieces.append(words[0...cut].joined(separator: " "))
                start = cut + 1
            } else if limits.phraseCut, limits.minimumWords + 1 <= limits.firstWords,
                      let next = (limits.minimumWords + 1...limits.firstWords).first(where: {
                          $0 < words.count - limits.minimumWords && phraseStarts.contains(bare(words[$0]))
                      }) {
                pieces.append(words[0..<next].joined(separator: " "))
                start = next
            }
        }
        while start < words.count {
            var end = start
            var characters = 0
            while end < words.count, end - start < limits.maxWords,
                  end == start || characters + 1 + words[end].count <= limits.maxCharacters {
                characters += (end == start ? 0 : 1) + words[end].count
                end += 1
            }
            let lower = start + limits.minimumWords - 1
            if end < words.count, lower < end, let clause = (lower..<end).last(where: { endsClause(words[$0]) }) {
                end = clause + 1
            }
            pieces.append(words[start..<end].joined(separator: " "))
            start = end
        }
        return pieces
    }

    /// `word` in lower case without punctuation around it.
    static func bare(_ word: String) -> String {
        String(word.lowercased().filter { $0.isLetter || $0 == "'" })
    }

    /// True when `word` ends a clause (its last character before closing quotes or brackets).
    static func endsClause(_ word: String) -> Bool {
        var w = Substring(word)
        while let l = w.last, closers.contains(l) { w.removeLast() }
        guard let l = w.last else { return false }
        return clauseEnds.contains(l)
    }

    /// The words of `text` (split at white space), each at most `maxCharacters` long.
    static func words(of text: String, maxCharacters: Int) -> [String] {
        var words: [String] = []
        for word in text.split(whereSeparator: \.isWhitespace) {
            if word.count <= maxCharacters {
                words.append(String(word))
            } else {
                var rest = Substring(word)
                while !rest.isEmpty {
                    words.append(String(rest.prefix(maxCharacters)))
                    rest = rest.dropFirst(maxCharacters)
                }
            }
        }
        return words
    }
}
