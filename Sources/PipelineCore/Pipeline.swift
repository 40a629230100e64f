import Foundation
import Logging
import Synchronization

/// A node failed and the pipeline stopped. `voicepipe run` exits with code 1 on this error.
public struct PipelineError: Error, Sendable, CustomStringConvertible {
    /// Id of the node that failed.
    public var node: String
    /// Stable code (from ``NodeError`` when the node threw one).
    public var code: String
    /// What happened.
    public var message: String

    /// Creates an error.
    public init(node: String, code: String, message: String) {
        self.node = node
        self.code = code
        self.message = message
    }

    public var description: String { "node '\(node)' failed: \(message)" }
}

/// Statistics of one node after (or during) a run.
public struct NodeStats: Sendable {
    /// Node id.
    public var id: String
    /// Times the node was restarted after a failure.
    public var restarts: Int
    /// Node-specific counters (overruns, late packets, ...).
    public var counters: [String: UInt64]
}

/// A running instance of a validated graph: one child task per node under one task group.
///
/// ```swift
/// let pipeline = try Pipeline(yaml: text, registry: BuiltinNodes.registry())
/// let events = pipeline.events()            // every event, as an AsyncSequence
/// async let done: Void = pipeline.run()
/// for await e in events where e.name == "transcript" { print(e["text"] ?? "") }
/// try await done
/// ```
public final class Pipeline: Sendable {
    /// The graph being run.
    public let graph: ValidatedGraph
    /// How long to let queued frames drain after a stop before cancelling every node.
    public let drainTimeout: Duration
    let clock: any Clock<Duration>
    let logger: Logger
    let shared = PipelineShared()
    let edges: [String: BoundedEdge]          // keyed by "node.port" of the consumer
    let edgeOrder: [String]
    let contexts: [String: NodeContext]
    let instances: Mutex<[String: any Node]>
    let restarts = Mutex<[String: Int]>([:])
    let stopSignal = StopSignal()
    let counters: [String: NodeCounters]
    let fused: Set<String>
    let fusedEdges: [String: FusedLink]

