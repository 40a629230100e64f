import Foundation
import Testing
import PipelineCore

/// Waiting for a condition over shared state, woken by the state's owner instead of polling.
@Suite("Change signal")
struct ChangeSignalTests {
    @Test("a waiter wakes when a change makes its condition true, not before and not at a tick")
    func wakesOnChange() async throws {
        let signal = ChangeSignal()
        let count = LockedValue(3)
        let checks = LockedValue(0)
        let started = ContinuousClock.now
        async let met = signal.wait(until: .now + .seconds(30)) {
            checks.withLock { $0 += 1 }
            return count.withLock { $0 } == 0
        }
        for _ in 0..<3 {
            try await Task.sleep(for: .milliseconds(30))
            count.withLock { $0 -= 1 }
            signal.notify()
        }
        #expect(await met)
        #expect(ContinuousClock.now - started < .seconds(10))
        // The condition is checked at once and after each change (and once more as the wait ends), never on a timer.
        #expect(checks.withLock { $0 } <= 6)
    }

    @Test("the deadline ends a wait whose condition never holds, with false")
    func deadline() async {
        let signal = ChangeSignal()
        let started = ContinuousClock.now
        let met = await signal.wait(until: .now + .milliseconds(150)) { false }
        #expect(!met)
        #expect(ContinuousClock.now - started >= .milliseconds(150))
    }

    @Test("a change between registering and sleeping is not lost, for many waiters at once")
    func noLostWakeUps() async {
        let signal = ChangeSignal()
        let flag = LockedValue(false)
        await withTaskGroup(of: Bool.self) { group in
            for _ in 0..<50 {
                group.addTask { await signal.wait(until: .now + .seconds(20)) { flag.withLock { $0 } } }
            }
            group.addTask {
                flag.withLock { $0 = true }
                signal.notify()
                return true
            }
            var all = true
            for await met in group { all = all && met }
            #expect(all)
        }
    }
}
