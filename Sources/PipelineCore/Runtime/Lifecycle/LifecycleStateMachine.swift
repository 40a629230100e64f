/// A pipeline's life as a pure value: ready → running → draining(deadline) → cancelling(reason) →
/// finished(outcome). No lock, no clock and no continuation of its own: every event is a `mutating`
/// function that returns the ``Action``s the caller performs once it has released the lock (resume a
/// waiting task, report a failure or a drain that ran out, end the run). ``PipelineLifecycle`` keeps it
/// behind a lock; the tests drive it through every event in every state.
///
/// `Waiter` is whatever the storage parks: continuations in ``PipelineLifecycle``, numbers in the tests.
/// Time is the pipeline's clock, as the duration since the pipeline was built.
///
/// Rules, in one place:
/// - ``stop(now:)`` drains: sources stop, the rest runs until it ends or the deadline passes, then is
///   cancelled. ``cancel()`` cancels every node at once. Both may come before ``start(nodes:now:)``
///   (they then take effect as the run starts), from any node, and more than once.
/// - When a node's task ends, its ``NodeTermination`` says what the pipeline does: nothing, stop, or cancel.
///   The first failure that cancels the pipeline is the outcome, whatever came before it.
/// - Tasks waiting for the stop are resumed on leaving `running` (or at once if it has been left);
///   tasks waiting for the abort on entering `cancelling`; everything waiting, at the end.
/// - The run ends (`finished`) when the last node's task has ended; its outcome is where it was then.
struct LifecycleStateMachine<Waiter> {
    typealias ID = UInt64

    /// What was asked before the run started.
    enum Request: Sendable, Hashable { case stop, cancel }

    /// Why the nodes are being cancelled.
    enum CancelReason: Sendable {
        /// ``cancel()`` (or a node whose termination policy cancels the pipeline when it finishes).
        case cancelled
        /// A stop did not drain before its deadline.
        case drainRanOut
        /// A node failed.
        case failed(PipelineError)
    }

    enum Phase: Sendable {
        case ready(requested: Request?)
        case running
        /// Sources stopped; the rest drains until `deadline` (on the pipeline's clock).
        case draining(deadline: Duration)
        case cancelling(CancelReason)
        case finished(Pipeline.Outcome, failure: PipelineError?)
    }

    /// What a waiter waits for.
    enum Wait: Sendable, Hashable {
        /// The pipeline left `running` (sources stop on it; the drain watchdog starts on it).
        case stop
        /// The pipeline is cancelling (every node stops on it).
        case abort
    }

    /// What the caller does after releasing the lock, in order.
    enum Action {
        /// A node failed and the pipeline is cancelled because of it (or goes on, if its policy says so):
        /// log it and publish its `error` event.
        case reportFailure(PipelineError)
        /// The drain ran out: say what is left queued.
        case reportDrainTimeout
        /// Resume a waiting task.
        case resume(Waiter)
        /// The last node's task ended: the run is over.
        case finished(Pipeline.Outcome)
    }

    /// How a node's task ended.
    enum NodeEnd: Sendable {
        case finished
        case failed(PipelineError)
    }

    let drainTimeout: Duration
    private(set) var phase: Phase = .ready(requested: nil)
    /// Node tasks started and not yet ended.
    private(set) var running = 0
    private var stopWaiters: [(id: ID, waiter: Waiter)] = []
    private var abortWaiters: [(id: ID, waiter: Waiter)] = []
    private var nextID: ID = 0

    init(drainTimeout: Duration) {
        self.drainTimeout = drainTimeout
    }

    mutating func makeID() -> ID {
        nextID &+= 1
        return nextID
    }

    // MARK: Reading

    /// The public view of the phase.
    var state: Pipeline.State {
        switch phase {
        case .ready: .ready
        case .running: .running
        case .draining: .draining
        case .cancelling: .cancelling
        case .finished(let outcome, _): .finished(outcome)
        }
    }

    /// True once a stop, a cancel or a failure has been asked for (what nodes read as `isStopping`).
    var isStopping: Bool {
        switch phase {
        case .ready(let requested): requested != nil
        case .running: false
        case .draining, .cancelling: true
        case .finished(let outcome, _): outcome != .completed
        }
    }

    /// True once every node is being cancelled.
    var isAborting: Bool {
        switch phase {
        case .ready(let requested): requested == .cancel
        case .running, .draining: false
        case .cancelling: true
        case .finished(let outcome, _): outcome != .completed && outcome != .stopped
        }
    }

    /// When the drain must be over, while draining.
    var drainDeadline: Duration? {
        if case .draining(let deadline) = phase { return deadline }
        return nil
    }

    /// The failure that ended the run, once finished.
    var failure: PipelineError? {
        if case .finished(_, let failure) = phase { return failure }
        return nil
    }

    var waiting: Int { stopWaiters.count + abortWaiters.count }

    // MARK: Events

