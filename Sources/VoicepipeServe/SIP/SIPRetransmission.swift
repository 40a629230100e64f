import PipelineCore

/// When an unreliable transport repeats a message (RFC 3261 §17): a 2xx to INVITE until its ACK (Timers G
/// and H), a request until its response (Timers E and F). Starts at T1, doubles up to T2, gives up at 64·T1.
/// Over a reliable transport (TCP) nothing is repeated (Timers A, E and G are not started, RFC 3261
/// §17.1.1.2, §17.1.2.2) and only the 64·T1 limit remains.
/// Pure: the caller says how long it has been since the first send and performs what it is told.
struct SIPRetransmission: Sendable, Equatable {
    enum Action: Sendable, Equatable {
        /// Nothing to do before this many milliseconds since the first send.
        case wait(untilMs: Int)
        case retransmit
        /// 64·T1 passed without the answer: the transaction failed (a 2xx never ACKed ends the call with BYE).
        case giveUp
        /// The answer came: stop.
        case done
    }

    let t1Ms: Int
    let t2Ms: Int
    let reliable: Bool
    private var intervalMs: Int
    private var nextMs: Int
    private(set) var sent = 1
    private var finished = false

    init(t1Ms: Int = 500, t2Ms: Int = 4000, reliable: Bool = false) {
        self.t1Ms = t1Ms
        self.t2Ms = t2Ms
        self.reliable = reliable
        intervalMs = t1Ms
        nextMs = reliable ? 64 * t1Ms : t1Ms
    }

    var deadlineMs: Int { 64 * t1Ms }

    /// The answer (ACK, or a response) arrived.
    mutating func answered() { finished = true }

    /// What to do at `elapsedMs` since the first send.
    mutating func poll(elapsedMs: Int) -> Action {
        if finished { return .done }
        if elapsedMs >= deadlineMs { finished = true; return .giveUp }
        guard elapsedMs >= nextMs else { return .wait(untilMs: min(nextMs, deadlineMs)) }
        intervalMs = min(intervalMs * 2, t2Ms)
        nextMs += intervalMs
        sent += 1
        return .retransmit
    }

    /// Performs what is due at `now` for a transaction that started at `start` (`retransmit` for each
    /// repetition due) and returns when to look again: nil once given up (`giveUp` was called) or done.
    mutating func due(now: ContinuousClock.Instant, since start: ContinuousClock.Instant, retransmit: () -> Void, giveUp: () -> Void) -> ContinuousClock.Instant? {
        while true {
            switch poll(elapsedMs: Int((now - start) / .milliseconds(1))) {
            case .retransmit: retransmit()
            case .wait(let until): return start + .milliseconds(until)
            case .giveUp: giveUp(); return nil
            case .done: return nil
            }
        }
    }
}

/// One pending wake-up at a deadline (a task sleeping until it), for the SIP transaction timers: setting
/// it again replaces the previous one. `fire` runs when the deadline passes (it may run once more just
/// after a replacement; the receiver re-checks its timers either way).
final class SIPAlarm: Sendable {
    private let fire: @Sendable () -> Void
    private let pending = LockedValue<Task<Void, Never>?>(nil)

    init(fire: @escaping @Sendable () -> Void) { self.fire = fire }

    func set(at deadline: ContinuousClock.Instant?) {
        let fire = self.fire
        let task = deadline.map { d in
            Task {
                try? await Task.sleep(until: d, clock: .continuous)
                if !Task.isCancelled { fire() }
            }
        }
        pending.withLock { p in
            p?.cancel()
            p = task
        }
    }

    func cancel() { set(at: nil) }

    deinit { pending.withLock { $0?.cancel() } }
}