    /// Builds the pipeline: creates every edge and node (nothing runs yet).
    /// Throws ``PipelineError`` naming the node whose factory failed.
    public init(graph: ValidatedGraph, clock: any Clock<Duration> = ContinuousClock(),
                logger: Logger = Logger(label: "voicepipe"), drainTimeout: Duration = .milliseconds(1500)) throws {
        self.graph = graph
        self.clock = clock
        self.logger = logger
        self.drainTimeout = drainTimeout

        var edges: [String: BoundedEdge] = [:]
        // One queue per consumer input port; several links into one port share it (fan-in).
        let byInput = Dictionary(grouping: graph.links, by: { "\($0.toNode).\($0.toPort)" })
        for key in byInput.keys.sorted() {
            let links = byInput[key]!
            let label = links.count == 1 ? links[0].label : links.map { "\($0.fromNode).\($0.fromPort)" }.joined(separator: "+") + " -> \(key)"
            edges[key] = BoundedEdge(capacity: links.map(\.capacity).max()!, overflow: links[0].overflow, label: label, producers: links.count)
        }
        self.edgeOrder = graph.links.map { "\($0.toNode).\($0.toPort)" }.reduce(into: [String]()) { if !$0.contains($1) { $0.append($1) } }

        var instances: [String: any Node] = [:]
        for n in graph.nodes {
            do {
                instances[n.id] = try n.descriptor.make(n.config)
            } catch {
                throw PipelineError(node: n.id, code: (error as? NodeError)?.code ?? "create_failed", message: "\(error)")
            }
        }
        self.instances = Mutex(instances)

        // Operator fusion: a FrameProcessor fed by exactly one lossless link from another
        // FrameProcessor whose port feeds nothing else is called directly in its producer's task.
        let fusion = Pipeline.fusionAllowed && !(ProcessInfo.processInfo.environment["VOICEPIPE_NO_FUSION"] == "1")
        var fusedLinks: Set<ResolvedLink> = []
        if fusion {
            for l in graph.links {
                guard let down = graph.node(l.toNode), let up = graph.node(l.fromNode),
                      instances[l.toNode] is any FrameProcessor, instances[l.fromNode] is any FrameProcessor,
                      !up.descriptor.isSource, down.restart == nil, up.restart == nil, l.overflow == .block,
                      l.toPort == down.descriptor.defaultInput?.name,
                      graph.links.filter({ $0.toNode == l.toNode }).count == 1,
                      graph.links.filter({ $0.fromNode == l.fromNode && $0.fromPort == l.fromPort }).count == 1
                else { continue }
                fusedLinks.insert(l)
            }
        }
        self.fused = Set(fusedLinks.map(\.toNode))
        for l in fusedLinks { edges.removeValue(forKey: "\(l.toNode).\(l.toPort)") }
        self.edges = edges
        var fusedEdges: [String: FusedLink] = [:]

        var contexts: [String: NodeContext] = [:]
        var counters: [String: NodeCounters] = [:]
        for n in graph.nodes.reversed() {
            var inputs: [String: InputPort] = [:]
            for p in n.descriptor.inputs {
                inputs[p.name] = InputPort(name: p.name, edge: edges["\(n.id).\(p.name)"])
            }
            var outputs: [String: OutputPort] = [:]
            for p in n.descriptor.outputs {
                var seen: Set<String> = []
                var targets: [OutputTarget] = []
                for l in graph.links where l.fromNode == n.id && l.fromPort == p.name {
                    let key = "\(l.toNode).\(l.toPort)"
                    guard seen.insert(key).inserted else { continue }
                    if fusedLinks.contains(l), let processor = instances[l.toNode] as? any FrameProcessor, let downContext = contexts[l.toNode],
                       let down = graph.node(l.toNode) {
                        let link = FusedLink(label: l.label, node: l.toNode, processor: processor, context: downContext) {
                            for q in down.descriptor.outputs { try await downContext.output(q.name).finish() }
                        }
                        fusedEdges[key] = link
                        targets.append(.fused(link))
                    } else if let e = edges[key] {
                        targets.append(.edge(e))
                    }
                }
                outputs[p.name] = OutputPort(name: p.name, targets: targets)
            }
            var nodeLogger = logger
            nodeLogger[metadataKey: "node"] = .string(n.id)
            let c = NodeCounters()
            counters[n.id] = c
            contexts[n.id] = NodeContext(id: n.id, config: n.config, clock: clock, logger: nodeLogger,
                                         inputs: inputs, outputs: outputs, shared: shared, counters: c)
        }
        self.contexts = contexts
        self.counters = counters
        self.fusedEdges = fusedEdges
    }

    /// Set to false to give every node its own task (for measurements).
    nonisolated(unsafe) public static var fusionAllowed = true

    /// Loads, validates and builds a graph from YAML text.
    public convenience init(yaml: String, registry: NodeRegistry, file: String = "<string>", overrides: [Override] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            clock: any Clock<Duration> = ContinuousClock()) throws {
        let spec = GraphLoader.parse(yaml, file: file, environment: environment, overrides: overrides)
        try self.init(graph: GraphValidator.validate(spec, registry: registry), clock: clock)
    }

    /// Loads, validates and builds a graph from a file.
    public convenience init(path: String, registry: NodeRegistry, overrides: [Override] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment,
                            clock: any Clock<Duration> = ContinuousClock()) throws {
        try self.init(graph: GraphValidator.load(path: path, registry: registry, overrides: overrides, environment: environment), clock: clock)
    }

    /// The node instance with id `id` (e.g. to reach an ``AppSourceNode``).
    public func node(_ id: String) -> (any Node)? { instances.withLock { $0[id] } }

