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
    /// Logger labelled with the node id. Never log secrets: its lines pass through ``secrets``.
    public let logger: Logger
    /// The node's secrets, taken out of every event it emits and every line its logger writes. A node
    /// that takes a secret from elsewhere than its parameters adds it here.
    public let secrets: SecretScrubber
    let inputs: [String: InputPort]
    let outputs: [String: OutputPort]
    let shared: PipelineShared
    let counters: NodeCounters
    let carrier: AgeCarrier
    let lateness: LatenessWatch?
    private let defaultOutput: OutputPort
    private let eventsOutput: OutputPort?

    init(id: String, config: NodeConfig, clock: any Clock<Duration>, logger: Logger,
         inputs: [String: InputPort], outputs: [String: OutputPort], shared: PipelineShared, counters: NodeCounters,
         carrier: AgeCarrier = AgeCarrier(), lateness: LatenessWatch? = nil, secrets: SecretScrubber = SecretScrubber()) {
        self.carrier = carrier
        self.secrets = secrets
        self.lateness = lateness
        self.id = id
        self.config = config
        self.clock = clock
        self.logger = secrets.logger(logger)
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

    /// Asks the whole pipeline to stop gracefully, as SIGINT does: sources stop, queued frames
    /// drain, sinks finalize. For a node whose consumer went away for good (a closed stdout).
    public func requestPipelineStop() {
        shared.requestStop()
    }

    /// Emits an event: stamps `node` and `ts`, sends it on the `events` output and to the
    /// pipeline's event stream (``Pipeline/events``).
    public func emit(_ event: Event) async throws {
        var e = secrets.scrub(event)
        if e.node.isEmpty { e.node = id }
        if e.ts == nil { e.ts = shared.elapsed }
        shared.bus.publish(e)
        if let eventsOutput { try await eventsOutput.send(.event(e)) }
    }

    /// Emits an event with fields.
    public func emit(_ name: EventName, _ fields: [(String, EventValue)] = []) async throws {
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

    /// Sets a named gauge of this node (shown with `--stats`), e.g. `clock_drift_ppm`.
    public func gauge(_ name: String, _ value: Double) {
        counters.set(name, value)
    }

    /// Adds to a named counter of this node (shown with `--stats`), e.g. `overruns`.
    public func count(_ name: String, by n: UInt64 = 1) {
        counters.add(name, n)
    }

}
