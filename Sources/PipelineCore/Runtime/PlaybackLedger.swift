/// What a sink has played of captioned audio (``Caption``, set by `tts`), so that an interruption can
/// say what was actually heard. Pure value: the sink records audio as it queues it
/// (``queued(_:samples:)``) and as it is played (``played(through:)``, a running count of samples per
/// channel); ``interrupt()`` ends the current answer and tells what of it was heard.
///
/// A sentence played only in part is cut at a word: of its words, those whose end falls within the
/// played share of the sentence's audio (characters are taken to be spoken at an even pace).
public struct PlaybackLedger: Sendable {
    /// What an interruption cut short.
    public struct Heard: Sendable, Equatable {
        /// The answer's text that was played: whole sentences, then the words of the one cut.
        public var text: String
        /// Audio of the answer played, in samples per channel.
        public var samples: Int
        /// Samples of the answer that were queued and will not be played.
        public var discarded: Int
        /// The answer (``Caption/turn``), `nil` for audio without captions.
        public var turn: Int64?
    }

    private struct Span {
        var caption: Caption?
        var samples: Int
    }

    private struct Sentence {
        var index: Int
        var text: String
        var played: Int
        var total: Int
        /// The total came from the synthesizer (not from the frames seen so far).
        var known: Bool
    }

    private var spans: [Span] = []
    private var head = 0
    /// Samples already played of `spans[head]`.
    private var headPlayed = 0
    private var queuedTotal = 0
    private var playedTotal = 0
    /// The answer being played, and its sentences heard so far.
    private var turn: Int64?
    private var sentences: [Sentence] = []
    private var turnPlayed = 0
    /// Known lengths of captioned texts (by index), from the frames queued.
    private var totals: [Int: Int] = [:]
    /// Answers cut short: their audio still coming is not played.
    public private(set) var cut: Set<Int64> = []

    public init() {}

    /// Samples queued so far (per channel).
    public var queued: Int { queuedTotal }
    /// Samples queued and not yet played.
    public var pending: Int { queuedTotal - playedTotal }

    /// True when a frame with these marks belongs to an answer already interrupted: drop it.
    public func isCut(_ marks: FrameMarks) -> Bool {
        guard let c = marks.caption else { return false }
        return cut.contains(c.turn)
    }

    /// Records `samples` (per channel) queued for playback, with the frame's marks.
    public mutating func queued(_ marks: FrameMarks, samples: Int) {
        guard samples > 0 else { return }
        spans.append(Span(caption: marks.caption, samples: samples))
        queuedTotal += samples
        if let c = marks.caption {
            totals[c.index] = max(totals[c.index] ?? 0, c.total ?? 0, c.offset + samples)
        }
    }

    /// Records that the first `count` samples queued (a running total) have been played.
    public mutating func played(through count: Int) {
        var n = min(count, queuedTotal) - playedTotal
        while n > 0 && head < spans.count {
            let span = spans[head]
            let take = min(n, span.samples - headPlayed)
            hear(span.caption, take)
            headPlayed += take
            playedTotal += take
            n -= take
            if headPlayed == span.samples {
                head += 1
                headPlayed = 0
            }
        }
        if head > 256 && head * 2 > spans.count {
            spans.removeFirst(head)
            head = 0
        }
    }

    private mutating func hear(_ caption: Caption?, _ samples: Int) {
        guard let c = caption else { return }
        if c.turn != turn {
            turn = c.turn
            sentences = []
            turnPlayed = 0
            totals = totals.filter { $0.key >= c.index }
        }
        turnPlayed += samples
        let total = max(totals[c.index] ?? 0, c.total ?? 0, c.offset + samples)
        if let i = sentences.lastIndex(where: { $0.index == c.index }) {
            sentences[i].played += samples
            sentences[i].total = max(sentences[i].total, total)
            if c.total != nil { sentences[i].known = true }
        } else {
            sentences.append(Sentence(index: c.index, text: c.text, played: samples, total: total, known: c.total != nil))
        }
    }

    /// The playback is cut: everything queued and not played is discarded. Returns what the
    /// current answer had played, or `nil` when nothing was waiting to be played (nothing was cut).
    public mutating func interrupt(rate: Int = 16000) -> Heard? {
        // Audio of answers already cut (still arriving when an earlier interruption came) is not
        // part of this one.
        var discarded = 0
        for (i, s) in spans[head...].enumerated() {
            if let t = s.caption?.turn, cut.contains(t) { continue }
            discarded += s.samples - (i == 0 ? headPlayed : 0)
        }
        // The answer being cut is the one playing, else the first one waiting.
        var cutTurn = turn
        if head < spans.count, let waiting = spans[head].caption?.turn, headPlayed == 0 || cutTurn == nil { cutTurn = waiting }
        for s in spans[head...] { if let t = s.caption?.turn { cut.insert(t) } }
        if let cutTurn { cut.insert(cutTurn) }
        if cut.count > 64 { cut = Set(cut.sorted().suffix(64)) }
        spans = []
        head = 0
        headPlayed = 0
        queuedTotal = playedTotal
        guard discarded > 0 else { return nil }
        let heard = cutTurn == turn ? Self.text(of: sentences, totals: totals, rate: rate) : ""
        let samples = cutTurn == turn ? turnPlayed : 0
        turn = nil
        sentences = []
        turnPlayed = 0
        return Heard(text: heard, samples: samples, discarded: discarded, turn: cutTurn)
    }

    /// Whole sentences, then the words of a sentence played in part. Every sentence but the last was
    /// played whole (the audio is sequential); the last one's length is what its frames said, or
    /// (its end not known yet) estimated from its characters at the pace of the sentences before it.
    private static func text(of sentences: [Sentence], totals: [Int: Int], rate: Int) -> String {
        var parts: [String] = []
        var pacedSamples = 0
        var pacedCharacters = 0
        for (i, var s) in sentences.enumerated() {
            let last = i == sentences.count - 1
            if !last {
                parts.append(s.text)
                pacedSamples += s.played
                pacedCharacters += s.text.count
                continue
            }
            s.total = max(s.total, totals[s.index] ?? 0)
            if s.total <= s.played && !s.known {
                // Spoken at the pace measured so far, or about 15 characters a second.
                let perCharacter = pacedCharacters > 0 ? Double(pacedSamples) / Double(pacedCharacters) : Double(rate) / 15
                s.total = max(s.played, Int(perCharacter * Double(s.text.count)))
            }
            if s.played >= s.total {
                parts.append(s.text)
                continue
            }
            let share = Double(s.played) / Double(s.total)
            let characters = Array(s.text)
            let limit = Int((share * Double(characters.count)).rounded(.down))
            if !characters.contains(where: \.isWhitespace) {
                // A script written without spaces (Chinese, Japanese): cut at a character.
                if limit > 0 { parts.append(String(characters.prefix(limit))) }
                continue
            }
            var words: [String] = []
            var word = ""
            for (i, ch) in characters.enumerated() {
                if ch.isWhitespace {
                    if !word.isEmpty, i <= limit { words.append(word) }
                    word = ""
                } else {
                    word.append(ch)
                }
            }
            if !word.isEmpty, characters.count <= limit { words.append(word) }
            if !words.isEmpty { parts.append(words.joined(separator: " ")) }
        }
        return parts.joined(separator: " ")
    }
}
