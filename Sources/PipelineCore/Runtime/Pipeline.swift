import Foundation
import Logging
import Synchronization

/// A running instance of a validated graph: one child task per node under one task group.
///
/// ```swift
/// let pipeline = try Pipeline(yaml: text, registry: BuiltinNodes.registry())
/// let events = pipeline.events()            // every event, as an AsyncSequence
/// async let done: Void = pipeline.run()
/// for await e in events where e.name == .transcript { print(e["text"] ?? "") }
/// try await done
/// ```
public final class Pipeline: Sendable {
    /// How a pipeline runs, given when it is built: no global switch and no environment variable
    /// changes it afterwards.
    public struct Options: Sendable {
        /// The clock nodes sleep on and the drain timeout runs on (a ``ManualClock`` in tests).
        public var clock: any Clock<Duration> = ContinuousClock()
        public var logger = Logger(label: "voicepipe")
        /// After ``Pipeline/stop()``, how long queued frames may drain before every node is cancelled.
        public var drainTimeout: Duration = .milliseconds(1500)
        /// Linear chains of processors run in one task (off: every node in a task of its own, as
        /// measurements of the edges want).
        public var fusion = true
        /// What the pipeline does when a node's task ends, by node id (``NodeTermination/default`` for the rest:
        /// a node that finishes leaves the others running, a failure cancels the pipeline).
        public var termination: [String: NodeTermination] = [:]
        public init() {}
    }

    /// Where a pipeline is in its life. `ready` → `running` → (`draining` after ``stop()``) →
    /// (`cancelling` after ``cancel()``, a failure or a drain that ran out) → `finished`.
    public enum State: Sendable, Equatable {
        case ready
        case running
        case draining
        case cancelling
        case finished(Outcome)
    }

    /// How a run ended.
    public enum Outcome: Sendable, Equatable {
        /// Every source ended and everything was processed.
        case completed
        /// ``stop()``: the sources stopped and the graph drained within the drain timeout.
        case stopped
        /// ``cancel()``, or a stop whose drain ran out: nodes were cancelled with work queued.
        case cancelled
        /// A node failed (``run()`` throws its ``PipelineError``).
        case failed(node: String, code: NodeErrorCode)
    }

    /// The graph being run.
    public let graph: ValidatedGraph
    public let options: Options
    /// How long to let queued frames drain after a stop before cancelling every node.
    public var drainTimeout: Duration { options.drainTimeout }
    var clock: any Clock<Duration> { options.clock }
    var logger: Logger { options.logger }
    /// The pipeline's life: every stop, cancel and node end goes through it.
    var lifecycle: PipelineLifecycle { shared.lifecycle }
    let shared: PipelineShared
    let edges: [String: BoundedEdge]          // keyed by "node.port" of the consumer
    let edgeOrder: [String]
    let contexts: [String: NodeContext]
    let instances: LockedValue<[String: any Node]>
    let restarts = LockedValue<[String: Int]>([:])
    let counters: [String: NodeCounters]
    let fused: Set<String>
    let fusedEdges: [String: FusedLink]
    /// Queues, fused links and build order, decided before any node was made.
    public let plan: PipelinePlan
    let mediaClock: MediaClock

    /// Builds the pipeline: creates every edge and node (nothing runs yet).
    /// Throws ``PipelineError`` naming the node whose factory failed.
    public convenience init(graph: ValidatedGraph, clock: any Clock<Duration> = ContinuousClock(),
                            logger: Logger = Logger(label: "voicepipe"), drainTimeout: Duration = .milliseconds(1500)) throws {
        var options = Options()
        options.clock = clock
        options.logger = logger
        options.drainTimeout = drainTimeout
        try self.init(graph: graph, options: options)
    }

