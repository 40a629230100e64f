/// Bounds the pieces of text the `tts` node hands its engine at once: a sentence longer than
/// `maxChars` is cut at a clause boundary (`,` `;` `:` `—` `–`, a closing bracket) or else at a word
/// boundary, as late as the limit allows; a word longer than `maxWord` (a long number, a pasted hash,
/// a run of letters) is cut into pieces of `maxWord` characters. Nothing is dropped: the pieces, put
/// back together with single spaces, hold every word of the sentence.
///
/// So no single engine call gets an unbounded text (flite on a 1,000-character word, or a megabyte
/// without sentence punctuation, would otherwise run for minutes), and the node checks for an
/// interruption or a stop between pieces.
///
/// A pure function of the text.
///
/// ```swift
/// SpeechPieces.pieces("one, two three four", maxChars: 10, maxWord: 5)
/// // ["one,", "two three", "four"]
/// ```
public enum SpeechPieces {
    /// Characters after which a clause may end.
    static let clauseEnds: Set<Character> = [",", ";", ":", "—", "–", ")", "]", "，", "、", "；", "："]

    /// The pieces of `sentence`, each at most `maxChars` characters and no word longer than `maxWord`.
    public static func pieces(_ sentence: String, maxChars: Int, maxWord: Int) -> [String] {
        let maxChars = max(1, maxChars), maxWord = max(1, min(maxWord, maxChars))
        // Words, with those over `maxWord` cut.
        var words: [Substring] = []
        for word in sentence.split(whereSeparator: \.isWhitespace) {
            if word.count <= maxWord { words.append(word); continue }
            var rest = word[...]
            while !rest.isEmpty {
                let piece = rest.prefix(maxWord)
                words.append(piece)
                rest = rest.dropFirst(piece.count)
            }
        }
        var out: [String] = []
        var current: [Substring] = []
        var length = 0
        func flush(_ n: Int) {
            guard n > 0 else { return }
            out.append(current[..<n].joined(separator: " "))
            current.removeFirst(n)
            length = current.isEmpty ? 0 : current.reduce(-1) { $0 + $1.count + 1 }
        }
        for word in words {
            let added = current.isEmpty ? word.count : length + 1 + word.count
            if added > maxChars {
                // Cut after the last word that ends a clause, else before this word.
                var cut = current.count
                if let clause = current.lastIndex(where: { $0.last.map(clauseEnds.contains) ?? false }) { cut = clause + 1 }
                flush(cut)
                if !current.isEmpty, length + 1 + word.count > maxChars { flush(current.count) }
            }
            length = current.isEmpty ? word.count : length + 1 + word.count
            current.append(word)
        }
        flush(current.count)
        return out
    }
}
