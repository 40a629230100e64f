import Synchronization
/// The `app-sink` node: frames handed to an embedding Swift app as an `AsyncSequence` (the mirror
/// of `app-source`, like GStreamer's appsink).
///
/// The node's queue follows the same rules as an edge (`capacity`, `overflow`): under `block` the
/// graph waits while the app is `capacity` frames behind (lossless back-pressure); under the drop
/// policies the graph never waits and drops are counted (``dropped``, and in `--stats`). The
/// sequence ends after the last frame when the node's input ends. One consumer reads the frames.
///
/// ```swift
/// let pipeline = try Pipeline(yaml: text, registry: BuiltinNodes.registry())
/// let transcripts = pipeline.appSink("texts")!
/// async let done: Void = pipeline.run()
/// for await frame in transcripts.frames { print(frame.text ?? "") }
/// try await done
/// ```
public final class AppSinkNode: Node {
    let queue: BoundedEdge

    /// Creates the node.
    public init(capacity: Int, overflow: OverflowPolicy) {
        self.queue = BoundedEdge(capacity: capacity, overflow: overflow, label: "app-sink -> app")
    }

    /// The frames, in order; ends when the node's input has ended and every frame was taken.
    public var frames: Frames { Frames(queue: queue) }

    /// Frames dropped by the overflow policy because the app fell behind.
    public var dropped: UInt64 { queue.stats.dropped }

    /// Counters of the hand-off queue (sent, dropped, maximum depth).
    public var stats: EdgeStats { queue.stats }

    public func run(_ context: NodeContext) async throws {
        defer { queue.producerFinished() }
        let ledger = PlayedBox()
        try await withThrowingTaskGroup(of: Void.self) { group in
            if context.connectedInputs.contains("interrupt") {
                group.addTask {
                    for await frame in context.input("interrupt") where frame.event != nil {
                        try await self.interrupt(ledger: ledger, context: context)
                    }
                }
            }
            for await frame in context.input() {
                if let audio = frame.audio {
                    let cut = ledger.state.withLock { p -> Bool in
                        if p.ledger.isCut(frame.marks) { return true }
                        p.ledger.played(through: max(0, p.ledger.queued - queue.depth * audio.frameCount))
                        p.ledger.queued(frame.marks, samples: audio.frameCount)
                        p.rate = audio.format.sampleRate
                        return false
                    }
                    if cut { context.count("interrupted_frames"); continue }
                }
                let before = queue.stats.dropped
                await queue.send(frame)
                let lost = queue.stats.dropped - before
                if lost > 0 { context.count("dropped", by: lost) }
            }
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// An event on `interrupt`: the audio the app has not taken yet, and what waits on the input, is
    /// discarded (text and events stay); `interrupted` tells what of the answer the app took.
    private func interrupt(ledger: PlayedBox, context: NodeContext) async throws {
        var flushed: [(FrameMarks, Int)] = []
        var flushedSamples = 0
        let taken = queue.flush(where: { f in
            guard let a = f.audio else { return false }
            flushedSamples += a.frameCount
            return true
        })
        let waiting = context.input().flush(where: { f in
            guard let a = f.audio else { return false }
            flushed.append((f.marks, a.frameCount))
            return true
        })
        if taken + waiting > 0 { context.count("interrupted_frames", by: UInt64(taken + waiting)) }
        let (heard, rate) = ledger.state.withLock { p -> (PlaybackLedger.Heard?, Int) in
            p.ledger.played(through: p.ledger.queued - flushedSamples)
            for (m, n) in flushed { p.ledger.queued(m, samples: n) }
            return (p.ledger.interrupt(rate: p.rate), p.rate)
        }
        guard let heard else { return }
        context.count("interruptions")
        let r = max(rate, 1)
        var fields: [(String, EventValue)] = [("text", .string(heard.text)), ("heard_ms", .int(Int64(heard.samples * 1000 / r))),
                                              ("discarded_ms", .int(Int64(heard.discarded * 1000 / r)))]
        if let turn = heard.turn { fields.append(("turn_ms", .int(MediaTime.millis(turn)))) }
        try await context.emit(.interrupted, fields)
    }

    /// What the app took of captioned audio, and its rate.
    struct Played: Sendable {
        var ledger = PlaybackLedger()
        var rate = 16000
    }

    final class PlayedBox: Sendable {
        let state = LockedValue(Played())
    }

    /// The frames an ``AppSinkNode`` hands to the app.
    public struct Frames: AsyncSequence, Sendable {
        public typealias Element = Frame
        let queue: BoundedEdge

        /// Iterates the frames.
        public struct AsyncIterator: AsyncIteratorProtocol {
            let queue: BoundedEdge
            public mutating func next() async -> Frame? { await queue.receive() }
        }

        public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(queue: queue) }
    }

    /// Configuration of `app-sink`.
    public struct Configuration: NodeConfiguration {
        public var capacity: Int
        public var overflow: OverflowPolicy
        public static let parameters: [ParamSpec] = [
            ParamSpec("capacity", .int(1...100_000), default: 50, doc: "frames queued between the graph and the app"),
            ParamSpec("overflow", .choice(OverflowPolicy.allCases.map(\.rawValue)), default: "block",
                      doc: "what the graph does when the app is `capacity` frames behind: wait (block) or drop and count"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "app-sink", summary: "Frames (audio, encoded, text or events) to an embedding Swift app (Pipeline.appSink(id).frames)",
        family: "sinks", inputs: [PortSpec("in", [.audio, .encoded, .text, .event], doc: "frames handed to the app"),
                                   .interrupt("any event discards the audio the app has not taken yet; `interrupted` tells what of the answer it took")],
        outputs: [.events],
        configuration: Configuration.self, format: .none, executor: .realtime,
        make: { c, _ in AppSinkNode(capacity: c.capacity, overflow: c.overflow) })
}
