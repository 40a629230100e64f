import PipelineCore
import Synchronization

/// A sink that records every frame it receives in a ``FrameRecorder`` (optionally slowly, to
/// exercise back-pressure and overflow policies).
public final class CollectingSink: Node {
    /// Where frames go.
    public let recorder: FrameRecorder
    /// Real-time delay before taking each frame.
    public let delay: Duration
    /// Real-time pause after the first frame (a consumer that stalls once).
    public let stall: Duration

    /// Creates a sink.
    public init(recorder: FrameRecorder, delay: Duration = .zero, stall: Duration = .zero) {
        self.recorder = recorder
        self.delay = delay
        self.stall = stall
    }

    public func run(_ context: NodeContext) async throws {
        var first = true
        for await frame in context.input() {
            if delay > .zero { try? await Task.sleep(for: delay) }
            recorder.append(frame)
            if first && stall > .zero { try? await Task.sleep(for: stall) }
            first = false
        }
        recorder.finish()
    }

    /// Configuration of the `collect` type: `key` picks a recorder of the board, `delay_ms` slows it.
    public struct Configuration: NodeConfiguration {
        public var key: String
        public var delayMs: Int
        public var stallMs: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("key", .string, default: "", doc: "which recorder of the board receives the frames"),
            ParamSpec("delay_ms", .int(0...60_000), default: 0, doc: "real-time delay before taking each frame"),
            ParamSpec("stall_ms", .int(0...60_000), default: 0, doc: "stop reading for this long after the first frame (a stalled consumer)"),
        ]
        var sink: (Duration, Duration) { (.milliseconds(delayMs), .milliseconds(stallMs)) }
    }

    /// A node type (default `collect`) whose instances record into `recorders` by their `key`
    /// parameter (the node id when `key` is empty). It accepts every frame kind.
    public static func descriptor(type: String = "collect", recorders: FrameRecorders) -> NodeDescriptor {
        NodeDescriptor(
            type: type, summary: "records every frame it receives (testing)", family: "sinks",
            inputs: [PortSpec("in", Set(FrameKind.allCases))], outputs: [],
            configuration: Configuration.self, format: .none,
            make: { c, env in CollectingSink(recorder: recorders[c.key.isEmpty ? env.id : c.key], delay: c.sink.0, stall: c.sink.1) })
    }

    /// A node type that records into one recorder.
    public static func descriptor(type: String = "collect", recorder: FrameRecorder) -> NodeDescriptor {
        NodeDescriptor(
            type: type, summary: "records every frame it receives (testing)", family: "sinks",
            inputs: [PortSpec("in", Set(FrameKind.allCases))], outputs: [],
            configuration: Configuration.self, format: .none,
            make: { c, _ in CollectingSink(recorder: recorder, delay: c.sink.0, stall: c.sink.1) })
    }
}

/// Recorders by name, created on first use: what several collecting sinks of one graph share with a test.
public final class FrameRecorders: Sendable {
    private let byName = LockedValue<[String: FrameRecorder]>([:])

    /// An empty board.
    public init() {}

    /// The recorder named `name`.
    public subscript(name: String) -> FrameRecorder {
        byName.withLock { r in
            if let x = r[name] { return x }
            let x = FrameRecorder()
            r[name] = x
            return x
        }
    }
}
