import Foundation

extension Pipeline {
    /// How one node's task ended.
    enum ChildResult: Sendable {
        /// The node returned and its outputs were finished (or it was stopped as a source).
        case finished
        /// The node failed (after any restarts its policy allowed).
        case failed(PipelineError)
    }

    /// Runs every node until the sinks finish, a stop completes, or a node fails
    /// (then throws ``PipelineError``). A pipeline runs once; ``state`` tells where it is.
    public func run() async throws {
        let tasks = graph.nodes.filter { !fused.contains($0.id) }
        guard lifecycle.start(nodes: tasks.count) else {
            throw PipelineError(node: "pipeline", code: .alreadyRun, message: "this pipeline has already run; build a new one to run the graph again")
        }
        defer { shared.bus.finishAll() }
        await withTaskGroup(of: Bool.self) { group in
            if tasks.contains(where: { $0.executor == .realtime }), let status = RealtimeScheduling.statusOnce(), status != "granted" {
                logger.notice("real-time scheduling is not in use (\(status)); timing-critical nodes run on their own threads at normal priority")
            }
            for n in tasks {
                // Latency-critical nodes run on the real-time executor, apart from bulk work.
                let executor: (any TaskExecutor)? = n.executor == .realtime ? RealtimeExecutor.shared : nil
                let policy = options.termination[n.id] ?? .default
                group.addTask(executorPreference: executor) { [self] in
                    let end: PipelineLifecycle.Machine.NodeEnd = switch await self.runNode(n) {
                    case .finished: .finished
                    case .failed(let error): .failed(error)
                    }
                    // True for the last node: the run is over.
                    return lifecycle.nodeEnded(end, policy: policy, report: report)
                }
            }
            // The drain watchdog (not a node): after a stop, the rest of the graph has the drain timeout.
            group.addTask { [self] in
                await watchDrain()
                return false
            }
            while let last = await group.next() {
                if last { break }
            }
            group.cancelAll()
        }
        if let failure = lifecycle.failure { throw failure }
    }

    /// Waits for a stop, then, while the graph drains, for its deadline on the pipeline's clock; past it,
    /// the rest is cancelled.
    private func watchDrain() async {
        await lifecycle.wait(for: .stop)
        while !Task.isCancelled, let deadline = lifecycle.drainDeadline {
            try? await clock.sleep(for: deadline - lifecycle.now())
            if Task.isCancelled { return }
            lifecycle.drainDeadlinePassed(report: report)
        }
    }

    /// Performs what the lifecycle asks to be said.
    private func report(_ action: PipelineLifecycle.Action) {
        switch action {
        case .reportFailure(let error):
            logger.error("\(error.description)")
            shared.bus.publish(Event(.error, node: error.node, ts: shared.elapsed,
                                     fields: [("code", .string(error.code.rawValue)), ("message", .string(error.message))]))
        case .reportDrainTimeout:
            // What the cancellation leaves unprocessed is said, with its count (the drain timeout is the policy
            // that drops it).
            let queued = edges.values.reduce(0) { $0 + $1.depth }
            let ms = Int64(drainTimeout.components.seconds * 1000 + drainTimeout.components.attoseconds / 1_000_000_000_000_000)
            logger.warning("stop: the graph did not drain within \(ms) ms; cancelling it with \(queued) frame(s) still queued")
            shared.bus.publish(Event(.drainTimeout, node: "pipeline", ts: shared.elapsed,
                                     fields: [("timeout_ms", .int(ms)), ("queued_frames", .int(Int64(queued)))]))
        case .resume, .finished:
            break
        }
    }

    /// Runs one node with its restart policy.
    private func runNode(_ n: ResolvedNode) async -> ChildResult {
        if var error = await runNodeWithRestarts(n) {
            // A failure's message may quote a peer (an error body, a server's message): without the node's secrets.
            if let secrets = contexts[error.node]?.secrets { error.message = secrets.scrub(error.message) }
            return .failed(error)
        }
        return .finished
    }

    /// Runs one node with its restart policy; returns its failure, if any.
    private func runNodeWithRestarts(_ n: ResolvedNode) async -> PipelineError? {
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
                return PipelineError(node: fusedError.node, code: nodeError?.code ?? .nodeFailed, message: nodeError?.message ?? "\(fusedError.error)")
            } catch {
                let stopping = lifecycle.isStopping || Task.isCancelled
                if error is CancellationError || (stopping && n.descriptor.isSource) || lifecycle.isAborting {
                    return await close(n, context)
                }
                let nodeError = error as? NodeError
                let message = context.secrets.scrub(nodeError?.message ?? "\(error)")
                if let policy = n.restart, attempt < policy.max, !stopping {
                    attempt += 1
                    restarts.withLock { $0[n.id, default: 0] += 1 }
                    logger.warning("node '\(n.id)' failed (\(message)); restart \(attempt) of \(policy.max) in \(policy.backoffMs) ms")
                    shared.bus.publish(Event(.restart, node: n.id, ts: shared.elapsed,
                                             fields: [("attempt", .int(Int64(attempt))), ("message", .string(message))]))
                    try? await clock.sleep(for: .milliseconds(policy.backoffMs))
                    do {
                        let fresh = try n.descriptor.build(n.configuration, Pipeline.environment(for: n, graph: graph, clock: clock, logger: logger))
                        instances.withLock { $0[n.id] = fresh }
                    } catch {
                        _ = await close(n, context)
                        return PipelineError(node: n.id, code: .createFailed, message: "\(error)")
                    }
                    continue
                }
                _ = await close(n, context)
                return PipelineError(node: n.id, code: nodeError?.code ?? .nodeFailed, message: message)
            }
        }
    }

    private func close(_ n: ResolvedNode, _ context: NodeContext) async -> PipelineError? {
        for p in n.descriptor.outputs {
            do { try await context.output(p.name).finish() } catch let e as FusedFailure {
                let ne = e.error as? NodeError
                return PipelineError(node: e.node, code: ne?.code ?? .nodeFailed, message: ne?.message ?? "\(e.error)")
            } catch {
                let ne = error as? NodeError
                return PipelineError(node: n.id, code: ne?.code ?? .flushFailed, message: ne?.message ?? "\(error)")
            }
        }
        return nil
    }

    /// Runs a node so that a stop cancels it if it is a source, and an abort (cancel, failure, drain run
    /// out) cancels it in any case.
    private func runAbortable(_ node: any Node, context: NodeContext, isSource: Bool) async throws {
        try await withThrowingTaskGroup(of: Bool.self) { group in
            group.addTask { try await node.run(context); return true }
            group.addTask { [lifecycle] in
                await lifecycle.wait(for: isSource ? .stop : .abort)
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

