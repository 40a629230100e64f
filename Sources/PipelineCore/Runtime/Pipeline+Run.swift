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
        guard lifecycle.withLock({ $0.start() }) else {
            throw PipelineError(node: "pipeline", code: .alreadyRun, message: "this pipeline has already run; build a new one to run the graph again")
        }
        defer { shared.bus.finishAll() }
        await withTaskGroup(of: ChildResult?.self) { group in
            let tasks = graph.nodes.filter { !fused.contains($0.id) }
            if tasks.contains(where: { $0.executor == .realtime }), let status = RealtimeScheduling.statusOnce(), status != "granted" {
                logger.notice("real-time scheduling is not in use (\(status)); timing-critical nodes run on their own threads at normal priority")
            }
            for n in tasks {
                // Latency-critical nodes run on the real-time executor, apart from bulk work.
                let executor: (any TaskExecutor)? = n.executor == .realtime ? RealtimeExecutor.shared : nil
                group.addTask(executorPreference: executor) { [self] in
                    let result = await self.runNode(n)
                    if case .failed(let error) = result, lifecycle.withLock({ $0.failed(error) }) {
                        self.logger.error("\(error.description)")
                        self.shared.bus.publish(Event(.error, node: error.node, ts: self.shared.elapsed,
                                                      fields: [("code", .string(error.code.rawValue)), ("message", .string(error.message))]))
                        self.shared.markStopping()
                        self.stopSignal.fire()
                        self.stopSignal.abort()
                    }
                    return result
                }
            }
            // Drain watchdog: after a stop, give the graph the drain timeout on the pipeline's clock, then
            // cancel everything. (It returns nil: it is not a node.)
            group.addTask { [self] in
                await self.stopSignal.wait()
                try? await self.clock.sleep(for: self.drainTimeout)
                // Cancelled: every node ended within the drain; nothing to cut short.
                if Task.isCancelled { return nil }
                if !self.stopSignal.aborted {
                    self.lifecycle.withLock { $0.drainTimedOut() }
                    // What the cancellation leaves unprocessed is said, with its count (the drain timeout is
                    // the policy that drops it).
                    let queued = self.edges.values.reduce(0) { $0 + $1.depth }
                    let ms = Int64(self.drainTimeout.components.seconds * 1000 + self.drainTimeout.components.attoseconds / 1_000_000_000_000_000)
                    self.logger.warning("stop: the graph did not drain within \(ms) ms; cancelling it with \(queued) frame(s) still queued")
                    self.shared.bus.publish(Event(.drainTimeout, node: "pipeline", ts: self.shared.elapsed,
                                                  fields: [("timeout_ms", .int(ms)), ("queued_frames", .int(Int64(queued)))]))
                }
                self.stopSignal.abort()
                return nil
            }
            var remaining = tasks.count
            while remaining > 0, let result = await group.next() {
                if result != nil { remaining -= 1 }
            }
            group.cancelAll()
        }
        let failure = lifecycle.withLock { l -> PipelineError? in
            _ = l.finish()
            return l.failure
        }
        if let failure { throw failure }
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
                let stopping = shared.isStopping || Task.isCancelled
                if error is CancellationError || (stopping && n.descriptor.isSource) || stopSignal.aborted {
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

