/// When an unreliable transport repeats a message (RFC 3261 §17): a 2xx to INVITE until its ACK (Timers G
/// and H), a request until its response (Timers E and F). Starts at T1, doubles up to T2, gives up at 64·T1.
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
    private var intervalMs: Int
    private var nextMs: Int
    private(set) var sent = 1
    private var finished = false

    init(t1Ms: Int = 500, t2Ms: Int = 4000) {
        self.t1Ms = t1Ms
        self.t2Ms = t2Ms
        intervalMs = t1Ms
        nextMs = t1Ms
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
}