    /// The `app-source` node `id`, through which an embedding app pushes audio.
    public func appSource(_ id: String) -> AppSourceNode? { node(id) as? AppSourceNode }

    /// Every event any node emits, from now on, as an `AsyncSequence` (bounded: `buffer` events,
    /// further ones dropped and counted in ``eventsDropped``). Ends when the pipeline ends.
    public func events(buffer: Int = 4096) -> AsyncStream<Event> { shared.bus.subscribe(buffer: buffer) }

    /// Events dropped because an ``events(buffer:)`` consumer fell behind.
    public var eventsDropped: UInt64 { shared.bus.dropped }

    /// Per-edge counters, in link order.
    public var edgeStats: [EdgeStats] { edgeOrder.compactMap { edges[$0]?.stats ?? fusedEdges[$0]?.stats } }

    /// Per-node restarts and counters.
    public var nodeStats: [NodeStats] {
        let r = restarts.withLock { $0 }
        return graph.nodes.map { NodeStats(id: $0.id, restarts: r[$0.id] ?? 0, counters: counters[$0.id]?.snapshot ?? [:]) }
    }

    /// Progress of finite sources (position and total in media seconds).
    public var progress: [String: ProgressBoard.Entry] { shared.progress.snapshot }

    /// Asks the pipeline to stop gracefully: sources stop, queued frames drain, sinks flush.
    /// After ``drainTimeout`` every node is cancelled. Safe to call from any thread, more than once.
    public func stop() {
        shared.markStopping()
        stopSignal.fire()
    }

    /// Runs every node until the sinks finish, a stop completes, or a node fails
    /// (then throws ``PipelineError``).
    public func run() async throws {
        defer { shared.bus.finishAll() }
        let failure = FailureBox()
        await withTaskGroup(of: Void.self) { group in
            let tasks = graph.nodes.filter { !fused.contains($0.id) }
            for n in tasks {
                group.addTask { [self] in
                    if let error = await self.runNode(n) {
                        let first = failure.record(error)
                        if first {
                            self.logger.error("\(error.description)")
                            self.shared.bus.publish(Event("error", node: error.node, ts: self.shared.elapsed,
                                                          fields: [("code", .string(error.code)), ("message", .string(error.message))]))
                            self.shared.markStopping()
                            self.stopSignal.fire()
                            self.stopSignal.abort()
                        }
                    }
                }
            }
            // Drain watchdog: after a stop, give the graph `drainTimeout`, then cancel everything.
            group.addTask { [self] in
                await self.stopSignal.wait()
                try? await Task.sleep(for: self.drainTimeout)
                self.stopSignal.abort()
            }
            var remaining = tasks.count
            while remaining > 0, await group.next() != nil {
                remaining -= 1
            }
            group.cancelAll()
        }
        if let f = failure.first { throw f }
    }

    /// Runs one node with its restart policy; returns its failure, if any.
    private func runNode(_ n: ResolvedNode) async -> PipelineError? {
        let context = contexts[n.id]!
        defer {
            for p in n.descriptor.inputs { edges["\(n.id).\(p.name)"]?.consumerFinished() }
        }
        var attempt = 0
        while true {
            let node = instances.withLock { $0[n.id]! }
            do {
                try await runAbortable(node, context: context, isSource: n.descriptor.isSource)
                return await close(n, context)
            } catch let fusedError as FusedFailure {
                let nodeError = fusedError.error as? NodeError
                _ = await close(n, context)
                return PipelineError(node: fusedError.node, code: nodeError?.code ?? "node_failed", message: nodeError?.message ?? "\(fusedError.error)")
            } catch {
                let stopping = shared.isStopping || Task.isCancelled
                if error is CancellationError || (stopping && n.descriptor.isSource) || stopSignal.aborted {
                    return await close(n, context)
                }
                let nodeError = error as? NodeError
                let message = nodeError?.message ?? "\(error)"
                if let policy = n.restart, attempt < policy.max, !stopping {
                    attempt += 1
                    restarts.withLock { $0[n.id, default: 0] += 1 }
                    logger.warning("node '\(n.id)' failed (\(message)); restart \(attempt) of \(policy.max) in \(policy.backoffMs) ms")
                    shared.bus.publish(Event("restart", node: n.id, ts: shared.elapsed,
                                             fields: [("attempt", .int(Int64(attempt))), ("message", .string(message))]))
                    try? await clock.sleep(for: .milliseconds(policy.backoffMs))
                    do {
                        let fresh = try n.descriptor.make(n.config)
                        instances.withLock { $0[n.id] = fresh }
                    } catch {
                        _ = await close(n, context)
                        return PipelineError(node: n.id, code: "create_failed", message: "\(error)")
                    }
                    continue
                }
                _ = await close(n, context)
                return PipelineError(node: n.id, code: nodeError?.code ?? "node_failed", message: message)
            }
        }
    }

