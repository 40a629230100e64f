/// The rules of the timer thread behind ``TimerThreadClock``, as a pure value: sleepers by deadline, with
/// no lock, no clock and no thread of its own. Every event returns what the caller does once it has
/// released the lock: resume sleepers, wake the timer thread, or nothing.
///
/// `Instant` is the clock's (a number in the tests); `Sleeper` is whatever the storage parks
/// (continuations in ``TimerThread``).
///
/// Rules:
/// - A sleep whose deadline has passed, or whose task is already cancelled, is answered at once.
/// - The thread is woken only when a new sleeper becomes the earliest (otherwise its current wait
///   already ends in time).
/// - Due sleepers resume in deadline order (then in the order they came); a cancelled one resumes with
///   cancellation and is never resumed again.
struct TimerStateMachine<Instant: Comparable, Sleeper> {
    typealias ID = UInt64

    enum AddOutcome {
        /// The deadline has passed: resume the sleeper now.
        case resumeNow
        /// The task is cancelled: resume the sleeper with cancellation now.
        case cancelledNow
        /// Parked; `wakeThread` when the thread must recompute its wait (a new earliest deadline).
        case parked(wakeThread: Bool)
    }

    private var sleepers: [(id: ID, deadline: Instant, sleeper: Sleeper)] = []
    private var nextID: ID = 0

    init() {}

    mutating func makeID() -> ID {
        nextID &+= 1
        return nextID
    }

    /// Sleepers parked now.
    var count: Int { sleepers.count }
    /// The earliest deadline parked (what the thread waits for), `nil` when nobody sleeps.
    var earliest: Instant? { sleepers.first?.deadline }

    /// A task sleeps until `deadline`.
    mutating func add(_ id: ID, deadline: Instant, _ sleeper: Sleeper, now: Instant, cancelled: Bool) -> AddOutcome {
        if cancelled { return .cancelledNow }
        if deadline <= now { return .resumeNow }
        // Kept sorted by deadline; equal deadlines keep their arrival order.
        let i = sleepers.firstIndex { $0.deadline > deadline } ?? sleepers.endIndex
        sleepers.insert((id, deadline, sleeper), at: i)
        return .parked(wakeThread: i == 0)
    }

    /// A sleeping task was cancelled: the sleeper to resume with cancellation, if it still sleeps.
    mutating func cancel(_ id: ID) -> Sleeper? {
        guard let i = sleepers.firstIndex(where: { $0.id == id }) else { return nil }
        return sleepers.remove(at: i).sleeper
    }

    /// The thread woke at `now`: the sleepers due, in deadline order, and the next deadline to wait for.
    mutating func due(now: Instant) -> (due: [Sleeper], next: Instant?) {
        let n = sleepers.firstIndex { $0.deadline > now } ?? sleepers.endIndex
        let due = sleepers[..<n].map(\.sleeper)
        sleepers.removeFirst(n)
        return (due, earliest)
    }
}