    /// `run()` starts `nodes` node tasks. Returns false (and nothing changes) if the pipeline already ran.
    mutating func start(nodes: Int, now: Duration) -> (started: Bool, [Action]) {
        guard case .ready(let requested) = phase else { return (false, []) }
        running = nodes
        switch requested {
        case nil: phase = .running
        case .stop: phase = .draining(deadline: now + drainTimeout)
        case .cancel: phase = .cancelling(.cancelled)
        }
        var actions: [Action] = []
        if nodes == 0 { finish(into: &actions) }
        return (true, actions)
    }

    /// A graceful stop: from `running`, drain until `now` plus the drain timeout.
    mutating func stop(now: Duration) -> [Action] {
        var actions: [Action] = []
        switch phase {
        case .ready(let requested):
            if requested == nil { phase = .ready(requested: .stop) }
        case .running:
            phase = .draining(deadline: now + drainTimeout)
            resumeStopWaiters(into: &actions)
        case .draining, .cancelling, .finished:
            break
        }
        return actions
    }

    /// Cancel every node now.
    mutating func cancel() -> [Action] {
        var actions: [Action] = []
        switch phase {
        case .ready:
            phase = .ready(requested: .cancel)
        case .running, .draining:
            enterCancelling(.cancelled, into: &actions)
        case .cancelling, .finished:
            break
        }
        return actions
    }

    /// The drain watchdog woke at `now`: past the deadline, the rest is cancelled.
    mutating func drainDeadlinePassed(now: Duration) -> [Action] {
        var actions: [Action] = []
        if case .draining(let deadline) = phase, now >= deadline {
            actions.append(.reportDrainTimeout)
            enterCancelling(.drainRanOut, into: &actions)
        }
        return actions
    }

    /// A node's task ended (after any restarts its policy allowed); `policy` says what that does to the
    /// pipeline. After the last, the run is finished.
    mutating func nodeEnded(_ end: NodeEnd, policy: NodeTermination, now: Duration) -> [Action] {
        var actions: [Action] = []
        guard running > 0 else { return actions }
        switch end {
        case .finished:
            react(policy.onFinish, failure: nil, now: now, into: &actions)
        case .failed(let error):
            react(policy.onFailure, failure: error, now: now, into: &actions)
        }
        running -= 1
        if running == 0 { finish(into: &actions) }
        return actions
    }

    /// A task waits for `wait`. Returns true if it must not wait (that has happened already, or the run
    /// is over); otherwise it is parked until an action resumes it.
    mutating func park(_ id: ID, _ waiter: Waiter, for wait: Wait) -> Bool {
        if case .finished = phase { return true }
        switch wait {
        case .stop:
            if isStopping { return true }
            stopWaiters.append((id, waiter))
        case .abort:
            if isAborting { return true }
            abortWaiters.append((id, waiter))
        }
        return false
    }

    /// A parked waiter's task was cancelled: it resumes.
    mutating func cancelWait(_ id: ID) -> [Action] {
        if let i = stopWaiters.firstIndex(where: { $0.id == id }) { return [.resume(stopWaiters.remove(at: i).waiter)] }
        if let i = abortWaiters.firstIndex(where: { $0.id == id }) { return [.resume(abortWaiters.remove(at: i).waiter)] }
        return []
    }

    // MARK: Transitions

    private mutating func react(_ reaction: NodeTermination.Reaction, failure: PipelineError?, now: Duration, into actions: inout [Action]) {
        switch reaction {
        case .ignore:
            if let failure { actions.append(.reportFailure(failure)) }
        case .stopPipeline:
            if let failure { actions.append(.reportFailure(failure)) }
            actions += stop(now: now)
        case .cancelPipeline:
            guard let failure else {
                actions += cancel()
                return
            }
            switch phase {
            case .running, .draining:
                actions.append(.reportFailure(failure))
                enterCancelling(.failed(failure), into: &actions)
            case .cancelling(.failed):
                break   // the first failure is the outcome; the rest follow from it
            case .cancelling:
                actions.append(.reportFailure(failure))
                phase = .cancelling(.failed(failure))
            case .ready, .finished:
                break
            }
        }
    }

    private mutating func enterCancelling(_ reason: CancelReason, into actions: inout [Action]) {
        phase = .cancelling(reason)
        resumeStopWaiters(into: &actions)
        actions += abortWaiters.map { .resume($0.waiter) }
        abortWaiters = []
    }

    private mutating func resumeStopWaiters(into actions: inout [Action]) {
        actions += stopWaiters.map { .resume($0.waiter) }
        stopWaiters = []
    }

    private mutating func finish(into actions: inout [Action]) {
        let outcome: Pipeline.Outcome
        var failure: PipelineError?
        switch phase {
        case .ready, .running: outcome = .completed
        case .draining: outcome = .stopped
        case .cancelling(.failed(let error)): outcome = .failed(node: error.node, code: error.code); failure = error
        case .cancelling: outcome = .cancelled
        case .finished(let o, let f): outcome = o; failure = f
        }
        phase = .finished(outcome, failure: failure)
        actions += (stopWaiters + abortWaiters).map { .resume($0.waiter) }
        stopWaiters = []
        abortWaiters = []
        actions.append(.finished(outcome))
    }
}
extension LifecycleStateMachine.Action: Sendable where Waiter: Sendable {}
