import Foundation
import Logging
import Synchronization

/// What a running node sees of the pipeline: its id and parameters, its ports, the event bus,
/// an injected clock and a logger.
public struct NodeContext: Sendable {
    /// The node's id in the graph.
    public let id: String
    /// The node's validated parameters.
    public let config: NodeConfig
    /// Clock for pacing and timeouts (a manual clock in tests).
    public let clock: any Clock<Duration>
    /// Logger labelled with the node id. Never log secrets.
    public let logger: Logger
    let inputs: [String: InputPort]
    let outputs: [String: OutputPort]
    let shared: PipelineShared
    let counters: NodeCounters
    private let defaultOutput: OutputPort
    private let eventsOutput: OutputPort?

    init(id: String, config: NodeConfig, clock: any Clock<Duration>, logger: Logger,
         inputs: [String: InputPort], outputs: [String: OutputPort], shared: PipelineShared, counters: NodeCounters) {
        self.id = id
        self.config = config
        self.clock = clock
        self.logger = logger
        self.inputs = inputs
        self.outputs = outputs
        self.shared = shared
        self.counters = counters
        self.defaultOutput = outputs["out"] ?? OutputPort(name: "out", targets: [])
        self.eventsOutput = outputs["events"]
    }

    /// The input port `name` (an unconnected or undeclared port ends at once).
    public func input(_ name: String = "in") -> InputPort {
        inputs[name] ?? InputPort(name: name, edge: nil)
    }

    /// The output port `name` (an unconnected or undeclared port discards what it is sent).
    public func output(_ name: String = "out") -> OutputPort {
        if name == "out" { return defaultOutput }
        return outputs[name] ?? OutputPort(name: name, targets: [])
    }

    /// Names of the inputs that have links.
    public var connectedInputs: [String] { inputs.filter { $0.value.isConnected }.map(\.key).sorted() }

    /// Sends a frame on the default output `out`.
    public func send(_ frame: Frame) async throws {
        try await defaultOutput.send(frame)
    }

    /// Seconds since the pipeline started (the `ts` of events).
    public var elapsed: Double { shared.elapsed }

    /// True once shutdown has been requested (SIGINT/SIGTERM or `Pipeline.stop()`).
    public var isStopping: Bool { shared.isStopping }

    /// Emits an event: stamps `node` and `ts`, sends it on the `events` output and to the
    /// pipeline's event stream (``Pipeline/events``).
    public func emit(_ event: Event) async throws {
        var e = event
        if e.node.isEmpty { e.node = id }
        if e.ts == nil { e.ts = shared.elapsed }
        shared.bus.publish(e)
        if let eventsOutput { try await eventsOutput.send(.event(e)) }
    }

    /// Emits an event with fields.
    public func emit(_ name: String, _ fields: [(String, EventValue)] = []) async throws {
        try await emit(Event(name, fields: fields))
    }

    /// Emits an `error` event (the pipeline goes on).
    public func emitError(code: String, message: String) async throws {
        try await emit(Event.error(code: code, message: message))
    }

    /// Reports progress through a finite input (shown by `voicepipe run` on a terminal).
    public func reportProgress(position: Double, total: Double?) {
        shared.progress.update(id, position: position, total: total)
    }

    /// Adds to a named counter of this node (shown with `--stats`), e.g. `overruns`.
    public func count(_ name: String, by n: UInt64 = 1) {
        counters.add(name, n)
    }

}

/// Named counters of one node.
public final class NodeCounters: Sendable {
    private let values = Mutex<[String: UInt64]>([:])
    init() {}
    func add(_ name: String, _ n: UInt64) { values.withLock { $0[name, default: 0] += n } }
    /// A snapshot.
    public var snapshot: [String: UInt64] { values.withLock { $0 } }
}

/// Progress of finite sources.
public final class ProgressBoard: Sendable {
    /// Position and total, in seconds of media.
    public struct Entry: Sendable {
        public var position: Double
        public var total: Double?
    }
    private let entries = Mutex<[String: Entry]>([:])
    init() {}
    func update(_ id: String, position: Double, total: Double?) {
        entries.withLock { $0[id] = Entry(position: position, total: total) }
    }
    /// A snapshot by node id.
    public var snapshot: [String: Entry] { entries.withLock { $0 } }
}

/// Delivers every event of a pipeline to its subscribers (bounded; drops counted).
public final class EventBus: Sendable {
    private struct State {
        var subscribers: [UInt64: AsyncStream<Event>.Continuation] = [:]
        var next: UInt64 = 0
        var dropped: UInt64 = 0
    }
    private let state = Mutex(State())
    init() {}

    /// Events dropped because a subscriber fell more than its buffer behind.
    public var dropped: UInt64 { state.withLock { $0.dropped } }

    func publish(_ event: Event) {
        let subs = state.withLock { Array($0.subscribers.values) }
        guard !subs.isEmpty else { return }
        var drops: UInt64 = 0
        for s in subs {
            if case .dropped = s.yield(event) { drops += 1 }
        }
        if drops > 0 { state.withLock { $0.dropped += drops } }
    }

    func subscribe(buffer: Int) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingOldest(buffer))
        let id = state.withLock { s -> UInt64 in
            s.next += 1
            s.subscribers[s.next] = continuation
            return s.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func finishAll() {
        let subs = state.withLock { s -> [AsyncStream<Event>.Continuation] in
            let v = Array(s.subscribers.values); s.subscribers = [:]; return v
        }
        for s in subs { s.finish() }
    }
}

/// State shared by all nodes of one pipeline run.
final class PipelineShared: Sendable {
    let start = ContinuousClock.now
    let bus = EventBus()
    let progress = ProgressBoard()
    private let stopping = Atomic<Bool>(false)

    var elapsed: Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    var isStopping: Bool { stopping.load(ordering: .relaxed) }
    func markStopping() { stopping.store(true, ordering: .relaxed) }
}
