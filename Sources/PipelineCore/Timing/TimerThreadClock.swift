import Foundation

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

/// The thread behind ``TimerThreadClock``: resumes each sleeper at its deadline (at real-time priority
/// where the system allows it). The rules live in ``TimerStateMachine``; this class holds it in a
/// ``LockedCondition`` the thread waits on, and resumes continuations only after releasing it.
final class TimerThread: Sendable {
    static let shared = TimerThread()

    private typealias Machine = TimerStateMachine<ContinuousClock.Instant, CheckedContinuation<Void, any Error>>
    private let machine = LockedCondition(Machine())

    private init() {
        let t = Thread { [unowned self] in
            RealtimeScheduling.applyToCurrentThread()
            self.loop()
        }
        t.name = "voicepipe-timer"
        t.stackSize = 256 * 1024
        t.start()
    }

    private func locked<T>(_ body: (inout Machine) -> T) -> T {
        machine.withLock { (body(&$0), wake: .none) }
    }

    func sleep(until deadline: ContinuousClock.Instant) async throws {
        let id = locked { $0.makeID() }
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Void, any Error>) in
                let now = ContinuousClock.now
                let cancelled = Task.isCancelled
                let outcome = machine.withLock { m -> (Machine.AddOutcome, wake: LockedCondition<Machine>.Wake) in
                    let outcome = m.add(id, deadline: deadline, c, now: now, cancelled: cancelled)
                    if case .parked(wakeThread: true) = outcome { return (outcome, wake: .one) }
                    return (outcome, wake: .none)
                }
                switch outcome {
                case .resumeNow: c.resume()
                case .cancelledNow: c.resume(throwing: CancellationError())
                case .parked: break
                }
            }
        } onCancel: {
            locked { $0.cancel(id) }?.resume(throwing: CancellationError())
        }
    }

    /// Sleepers waiting now.
    var count: Int { locked { $0.count } }

    private func loop() {
        while true {
            let due = machine.wait { m -> LockedCondition<Machine>.Step<[CheckedContinuation<Void, any Error>]> in
                let (due, next) = m.due(now: ContinuousClock.now)
                return due.isEmpty ? .wait(until: next) : .done(due)
            }
            for c in due { c.resume() }
        }
    }
}
