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
        let synthesizer = makeSynthesizer("tts-\(context.id)")
        defer { synthesizer.stop() }
        try await synthesizer.start()
        let queue = SynthesisQueue(capacity: Self.queueCapacity)
        let texts = context.input("text")
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                defer { queue.finishProducing() }
                try await Self.synthesize(texts, with: synthesizer, into: queue, context: context)
            }
            do {
                try await play(queue, context: context)
            } catch {
                queue.finishConsuming()
                throw error
            }
            try await group.waitForAll()
        }
    }

    /// The synthesis task: reads texts, announces each, and queues its sentences' audio.
    private static func synthesize(_ texts: InputPort, with synthesizer: any SpeechSynthesizer, into queue: SynthesisQueue,
                                   context: NodeContext) async throws {
        for await frame in texts {
            guard let raw = frame.text else { continue }
            let sentences = SentenceSplitter.sentences(in: raw)
            if sentences.isEmpty { continue }
            let text = raw.trimmingCharacters(in: .whitespacesAndNewlines)
            try await context.emit("tts_start", [("text", .string(text))])
            await queue.send(.begin(text: text, created: frame.created))
            for sentence in sentences {
                try Task.checkCancellation()
                do {
                    try await synthesizer.synthesize(sentence) { audio in await queue.send(.audio(audio)) }
                    context.count("sentences")
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    context.count("synthesis_errors")
                    try await context.emitError(code: (error as? NodeError)?.code ?? "synthesis_failed", message: "\(error)")
                }
            }
            await queue.send(.end)
        }
    }

    /// The sending task: converts each text's audio to the output format, frames it and sends it.
    private func play(_ queue: SynthesisQueue, context: NodeContext) async throws {
        let out = context.output()
        var current = TextPlayout(text: "", created: nil)
        while let item = await queue.receive() {
            switch item {
            case .begin(let text, let created):
                current = TextPlayout(text: text, created: created)
            case .audio(let audio):
                try current.add(audio, converting: configuration.format)
                try await sendFrames(&current, final: false, to: out)
            case .end:
                current.flush()
                try await sendFrames(&current, final: true, to: out)
                let nanos = MediaTime.nanos(samples: current.samplesSent, rate: configuration.format.sampleRate)
                try await context.emit("tts_end", [("text", .string(current.text)), ("duration_ms", .int(MediaTime.millis(nanos)))])
            }
        }
    }

    /// Sends the whole frames of a text's converted audio. While the text goes on, at least one
    /// sample is held back so that its last frame can be marked; at its end, what remains goes out
    /// padded with silence to a whole frame.
    private func sendFrames(_ p: inout TextPlayout, final: Bool, to out: OutputPort) async throws {
        let n = max(1, configuration.format.frames(ms: configuration.frameMs))
        var start = 0
        while p.pending.count - start > n || (final && p.pending.count - start == n) {
            let last = final && p.pending.count - start == n
            try await send(Array(p.pending[start..<start + n]), first: p.framesSent == 0, last: last, created: p.created, to: out)
            p.framesSent += 1
            p.samplesSent += Int64(n)
            start += n
        }
        p.pending.removeFirst(start)
        if final && !p.pending.isEmpty {
            let frame = p.pending + [Int16](repeating: 0, count: n - p.pending.count)
            p.pending = []
            try await send(frame, first: p.framesSent == 0, last: true, created: p.created, to: out)
            p.framesSent += 1
            p.samplesSent += Int64(n)
        }
    }

    /// Sends one frame at the current media position.
    private func send(_ samples: [Int16], first: Bool, last: Bool, created: Duration?, to out: OutputPort) async throws {
        var frame = Frame.audio(samples, format: configuration.format, sampleIndex: position,
                                marks: FrameMarks(speechStart: first, speechEnd: last))
        if let created { frame.created = created }
        position += Int64(samples.count)
        try await out.send(frame)
    }
}

/// One text on its way out of the `tts` node: its audio converted to the output format, not yet sent.
private struct TextPlayout {
    let text: String
    let created: Duration?
    var converter: AudioConverter?
    /// Converted samples not sent yet.
    var pending: [Int16] = []
    var framesSent = 0
    var samplesSent: Int64 = 0

    init(text: String, created: Duration?) {
        self.text = text
        self.created = created
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
        /// A text begins (with the instant it was created, if known).
        case begin(text: String, created: Duration?)
        /// Audio of the current text, in the engine's format.
        case audio(AudioBuffer)
        /// The current text is complete.
        case end
    }

    private let edge: BoundedEdge

    init(capacity: Int) {
        edge = BoundedEdge(capacity: capacity, overflow: .block, label: "tts synthesis -> sending")
    }

    /// Queues an item, waiting while the queue is full.
    func send(_ item: Item) async {
        switch item {
        case .begin(let text, let created):
            var frame = Frame.text(text)
            frame.created = created
            await edge.send(frame)
        case .audio(let audio): await edge.send(.audio(audio, pts: 0))
        case .end: await edge.send(.event(Event("end")))
        }
    }

    /// The next item; `nil` once the synthesis task finished and everything was taken.
    func receive() async -> Item? {
        guard let frame = await edge.receive() else { return nil }
        switch frame.payload {
        case .text(let text): return .begin(text: text, created: frame.created)
        case .audio(let audio): return .audio(audio)
        default: return .end
        }
    }

    /// The synthesis task is done.
    func finishProducing() { edge.producerFinished() }
    /// The sending task is gone: the synthesis task never waits again.
    func finishConsuming() { edge.consumerFinished() }
}