    private func close(_ n: ResolvedNode, _ context: NodeContext) async -> PipelineError? {
        for p in n.descriptor.outputs {
            do { try await context.output(p.name).finish() } catch let e as FusedFailure {
                let ne = e.error as? NodeError
                return PipelineError(node: e.node, code: ne?.code ?? "node_failed", message: ne?.message ?? "\(e.error)")
            } catch {
                let ne = error as? NodeError
                return PipelineError(node: n.id, code: ne?.code ?? "flush_failed", message: ne?.message ?? "\(error)")
            }
        }
        return nil
    }

    /// Runs a node so that a stop cancels it if it is a source, and an abort cancels it in any case.
    private func runAbortable(_ node: any Node, context: NodeContext, isSource: Bool) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { try await node.run(context); return true }
            group.addTask { [stopSignal] in
                if isSource { await stopSignal.wait() } else { await stopSignal.waitAbort() }
                return false
            }
            defer { group.cancelAll() }
            while let finished = try await group.next() {
                if finished { return }
                group.cancelAll()
            }
        }
    }
}

/// A one-shot signal that many tasks can await: `fire()` for a graceful stop, `abort()` to cancel all.
final class StopSignal: Sendable {
    private struct State {
        var fired = false
        var aborted = false
        var next: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var abortWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }
    private let state = Mutex(State())

    var aborted: Bool { state.withLock { $0.aborted } }

    func fire() {
        let w = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            if s.fired { return [] }
            s.fired = true
            let w = Array(s.waiters.values); s.waiters = [:]; return w
        }
        w.forEach { $0.resume() }
    }

    func abort() {
        fire()
        let w = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            if s.aborted { return [] }
            s.aborted = true
            let w = Array(s.abortWaiters.values); s.abortWaiters = [:]; return w
        }
        w.forEach { $0.resume() }
    }

    /// Returns when the signal fires (or the waiting task is cancelled).
    func wait() async { await wait(abort: false) }
    /// Returns on abort (or when the waiting task is cancelled).
    func waitAbort() async { await wait(abort: true) }

    private func wait(abort: Bool) async {
        let id = state.withLock { s -> UInt64 in s.next += 1; return s.next }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if abort ? s.aborted : s.fired { return true }
                    if Task.isCancelled { return true }
                    if abort { s.abortWaiters[id] = c } else { s.waiters[id] = c }
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            let w = state.withLock { s -> CheckedContinuation<Void, Never>? in
                abort ? s.abortWaiters.removeValue(forKey: id) : s.waiters.removeValue(forKey: id)
            }
            w?.resume()
        }
    }
}

/// The first failure of a run.
final class FailureBox: Sendable {
    private let value = Mutex<PipelineError?>(nil)
    /// Records `error` if it is the first; returns whether it was.
    func record(_ error: PipelineError) -> Bool {
        value.withLock { v in
            if v == nil { v = error; return true }
            return false
        }
    }
    var first: PipelineError? { value.withLock { $0 } }
}
