import Foundation
import PipelineCore

/// `tts`: speech synthesis. Text in (`text`), audio out (`out`) at the graph's rate, sentence by
/// sentence: each text is cut into sentences (``SentenceSplitter``) and the first one is heard as soon
/// as it is synthesized, while the engine goes on with the rest.
///
/// Two tasks share the work, joined by a small bounded queue: one reads texts and synthesizes their
/// sentences (the engine's blocking work on a thread of its own), the other converts the audio to
/// `rate`, cuts it into `frame_ms` frames and sends them. So synthesis of the next sentence — or the
/// next text — overlaps the sending of the current one, and a slow consumer holds synthesis back
/// only once the queue is full.
///
/// - Frames are mono, `frame_ms` long (the last one of a text padded with silence), with `pts` on one
///   media timeline across texts. The first frame of a text is marked `speechStart`, its last
///   `speechEnd`, so downstream nodes that act on utterances (asr, slicer, encoders) see one per text.
/// - Frames inherit the instant the text was created, when it carries one, so media age at a sink
///   counts from the text.
/// - Events: `tts_start` (`text`) when synthesis of a text starts, `tts_end` (`text`, `duration_ms`:
///   the audio sent for it) after its last frame. A text with nothing to say (empty, white space,
///   punctuation) produces neither audio nor events. A sentence the engine fails on is reported as
///   an `error` event and skipped.
/// - Every frame carries a ``Caption``: the sentence it speaks, and the answer it belongs to (the
///   `pts` of the text frame, which a responder gives every sentence of one answer), so a sink that
///   is interrupted can say what was heard.
/// - Every text is bounded: sentences longer than `max_sentence_chars` are cut at a clause or a word
///   boundary and words longer than `max_word_chars` into pieces (``SpeechPieces``), so no engine call
///   runs long and an interruption or a stop is seen between pieces; a text's audio stops at
///   `max_text_ms`, and a `tts_dropped` event (`dropped`: the start of what was not spoken,
///   `dropped_chars`, `limit`) says what was left out.
/// - Any event on the optional `interrupt` input cancels the answer being spoken: texts waiting are
///   dropped, the rest of that answer's audio is not sent (a sentence the engine is making is
///   finished and thrown away), further texts of the same answer are ignored, and its `tts_end`
///   carries `interrupted: true`.
public actor TTSNode: Node {
    let configuration: Configuration
    let makeSynthesizer: @Sendable (String) -> any SpeechSynthesizer
    /// Samples sent on `out` so far: the media timeline, across texts.
    private var position: Int64 = 0

    /// Texts (or their audio) the synthesis task may be ahead of the sending task.
    static let queueCapacity = 16

    /// A node with the engine `configuration` names, or the synthesizer `makeSynthesizer` makes
    /// (given a thread name).
    init(configuration: Configuration, makeSynthesizer: (@Sendable (String) -> any SpeechSynthesizer)? = nil) {
        self.configuration = configuration
        self.makeSynthesizer = makeSynthesizer ?? { [configuration] name in configuration.makeSynthesizer(name: name) }
    }

    public func run(_ context: NodeContext) async throws {
        // Credentials taken from the environment are secrets too (kept out of events and logs).
        if configuration.engine == .tencent {
            for name in ["TENCENTCLOUD_SECRET_ID", "TENCENTCLOUD_SECRET_KEY"] {
                if let v = configuration.environment[name] { context.secrets.add(v) }
            }
        }
        let synthesizer = makeSynthesizer("tts-\(context.id)")
        defer { synthesizer.stop() }
        try await synthesizer.start()
        try await Self.emitNotices(of: synthesizer, context: context)
        let queue = SynthesisQueue(capacity: Self.queueCapacity)
        let texts = context.input("text")
        let cut = CutAnswers()
        let bounds = TextBounds(maxSentenceChars: configuration.maxSentenceChars, maxWordChars: configuration.maxWordChars,
                                maxTextMs: configuration.maxTextMs)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { queue.finishProducing() }
                try await Self.synthesize(texts, with: synthesizer, into: queue, cut: cut, bounds: bounds, context: context)
            }
            if context.connectedInputs.contains("interrupt") {
                group.addTask {
                    for await frame in context.input("interrupt") where frame.event != nil {
                        // The answer being spoken, and every text waiting, are dropped.
                        if let turn = cut.speaking { cut.insert(turn) }
                        if let turn = cut.playing { cut.insert(turn) }
                        texts.flush()
                        queue.flush()
                        context.count("interruptions")
                    }
                }
            }
            do {
                try await play(queue, cut: cut, context: context)
            } catch {
                queue.finishConsuming()
                throw error
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// The synthesis task: reads texts, announces each, and queues its sentences' audio.
    private static func synthesize(_ texts: InputPort, with synthesizer: any SpeechSynthesizer, into queue: SynthesisQueue,
                                   cut: CutAnswers, bounds: TextBounds, context: NodeContext) async throws {
        for await frame in texts {
            guard let raw = frame.text else { continue }
            if cut.contains(frame.pts) { context.count("interrupted_texts"); continue }
            let sentences = SentenceSplitter.sentences(in: raw).flatMap {
                SpeechPieces.pieces($0, maxChars: bounds.maxSentenceChars, maxWord: bounds.maxWordChars)
            }
            if sentences.isEmpty { continue }
            let text = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            cut.speaking = frame.pts
            try await context.emit(.ttsStart, [("text", .string(text))])
            await queue.send(.begin(text: text, created: frame.created, turn: frame.pts))
            // Seconds of audio this text has produced, and whether a piece's audio was cut at max_text_ms.
            let produced = LockedValue((seconds: 0.0, cut: false))
            let limit = Double(bounds.maxTextMs) / 1000
            for (index, sentence) in sentences.enumerated() {
                try Task.checkCancellation()
                if cut.contains(frame.pts) { break }
                await queue.send(.sentence(sentence))
                do {
                    try await synthesizer.synthesize(sentence) { audio in
                        guard !cut.contains(frame.pts) else { return }
                        // Audio past max_text_ms is not sent.
                        let rate = Double(max(1, audio.format.sampleRate * audio.format.channels))
                        let room = produced.withLock { p -> Int in
                            let r = max(0, Int(((limit - p.seconds) * rate).rounded(.down)))
                            if r < audio.samples.count { p.cut = true }
                            p.seconds += Double(min(audio.samples.count, r)) / rate
                            return r
                        }
                        if room <= 0 { return }
                        if room < audio.samples.count {
                            let channels = max(1, audio.format.channels)
                            await queue.send(.audio(AudioBuffer(format: audio.format, samples: Array(audio.samples.prefix(room / channels * channels)))))
                        } else {
                            await queue.send(.audio(audio))
                        }
                    }
                    context.count("sentences")
                    try await emitNotices(of: synthesizer, context: context)
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    context.count("synthesis_errors")
                    try await context.emitError(code: (error as? NodeError)?.code.rawValue ?? NodeErrorCode.synthesisFailed.rawValue, message: "\(error)")
                }
                // At max_text_ms: what was not spoken (this piece too, if its audio was cut) is dropped, and said.
                let (seconds, audioCut) = produced.withLock { ($0.seconds, $0.cut) }
                if seconds >= limit || audioCut {
                    let first = audioCut ? index : index + 1
                    guard first < sentences.count else { break }
                    let dropped = sentences[first...].joined(separator: " ")
                    context.count("texts_cut")
                    try await context.emit(EventName("tts_dropped"), [
                        ("text", .string(text)), ("dropped", .string(dropped.count > 200 ? String(dropped.prefix(200)) + "…" : dropped)),
                        ("dropped_chars", .int(Int64(dropped.count))), ("limit", "max_text_ms"), ("max_text_ms", .int(Int64(bounds.maxTextMs))),
                    ])
                    break
                }
            }
            await queue.send(.end(turn: frame.pts))
        }
    }

    /// The sending task: converts each text's audio to the output format, frames it and sends it.
    private func play(_ queue: SynthesisQueue, cut: CutAnswers, context: NodeContext) async throws {
        let out = context.output()
        var current = TextPlayout(text: "", created: nil, turn: 0)
        while let item = await queue.receive() {
            switch item {
            case .begin(let text, let created, let turn):
                current = TextPlayout(text: text, created: created, turn: turn)
                cut.playing = turn
            case .sentence(let sentence):
                current.sentence(sentence, index: sentenceIndex)
                sentenceIndex += 1
            case .audio(let audio):
                guard !cut.contains(current.turn) else { continue }
                try current.add(audio, converting: configuration.format)
                try await sendFrames(&current, final: false, to: out)
            case .end(let turn):
                cut.playing = nil
                let interrupted = cut.contains(turn)
                if interrupted {
                    current.pending = []
                } else {
                    current.flush()
                    try await sendFrames(&current, final: true, to: out)
                }
                let nanos = MediaTime.nanos(samples: current.samplesSent, rate: configuration.format.sampleRate)
                var fields: [(String, EventValue)] = [("text", .string(current.text)), ("duration_ms", .int(MediaTime.millis(nanos)))]
                if interrupted { fields.append(("interrupted", .bool(true))) }
                try await context.emit(.ttsEnd, fields)
            }
        }
    }

    /// Sentences sent so far (numbers the captions).
    private var sentenceIndex = 0

    /// Sends the whole frames of a text's converted audio. While the text goes on, at least one
    /// sample is held back so that its last frame can be marked; at its end, what remains goes out
    /// padded with silence to a whole frame.
    private func sendFrames(_ p: inout TextPlayout, final: Bool, to out: OutputPort) async throws {
        let n = max(1, configuration.format.frames(ms: configuration.frameMs))
        var start = 0
        while p.pending.count - start > n || (final && p.pending.count - start == n) {
            let last = final && p.pending.count - start == n
            try await send(Array(p.pending[start..<start + n]), first: p.framesSent == 0, last: last, created: p.created,
                           caption: p.caption(at: p.samplesSent), to: out)
            p.framesSent += 1
            p.samplesSent += Int64(n)
            start += n
        }
        p.pending.removeFirst(start)
        if final && !p.pending.isEmpty {
            let frame = p.pending + [Int16](repeating: 0, count: n - p.pending.count)
            p.pending = []
            try await send(frame, first: p.framesSent == 0, last: true, created: p.created, caption: p.caption(at: p.samplesSent), to: out)
            p.framesSent += 1
            p.samplesSent += Int64(n)
        }
    }

    /// Sends one frame at the current media position.
    private func send(_ samples: [Int16], first: Bool, last: Bool, created: Duration?, caption: Caption?, to out: OutputPort) async throws {
        var frame = Frame.audio(samples, format: configuration.format, sampleIndex: position,
                                marks: FrameMarks(speechStart: first, speechEnd: last, caption: caption))
        if let created { frame.created = created }
        position += Int64(samples.count)
        try await out.send(frame)
    }
}

/// The bounds on one text (`max_sentence_chars`, `max_word_chars`, `max_text_ms`).
struct TextBounds: Sendable {
    var maxSentenceChars: Int
    var maxWordChars: Int
    var maxTextMs: Int
}

/// One text on its way out of the `tts` node: its audio converted to the output format, not yet sent.
private struct TextPlayout {
    let text: String
    let created: Duration?
    /// The answer the text belongs to (its frame's pts).
    let turn: Int64
    /// Where each sentence's audio starts (samples of the converted text) and its caption.
    var sentences: [(start: Int64, text: String, index: Int)] = []
    var converter: AudioConverter?
    /// Converted samples not sent yet.
    var pending: [Int16] = []
    var framesSent = 0
    var samplesSent: Int64 = 0

    init(text: String, created: Duration?, turn: Int64) {
        self.text = text
        self.created = created
        self.turn = turn
    }

    /// A sentence's audio follows.
    mutating func sentence(_ sentence: String, index: Int) {
        sentences.append((samplesSent + Int64(pending.count), sentence, index))
    }

    /// The caption of the frame that starts at `position` (samples of the text).
    func caption(at position: Int64) -> Caption? {
        guard let i = sentences.lastIndex(where: { $0.start <= position }) ?? (sentences.isEmpty ? nil : 0) else { return nil }
        let s = sentences[i]
        let end: Int64? = i + 1 < sentences.count ? sentences[i + 1].start : nil
        return Caption(text: s.text, turn: turn, index: s.index, offset: Int(max(0, position - s.start)),
                       total: end.map { Int($0 - s.start) })
    }

    /// Converts `audio` (the engine's format) to `format` and queues it.
    mutating func add(_ audio: AudioBuffer, converting format: AudioFormat) throws {
        if let c = converter, c.input != audio.format { flush() }
        if converter == nil { converter = try AudioConverter(from: audio.format, to: format) }
        pending += converter!.convert(audio.samples)
    }

    /// Queues what the converter still holds.
    mutating func flush() {
        if let c = converter { pending += c.flush() }
        converter = nil
    }
}

/// The bounded queue between the `tts` node's synthesis task and its sending task: a text begins,
/// its audio in the engine's format, the text ends.
///
/// The items travel as frames through a ``BoundedEdge`` (`block`: a full queue holds synthesis
/// back), the runtime's one bounded queue, rather than through a queue of its own.
struct SynthesisQueue: Sendable {
    enum Item: Sendable {
        /// A text begins (with the instant it was created, if known, and the answer it belongs to).
        case begin(text: String, created: Duration?, turn: Int64)
        /// A sentence of the current text begins.
        case sentence(String)
        /// Audio of the current text, in the engine's format.
        case audio(AudioBuffer)
        /// The current text (of answer `turn`) is complete.
        case end(turn: Int64)
    }

    private let edge: BoundedEdge

    init(capacity: Int) {
        edge = BoundedEdge(capacity: capacity, overflow: .block, label: "tts synthesis -> sending")
    }

    /// Queues an item, waiting while the queue is full.
    func send(_ item: Item) async {
        switch item {
        case .begin(let text, let created, let turn):
            var frame = Frame.text(text, pts: turn)
            frame.created = created
            await edge.send(frame)
        case .sentence(let sentence): await edge.send(.event(Event(.sentence, fields: [("text", .string(sentence))])))
        case .audio(let audio): await edge.send(.audio(audio, pts: 0))
        case .end(let turn): await edge.send(.event(Event(.end), pts: turn))
        }
    }

    /// The next item; `nil` once the synthesis task finished and everything was taken.
    func receive() async -> Item? {
        guard let frame = await edge.receive() else { return nil }
        switch frame.payload {
        case .text(let text): return .begin(text: text, created: frame.created, turn: frame.pts)
        case .audio(let audio): return .audio(audio)
        case .event(let e) where e.name == .sentence: return .sentence(e["text"]?.stringValue ?? "")
        default: return .end(turn: frame.pts)
        }
    }

    /// An interruption: the audio waiting is dropped (texts' beginnings, sentences and ends stay, so
    /// every text is still closed).
    func flush() { edge.flush(where: { $0.audio != nil }) }

    /// The synthesis task is done.
    func finishProducing() { edge.producerFinished() }
    /// The sending task is gone: the synthesis task never waits again.
    func finishConsuming() { edge.consumerFinished() }
}

/// Answers (their `pts`) whose speech was interrupted, shared by the `tts` node's two tasks.
final class CutAnswers: Sendable {
    private struct State {
        var cut: Set<Int64> = []
        var speaking: Int64?
        var playing: Int64?
    }
    private let state = LockedValue(State())

    /// The answer being synthesized.
    var speaking: Int64? {
        get { state.withLock { $0.speaking } }
        set { state.withLock { $0.speaking = newValue } }
    }

    /// The answer being sent.
    var playing: Int64? {
        get { state.withLock { $0.playing } }
        set { state.withLock { $0.playing = newValue } }
    }

    func insert(_ turn: Int64) {
        state.withLock { s in
            s.cut.insert(turn)
            if s.cut.count > 64 { s.cut.remove(s.cut.min()!) }
        }
    }

    func contains(_ turn: Int64) -> Bool { state.withLock { $0.cut.contains(turn) } }
}
