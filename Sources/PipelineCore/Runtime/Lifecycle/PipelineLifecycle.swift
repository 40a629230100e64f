/// The storage of a pipeline's ``LifecycleStateMachine``: the machine behind one lock, the tasks that wait
/// for a stop or an abort parked in it, and its actions run after the lock is released. Every way a run
/// stops goes through it: ``Pipeline/stop()``, ``Pipeline/cancel()``, a node's
/// ``NodeContext/requestPipelineStop()``, a node's end (by its ``NodeTermination``) and the drain deadline.
final class PipelineLifecycle: Sendable {
    typealias Machine = LifecycleStateMachine<CheckedContinuation<Void, Never>>
    typealias Action = Machine.Action

    private let machine: LockedValue<Machine>
    /// The pipeline's clock, as the duration since the pipeline was built.
    let now: @Sendable () -> Duration

    init(drainTimeout: Duration, now: @escaping @Sendable () -> Duration) {
        machine = LockedValue(Machine(drainTimeout: drainTimeout))
        self.now = now
    }

    var state: Pipeline.State { machine.withLock { $0.state } }
    var isStopping: Bool { machine.withLock { $0.isStopping } }
    var isAborting: Bool { machine.withLock { $0.isAborting } }
    var drainDeadline: Duration? { machine.withLock { $0.drainDeadline } }
    var failure: PipelineError? { machine.withLock { $0.failure } }

    /// Runs `actions` in order: resumes waiters itself, hands the rest to `report`.
    private func perform(_ actions: [Action], report: (Action) -> Void = { _ in }) {
        for action in actions {
            if case .resume(let c) = action { c.resume() } else { report(action) }
        }
    }

    /// `run()` starts `nodes` node tasks; false if the pipeline already ran.
    func start(nodes: Int) -> Bool {
        let t = now()
        let (started, actions) = machine.withLock { $0.start(nodes: nodes, now: t) }
        perform(actions)
        return started
    }

    func stop() {
        let t = now()
        perform(machine.withLock { $0.stop(now: t) })
    }

    func cancel() {
        perform(machine.withLock { $0.cancel() })
    }

    /// A node's task ended; returns true if it was the last (the run is over).
    func nodeEnded(_ end: Machine.NodeEnd, policy: NodeTermination, report: (Action) -> Void) -> Bool {
        let t = now()
        let actions = machine.withLock { $0.nodeEnded(end, policy: policy, now: t) }
        perform(actions, report: report)
        return actions.contains { if case .finished = $0 { true } else { false } }
    }

    func drainDeadlinePassed(report: (Action) -> Void) {
        let t = now()
        perform(machine.withLock { $0.drainDeadlinePassed(now: t) }, report: report)
    }

    /// Returns once `wait` has happened, the run is over, or the waiting task is cancelled.
    func wait(for wait: Machine.Wait) async {
        let id = machine.withLock { $0.makeID() }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = machine.withLock { Task.isCancelled || $0.park(id, c, for: wait) }
                if now { c.resume() }
            }
        } onCancel: {
            perform(machine.withLock { $0.cancelWait(id) })
        }
    }
}
