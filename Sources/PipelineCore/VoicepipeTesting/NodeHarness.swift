import Foundation
import PipelineCore
import Synchronization

/// Runs one node type the way a pipeline would — same runtime, same edges, same context — fed by
/// scripted frames on each input port, on a ``ManualClock``, with every output port and every
/// event recorded. The counterpart of NIO's `EmbeddedChannel` for voicepipe nodes.
///
/// ```swift
/// let h = try NodeHarness(VolumeNode.descriptor, parameters: ["interval_ms": 100])
/// h.send(ScriptedSource.audioFrames(tone, format: .init(sampleRate: 16000, channels: 1), samplesPerFrame: 320))
/// try await h.run()                      // inputs end after what was sent; runs until the node returns
/// #expect(h.events.filter { $0.name == "volume" }.count == 10)
/// #expect(h.output().audio.count == 50)
/// ```
///
/// To interleave input, time and checks, pass a body: it runs while the node runs; inputs end
/// when it returns (if it did not end them itself).
///
/// ```swift
/// try await h.run { h in
///     h.send([frame])
///     await h.clock.advance(by: .seconds(30), waitingFor: 1)   // e.g. a heartbeat timer
///     await h.output("events").wait(for: 1)
/// }
/// ```
public final class NodeHarness: Sendable {
    /// The clock the node sees.
    public let clock: ManualClock
    /// The pipeline around the node (for stats and the node instance).
    public let pipeline: Pipeline
    /// Id of the node under test in the harness's graph.
    public static let nodeID = "node"

    private let feeds: [String: AsyncStream<Frame>.Continuation]
    private let recorders = FrameRecorders()
    private let collected = LockedValue<[Event]>([])
    private let outputNames: [String]

    /// Builds the harness: validates `parameters` against the type (with the same messages as a
    /// graph file) and creates the node. `inputFormat` is the audio format validation assumes on
    /// audio inputs (`nil`: unknown); `environment` is what the node's factory sees.
    public init(_ descriptor: NodeDescriptor, parameters: [String: ParamValue] = [:], inputFormat: AudioFormat? = nil,
                clock: ManualClock = ManualClock(), environment: [String: String] = [:], registry: NodeRegistry = NodeRegistry()) throws {
        self.clock = clock
        var registry = registry
        registry.register(descriptor)
        var feeds: [String: AsyncStream<Frame>.Continuation] = [:]
        // Problems with the parameters are reported as the harness's, not as a place in its source.
        let harness = "<harness \(descriptor.type)>"
        var graph = GraphBuilder(name: "harness", file: harness, environment: environment)
        graph.node(Self.nodeID, descriptor.type, parameters, file: harness, line: 0, column: 0)
        for port in descriptor.inputs {
            let (stream, continuation) = AsyncStream<Frame>.makeStream()
            feeds[port.name] = continuation
            let type = "harness-input-\(port.name)"
            registry.register(NodeDescriptor(
                type: type, summary: "harness input", family: "sources", inputs: [],
                outputs: [PortSpec("out", port.kinds, codecs: port.codecs)],
                configuration: NoConfiguration.self, format: .fixed(inputFormat),
                make: { _, _ in ScriptedSource([], feed: stream) }))
            graph.node("in_\(Self.slug(port.name))", type)
            graph.link("in_\(Self.slug(port.name))", to: "\(Self.nodeID).\(port.name)", capacity: 32)
        }
        let recorders = self.recorders
        registry.register(CollectingSink.descriptor(type: "harness-output", recorders: recorders))
        for port in descriptor.outputs {
            graph.node("out_\(Self.slug(port.name))", "harness-output", ["key": .string(port.name)])
            graph.link("\(Self.nodeID).\(port.name)", to: "out_\(Self.slug(port.name))", capacity: 1000)
        }
        self.feeds = feeds
        self.outputNames = descriptor.outputs.map(\.name)
        var options = Pipeline.Options()
        options.clock = clock
        self.pipeline = try Pipeline(graph, registry: registry, options: options)
    }

    /// The node instance under test.
    public var node: (any Node)? { pipeline.node(Self.nodeID) }

    /// Queues frames on input `port` (delivered in order, through a bounded edge, as the node takes them).
    public func send(_ frames: [Frame], to port: String = "in") {
        guard let feed = feeds[port] else { preconditionFailure("\(port) is not an input port of the node under test") }
        for f in frames { feed.yield(f) }
    }

    /// Queues one frame on input `port`.
    public func send(_ frame: Frame, to port: String = "in") { send([frame], to: port) }

    /// Ends input `port` after what was queued (the node sees end of stream there).
    public func finish(_ port: String = "in") { feeds[port]?.finish() }

    /// Ends every input.
    public func finishInputs() { feeds.values.forEach { $0.finish() } }

    /// What the node sent on output `port` (`events` for its events output).
    public func output(_ port: String = "out") -> FrameRecorder { recorders[port] }

    /// Every event the node emitted (and errors the runtime reported for it), in order.
    public var events: [Event] { collected.withLock { $0 } }

    /// Events named `name`.
    public func events(named name: EventName) -> [Event] { events.filter { $0.name == name } }

    /// Asks the node to stop as a pipeline stop would (sources are cancelled, the rest drain).
    public func stop() { pipeline.stop() }

    /// Runs the node until it returns. Inputs end after what was sent; a failure of the node is
    /// thrown as a ``PipelineError``. After `timeout` of real time the run is stopped and
    /// ``HarnessTimeout`` thrown.
    public func run(timeout: Duration = .seconds(30)) async throws {
        _ = try await run(timeout: timeout) { _ in }
    }

    /// Runs the node while `body` runs; inputs end when `body` returns (if it did not end them).
    /// Returns what `body` returned once the node has returned.
    public func run<T: Sendable>(timeout: Duration = .seconds(30), _ body: @escaping @Sendable (NodeHarness) async throws -> T) async throws -> T {
        let events = pipeline.events(buffer: 1_000_000)
        let timedOut = TimeoutFlag()
        let result: T = try await withThrowingTaskGroup(of: T?.self) { group in
            group.addTask {
                for await e in events { self.collected.withLock { $0.append(e) } }
                return nil
            }
            group.addTask { [pipeline] in
                try await withThrowingTaskGroup(of: Void.self) { inner in
                    inner.addTask { try await pipeline.run() }
                    inner.addTask {
                        try await Task.sleep(for: timeout)
                        timedOut.set()
                        pipeline.stop()
                    }
                    try await inner.next()
                    inner.cancelAll()
                }
                return nil
            }
            let value = try await body(self)
            finishInputs()
            var out: T?
            out = value
            while let r = try await group.next() { if let r { out = r } }
            return out ?? value
        }
        if timedOut.isSet { throw HarnessTimeout(timeout: timeout) }
        return result
    }

    static func slug(_ port: String) -> String { String(port.map { $0.isLetter || $0.isNumber ? $0 : "_" }) }
}

/// The harness stopped a node that had not returned within its timeout.
public struct HarnessTimeout: Error, Sendable, CustomStringConvertible {
    /// The timeout.
    public var timeout: Duration
    public var description: String { "the node did not finish within \(timeout)" }
}

/// Set once when the harness's watchdog fires.
final class TimeoutFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}
