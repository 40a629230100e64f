/// Wakes the tasks waiting for a condition over some shared state when that state changes: the owner
/// of the state calls ``notify()`` after each change, and a waiter sleeps until its condition holds or
/// its deadline passes. No polling: a waiter runs only when something changed or its time is up.
///
/// ```swift
/// let drained = await sessionsChanged.wait(until: .now + grace) { sessionCount == 0 }
/// ```
public final class ChangeSignal: Sendable {
    private struct Waiters {
        var next: UInt64 = 0
        var all: [UInt64: AsyncStream<Void>.Continuation] = [:]
    }
    private let waiters = LockedValue(Waiters())

    public init() {}

    /// Something the waiters watch has changed: each re-checks its condition.
    public func notify() {
        let all = waiters.withLock { Array($0.all.values) }
        for w in all { w.yield() }
    }

    /// Waits until `condition` holds (true) or `deadline` passes (false: the condition did not hold
    /// then), or the task is cancelled (the condition as it is then). The condition is checked at once,
    /// then after each ``notify()``.
    public func wait(until deadline: ContinuousClock.Instant, for condition: @escaping @Sendable () -> Bool) async -> Bool {
        let (changes, continuation) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        let id = waiters.withLock { w -> UInt64 in
            w.next += 1
            w.all[w.next] = continuation
            return w.next
        }
        defer {
            _ = waiters.withLock { $0.all.removeValue(forKey: id) }
            continuation.finish()
        }
        // Registered before the first check: a change after the check still wakes this waiter.
        if condition() { return true }
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask {
                for await _ in changes where condition() { return true }
                return condition()
            }
            group.addTask {
                try? await Task.sleep(until: deadline, clock: .continuous)
                return condition()
            }
            let met = await group.next() ?? false
            group.cancelAll()
            return met
        }
    }
}
