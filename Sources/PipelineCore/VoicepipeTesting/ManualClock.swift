import Synchronization
import PipelineCore

/// A clock that only moves when a test calls ``advance(by:)``; sleepers wake when their deadline
/// is reached. Pass it to `Pipeline(..., clock:)` or ``NodeHarness`` to drive pacing, heartbeats and
/// timeouts by hand.
///
/// ```swift
/// let clock = ManualClock()
/// // ... start something that sleeps on `clock` ...
/// await clock.advance(by: .milliseconds(20), waitingFor: 1)   // wake it once it sleeps
/// ```
public final class ManualClock: Clock, Sendable {
    public typealias Duration = Swift.Duration

    /// A point on the manual time line.
    public struct Instant: InstantProtocol {
        public var offset: Swift.Duration
        public init(offset: Swift.Duration) { self.offset = offset }
        public func advanced(by duration: Swift.Duration) -> Instant { Instant(offset: offset + duration) }
        public func duration(to other: Instant) -> Swift.Duration { other.offset - offset }
        public static func < (a: Instant, b: Instant) -> Bool { a.offset < b.offset }
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

    private let state = LockedValue(State())

    /// A clock at offset zero.
    public init() {}

    public var now: Instant { state.withLock { $0.now } }
    public var minimumResolution: Swift.Duration { .nanoseconds(1) }

    /// Tasks sleeping now.
    public var sleepers: Int { state.withLock { $0.sleepers.count } }

    /// When the tasks sleeping now wake, earliest first: to wait for one particular timer (a heartbeat
    /// due at 30 s) when other tasks sleep on the same clock.
    public var deadlines: [Instant] { state.withLock { $0.sleepers.values.map(\.deadline) }.sorted() }

    public func sleep(until deadline: Instant, tolerance: Swift.Duration? = nil) async throws {
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
    public func advance(by duration: Swift.Duration) {
        let due = state.withLock { s -> [CheckedContinuation<Void, any Error>] in
            s.now = s.now.advanced(by: duration)
            let ids = s.sleepers.filter { $0.value.deadline <= s.now }.map(\.key)
            return ids.compactMap { s.sleepers.removeValue(forKey: $0)?.continuation }
        }
        due.forEach { $0.resume() }
    }

    /// Waits (in real time, up to `timeout`) until at least `count` tasks sleep on this clock, then
    /// advances it. Returns false if they did not get there in time (the clock is advanced anyway).
    @discardableResult
    public func advance(by duration: Swift.Duration, waitingFor count: Int, timeout: Swift.Duration = .seconds(5)) async -> Bool {
        let ok = await waitForSleepers(count, timeout: timeout)
        advance(by: duration)
        return ok
    }

    /// Waits (in real time, up to `timeout`) until at least `count` tasks sleep on this clock.
    @discardableResult
    public func waitForSleepers(_ count: Int, timeout: Swift.Duration = .seconds(5)) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while sleepers < count {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(1))
        }
        return true
    }
}
