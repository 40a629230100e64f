/// The `app-source` node: audio (or text) pushed by an embedding Swift app.
///
/// The app gets the node from ``Pipeline/appSource(_:)`` and calls ``push(_:)`` with PCM; the node's
/// queue follows the same rules as an edge (`capacity`, `overflow`): under `block` a push waits
/// for room, under the drop policies it never waits and drops are counted. ``finish()`` ends the stream.
/// Text pushed with ``push(text:)`` leaves as text frames (for a graph that speaks, e.g. into `tts`).
///
/// ```swift
/// let mic = pipeline.appSource("mic")!
/// await mic.push(samples)      // [Int16] in the node's format
/// mic.finish()
/// ```
public final class AppSourceNode: Node {
    /// Format of the pushed audio.
    public let format: AudioFormat
    let queue: BoundedEdge
    private let position = Atomic64()

    /// Creates the node.
    public init(format: AudioFormat, capacity: Int, overflow: OverflowPolicy) {
        self.format = format
        self.queue = BoundedEdge(capacity: capacity, overflow: overflow, label: "app -> app-source")
    }

    /// Pushes interleaved s16 samples (any length; a multiple of the channel count).
    public func push(_ samples: [Int16]) async {
        let index = position.add(Int64(samples.count / max(format.channels, 1)))
        await queue.send(.audio(samples, format: format, sampleIndex: index))
    }

    /// Pushes one text (a text frame; its `pts` counts the texts pushed, in milliseconds).
    public func push(text: String) async {
        let n = textCount.add(1) + 1
        await queue.send(.text(text, pts: n * 1_000_000))
    }
    private let textCount = Atomic64()
    /// Emits `event` from this node (on its `events` output and the pipeline's event stream), in order
    /// with the audio pushed before it: a telephone caller's `dtmf` digit, say.
    public func push(event: Event) async {
        await queue.send(.event(event))
    }

    /// Ends the stream: the pipeline drains and finishes.
    public func finish() { queue.producerFinished() }

    /// Frames dropped by the overflow policy.
    public var dropped: UInt64 { queue.stats.dropped }

    public func run(_ context: NodeContext) async throws {
        defer { queue.consumerFinished() }
        let out = context.output()
        while let frame = await queue.receive() {
            if let e = frame.event { try await context.emit(e); continue }
            try await out.send(frame)
        }
    }

    /// Configuration of `app-source`.
    public struct Configuration: NodeConfiguration {
        public var rate: Int
        public var channels: Int
        public var frameMs: Int
        public var capacity: Int
        public var overflow: OverflowPolicy
        public static let parameters: [ParamSpec] = [
            ParamSpec("rate", .int(1...384_000), default: 16000, doc: "sample rate of the pushed audio"),
            ParamSpec("channels", .int(1...8), default: 1, doc: "channels of the pushed audio"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "nominal frame length (informative)"),
            ParamSpec("capacity", .int(1...100_000), default: 50, doc: "frames queued between the app and the graph"),
            ParamSpec("overflow", .choice(OverflowPolicy.allCases.map(\.rawValue)), default: "block", doc: "what a push does when the queue is full"),
        ]
        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "app-source", summary: "Audio pushed by an embedding Swift app (Pipeline.appSource(id).push); or text (push(text:))",
        family: "sources", inputs: [], outputs: [PortSpec("out", [.audio, .text], doc: "the pushed audio, in the node's format; pushed texts as text frames"), .events],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        executor: .realtime,
        make: { c, _ in AppSourceNode(format: c.format, capacity: c.capacity, overflow: c.overflow) })
}

import Synchronization

/// An atomic counter that returns the value before each addition.
final class Atomic64: Sendable {
    private let value = Atomic<Int64>(0)
    func add(_ n: Int64) -> Int64 { value.wrappingAdd(n, ordering: .relaxed).oldValue }
}