    /// Builds the pipeline with `options`: creates every edge and node (nothing runs yet).
    /// Throws ``PipelineError`` naming the node whose factory failed.
    public init(graph: ValidatedGraph, options: Options) throws {
        self.graph = graph
        self.options = options
        let clock = options.clock, logger = options.logger

        let mediaClock = MediaClock(clock)
        self.mediaClock = mediaClock
        self.shared = PipelineShared(lifecycle: PipelineLifecycle(drainTimeout: options.drainTimeout, now: mediaClock.now))
        let plan = PipelinePlan(graph, fusion: options.fusion)
        self.plan = plan
        // One queue per consumer input port; several links into one port share it (fan-in).
        var edges: [String: BoundedEdge] = [:]
        for q in plan.queues {
            edges[q.input] = BoundedEdge(capacity: q.capacity, overflow: q.overflow, label: q.label, producers: q.producers, clock: mediaClock)
        }
        self.edgeOrder = plan.inputOrder
        self.edges = edges
        let nodeByID = Dictionary(graph.nodes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var linksFrom: [String: [ResolvedLink]] = [:]
        for l in graph.links { linksFrom[l.fromNode, default: []].append(l) }

        var instances: [String: any Node] = [:]
        for n in graph.nodes {
            do {
                instances[n.id] = try n.descriptor.build(n.configuration, Pipeline.environment(for: n, graph: graph, clock: clock, logger: logger))
            } catch {
                throw PipelineError(node: n.id, code: (error as? NodeError)?.code ?? .createFailed, message: "\(error)")
            }
            if n.descriptor.fusable, !(instances[n.id] is any FrameProcessor) {
                throw PipelineError(node: n.id, code: .configurationMismatch,
                                    message: "node type \(n.descriptor.type) declares itself fusable, but its node is not a FrameProcessor")
            }
        }
        self.instances = LockedValue(instances)
        self.fused = plan.fusedNodes
        let fusedLinks = plan.fused
        var fusedEdges: [String: FusedLink] = [:]

        var contexts: [String: NodeContext] = [:]
        var counters: [String: NodeCounters] = [:]
        for id in plan.contextOrder {
            guard let n = nodeByID[id] else { continue }
            let c = NodeCounters()
            counters[n.id] = c
            let carrier = AgeCarrier()
            let stamp = FrameStamp(carrier: carrier, clock: mediaClock)
            var outputs: [String: OutputPort] = [:]
            for p in n.descriptor.outputs {
                var seen: Set<String> = []
                var targets: [OutputTarget] = []
                for l in linksFrom[n.id] ?? [] where l.fromPort == p.name {
                    let key = "\(l.toNode).\(l.toPort)"
                    guard seen.insert(key).inserted else { continue }
                    if fusedLinks.contains(l), let processor = instances[l.toNode] as? any FrameProcessor, let downContext = contexts[l.toNode],
                       let down = nodeByID[l.toNode] {
                        let link = FusedLink(label: l.label, node: l.toNode, processor: processor, context: downContext, clock: mediaClock) {
                            for q in down.descriptor.outputs { try await downContext.output(q.name).finish() }
                        }
                        fusedEdges[key] = link
                        targets.append(.fused(link))
                    } else if let e = edges[key] {
                        targets.append(.edge(e))
                    }
                }
                outputs[p.name] = OutputPort(name: p.name, targets: targets, stamp: stamp)
            }
            // A sink (a node of the sinks family, or one with no outputs but events) checks the graph's latency budget on what it takes.
            var lateness: LatenessWatch?
            if let budget = graph.latencyBudgetMs, !n.descriptor.inputs.isEmpty,
               n.descriptor.family == "sinks" || n.descriptor.outputs.allSatisfy({ $0.kinds == [.event] }) {
                let events = outputs["events"]
                let shared = self.shared
                let id = n.id
                lateness = LatenessWatch(budget: .milliseconds(budget), clock: mediaClock) { age in
                    c.add("late", 1)
                    let e = Event(.late, node: id, ts: shared.elapsed,
                                  fields: [("age_ms", .double((age.milliseconds * 10).rounded() / 10)), ("budget_ms", .int(Int64(budget)))])
                    shared.bus.publish(e)
                    try? await events?.send(.event(e))
                }
            }
            var inputs: [String: InputPort] = [:]
            for p in n.descriptor.inputs {
                let loops = plan.loopInputs.contains("\(n.id).\(p.name)")
                inputs[p.name] = InputPort(name: p.name, edge: edges["\(n.id).\(p.name)"], carrier: carrier, lateness: lateness,
                                           closesLoop: loops)
            }
            var nodeLogger = logger
            nodeLogger[metadataKey: "node"] = .string(n.id)
            contexts[n.id] = NodeContext(id: n.id, config: n.config, clock: Pipeline.clock(for: n, clock), logger: nodeLogger,
                                         inputs: inputs, outputs: outputs, shared: shared, counters: c,
                                         carrier: carrier, lateness: lateness,
                                         secrets: SecretScrubber(config: n.config, parameters: n.descriptor.parameters))
        }
        self.contexts = contexts
        self.counters = counters
        self.fusedEdges = fusedEdges
    }

    /// What a node's factory is given from outside the graph.
    static func environment(for n: ResolvedNode, graph: ValidatedGraph, clock: any Clock<Duration>, logger: Logger) -> NodeEnvironment {
        NodeEnvironment(id: n.id, variables: graph.environment, clock: Pipeline.clock(for: n, clock),
                        logger: SecretScrubber(config: n.config, parameters: n.descriptor.parameters).logger(logger))
    }

    /// The clock a node sees: real-time nodes sleep on the timer thread (so a busy cooperative pool
    /// cannot delay their wake-ups) when the pipeline runs on the continuous clock.
    static func clock(for n: ResolvedNode, _ clock: any Clock<Duration>) -> any Clock<Duration> {
        n.executor == .realtime && clock is ContinuousClock ? TimerThreadClock() : clock
    }

    /// Loads, validates and builds a graph from YAML text.
    public convenience init(yaml: String, registry: NodeRegistry, file: String = "<string>", overrides: [Override] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            clock: (any Clock<Duration>)? = nil, options: Options = Options()) throws {
        let spec = GraphLoader.parse(yaml, file: file, environment: environment, overrides: overrides)
        var options = options
        if let clock { options.clock = clock }
        try self.init(graph: GraphValidator.validate(spec, registry: registry), options: options)
    }

    /// Loads, validates and builds a graph from a file.
    public convenience init(path: String, registry: NodeRegistry, overrides: [Override] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            clock: (any Clock<Duration>)? = nil, options: Options = Options()) throws {
        var options = options
        if let clock { options.clock = clock }
        try self.init(graph: GraphValidator.load(path: path, registry: registry, overrides: overrides, environment: environment), options: options)
    }

    /// The node instance with id `id` (e.g. to reach an ``AppSourceNode``).
    public func node(_ id: String) -> (any Node)? { instances.withLock { $0[id] } }

    /// The `app-source` node `id`, through which an embedding app pushes audio.
    public func appSource(_ id: String) -> AppSourceNode? { node(id) as? AppSourceNode }

    /// The `app-sink` node `id`, whose ``AppSinkNode/frames`` the embedding app reads.
    public func appSink(_ id: String) -> AppSinkNode? { node(id) as? AppSinkNode }

    /// Every event any node emits, from now on, as an `AsyncSequence` (bounded: `buffer` events,
    /// further ones dropped and counted in ``eventsDropped``). Ends when the pipeline ends.
    public func events(buffer: Int = 4096) -> AsyncStream<Event> { shared.bus.subscribe(buffer: buffer) }

    /// Events dropped because an ``events(buffer:)`` consumer fell behind.
    public var eventsDropped: UInt64 { shared.bus.dropped }

    /// Per-edge counters, in link order.
    public var edgeStats: [EdgeStats] { edgeOrder.compactMap { edges[$0]?.stats ?? fusedEdges[$0]?.stats } }

    /// End-to-end media age at each sink (a node without outputs other than events), from the
    /// frames it took: every input edge's ages merged, in node order.
    public var sinkAges: [(node: String, age: AgeSummary)] {
        var out: [(String, AgeSummary)] = []
        for n in graph.nodes where !n.descriptor.inputs.isEmpty && n.descriptor.outputs.allSatisfy({ $0.kinds == [.event] }) {
            var merged = AgeHistogram()
            for p in n.descriptor.inputs {
                let key = "\(n.id).\(p.name)"
                if let h = edges[key]?.ageHistogram ?? fusedEdges[key]?.ageHistogram { merged.merge(h) }
            }
            if let s = merged.summary { out.append((n.id, s)) }
        }
        return out
    }

    /// Per-node restarts and counters.
    public var nodeStats: [NodeStats] {
        let r = restarts.withLock { $0 }
        return graph.nodes.map { NodeStats(id: $0.id, restarts: r[$0.id] ?? 0, counters: counters[$0.id]?.snapshot ?? [:], gauges: counters[$0.id]?.gauges ?? [:]) }
    }

    /// Progress of finite sources (position and total in media seconds).
    public var progress: [String: ProgressBoard.Entry] { shared.progress.snapshot }

    /// Where the pipeline is in its life.
    public var state: State { lifecycle.state }

    /// Asks the pipeline to stop gracefully: sources stop, queued frames drain, sinks flush.
    /// After ``drainTimeout`` (on the pipeline's clock) every node is cancelled. Safe to call from any
    /// thread, more than once, before or during ``run()``.
    public func stop() {
        lifecycle.stop()
    }

    /// Cancels every node now, without draining: what is queued is dropped (counted on its edge).
    /// Safe to call from any thread, more than once.
    public func cancel() {
        lifecycle.cancel()
    }
}
