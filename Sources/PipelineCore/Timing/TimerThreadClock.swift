import Foundation
import Synchronization

/// A clock like `ContinuousClock` whose sleeps are woken by a dedicated timer thread instead of
/// the cooperative pool's timer queue. Real-time nodes (sources pacing at 1x, sinks, RTP) get it as
/// their `context.clock` when the pipeline runs on the continuous clock: a wake-up then resumes the
/// task directly on its executor (the real-time executor), so a busy pool cannot delay it.
public struct TimerThreadClock: Clock, Sendable {
    public typealias Duration = Swift.Duration
    public typealias Instant = ContinuousClock.Instant

    /// A clock on the process's timer thread.
    public init() {}

    public var now: Instant { ContinuousClock.now }
    public var minimumResolution: Swift.Duration { .microseconds(1) }

    public func sleep(until deadline: Instant, tolerance: Swift.Duration? = nil) async throws {
        try await TimerThread.shared.sleep(until: deadline)
    }

    /// Tasks sleeping on the timer thread now (every `TimerThreadClock` shares it).
    public var sleepers: Int { TimerThread.shared.count }
}

/// The thread behind ``TimerThreadClock``: keeps sleepers ordered by deadline and resumes each at
/// its deadline (at real-time priority where the system allows it).
final class TimerThread: @unchecked Sendable {
    // @unchecked: `sleepers` and `nextID` are only touched under `condition`'s lock.
    static let shared = TimerThread()

    private struct Sleeper {
        var deadline: ContinuousClock.Instant
        var continuation: CheckedContinuation<Void, any Error>
    }
    private let condition = NSCondition()
    private var sleepers: [UInt64: Sleeper] = [:]
    private var nextID: UInt64 = 0

    private init() {
        let t = Thread { [unowned self] in
            RealtimeScheduling.applyToCurrentThread()
            self.loop()
        }
        t.name = "voicepipe-timer"
        t.stackSize = 256 * 1024
        t.start()
    }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let id = newID()
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                add(id, deadline: deadline, c)
            }
        } onCancel: {
            remove(id)?.resume(throwing: CancellationError())
        }
    }

    private func newID() -> UInt64 {
        condition.lock()
        defer { condition.unlock() }
        nextID += 1
        return nextID
    }

    private func add(_ id: UInt64, deadline: ContinuousClock.Instant, _ c: CheckedContinuation<Void, any Error>) {
        condition.lock()
        if Task.isCancelled {
            condition.unlock()
            c.resume(throwing: CancellationError())
            return
        }
        if deadline <= ContinuousClock.now {
            condition.unlock()
            c.resume()
            return
        }
        sleepers[id] = Sleeper(deadline: deadline, continuation: c)
        condition.signal()
        condition.unlock()
    }

    /// Sleepers waiting now.
    var count: Int {
        condition.lock()
        defer { condition.unlock() }
        return sleepers.count
    }

    private func remove(_ id: UInt64) -> CheckedContinuation<Void, any Error>? {
        condition.lock()
        defer { condition.unlock() }
        return sleepers.removeValue(forKey: id)?.continuation
    }

    private func loop() {
        while true {
            condition.lock()
            let now = ContinuousClock.now
            var due: [CheckedContinuation<Void, any Error>] = []
            var earliest: ContinuousClock.Instant?
            for (id, s) in sleepers {
                if s.deadline <= now {
                    due.append(s.continuation)
                    sleepers[id] = nil
                } else if earliest == nil || s.deadline < earliest! {
                    earliest = s.deadline
                }
            }
            if due.isEmpty {
                if let earliest {
                    let wait = now.duration(to: earliest)
                    let seconds = Double(wait.components.seconds) + Double(wait.components.attoseconds) / 1e18
                    _ = condition.wait(until: Date(timeIntervalSinceNow: seconds))
                } else {
                    condition.wait()
                }
                condition.unlock()
                continue
            }
            condition.unlock()
            for c in due { c.resume() }
        }
    }
}
