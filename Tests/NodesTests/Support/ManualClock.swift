import Synchronization

/// A clock that only moves when a test calls ``advance(by:)``; sleepers wake when their deadline
/// is reached. Pass it to `Pipeline(..., clock:)` to drive pacing, heartbeats and timeouts by hand.
final class ManualClock: Clock, Sendable {
    typealias Duration = Swift.Duration

    /// A point on the manual time line.
    struct Instant: InstantProtocol {
        var offset: Swift.Duration
        func advanced(by duration: Swift.Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Swift.Duration { other.offset - offset }
        static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
    }

    private struct Sleeper {
        var deadline: Instant
        var continuation: CheckedContinuation<Void, any Error>
    }

    private struct State {
        var now = Instant(offset: .zero)
        var sleepers: [UInt64: Sleeper] = [:]
        var next: UInt64 = 0
    }

    private let state = Mutex(State())

    var now: Instant { state.withLock { $0.now } }
    var minimumResolution: Swift.Duration { .nanoseconds(1) }

    /// Tasks sleeping now.
    var sleepers: Int { state.withLock { $0.sleepers.count } }

    func sleep(until deadline: Instant, tolerance: Swift.Duration? = nil) async throws {
        let id = state.withLock { s -> UInt64 in s.next += 1; return s.next }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let ready = state.withLock { s -> Bool? in
                    if Task.isCancelled { return false }
                    if deadline <= s.now { return true }
                    s.sleepers[id] = Sleeper(deadline: deadline, continuation: c)
                    return nil
                }
                if ready == true { c.resume() } else if ready == false { c.resume(throwing: CancellationError()) }
            }
        } onCancel: {
            state.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
        }
    }

    /// Moves time forward and wakes every sleeper whose deadline has come.
    func advance(by duration: Swift.Duration) {
        let due = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.now = s.now.advanced(by: duration)
            let ids = s.sleepers.filter { $0.value.deadline <= s.now }.map(\.key)
            return ids.compactMap { s.sleepers.removeValue(forKey: $0)?.continuation }
        }
        due.forEach { $0.resume() }
    }
}
