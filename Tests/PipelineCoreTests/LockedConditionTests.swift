import Foundation
import Testing
import PipelineCore

/// The runtime's one tool for a thread that blocks until another changes a value.
@Suite("Locked condition")
struct LockedConditionTests {
    @Test("a waiting thread wakes when a change makes its step done, with the changed value")
    func wakesOnChange() {
        let box = LockedCondition([Int]())
        let got = LockedValue<[Int]>([])
        let done = DispatchSemaphore(value: 0)
        let consumer = Thread {
            for _ in 0..<1000 {
                let n = box.wait { items -> LockedCondition<[Int]>.Step<Int> in
                    items.isEmpty ? .wait(until: nil) : .done(items.removeFirst())
                }
                got.withLock { $0.append(n) }
            }
            done.signal()
        }
        consumer.start()
        for i in 0..<1000 {
            box.withLock { items in
                items.append(i)
                return ((), wake: .one)
            }
        }
        #expect(done.wait(timeout: .now() + 30) == .success)
        #expect(got.withLock { $0 } == Array(0..<1000), "every value taken once, in order")
    }

    @Test("a deadline ends the wait when no change comes; a change before it ends the wait sooner")
    func deadline() {
        let box = LockedCondition(false)
        let started = ContinuousClock.now
        let until = started + .milliseconds(150)
        let timedOut = box.wait { set -> LockedCondition<Bool>.Step<Bool> in
            set ? .done(false) : ContinuousClock.now >= until ? .done(true) : .wait(until: until)
        }
        let waited = ContinuousClock.now - started
        #expect(timedOut)
        #expect(waited >= .milliseconds(150) && waited < .seconds(5), "\(waited)")

        let woken = ContinuousClock.now
        let far = woken + .seconds(30)
        Thread {
            usleep(50_000)
            box.withLock { set in
                set = true
                return ((), wake: .all)
            }
        }.start()
        let early = box.wait { set -> LockedCondition<Bool>.Step<Bool> in
            set ? .done(true) : .wait(until: far)
        }
        #expect(early && ContinuousClock.now - woken < .seconds(10))
    }

    @Test("wake: .all wakes every waiter; .none wakes none of them")
    func wakesAll() {
        let box = LockedCondition(0)
        let woke = LockedValue(0)
        let group = DispatchGroup()
        for _ in 0..<8 {
            group.enter()
            Thread {
                box.wait { generation -> LockedCondition<Int>.Step<Void> in generation == 2 ? .done(()) : .wait(until: nil) }
                woke.withLock { $0 += 1 }
                group.leave()
            }.start()
        }
        usleep(50_000)
        // A change that wakes no one: the waiters keep sleeping (and would not be done anyway).
        box.withLock { generation in
            generation = 1
            return ((), wake: .none)
        }
        usleep(50_000)
        #expect(woke.withLock { $0 } == 0)
        box.withLock { generation in
            generation = 2
            return ((), wake: .all)
        }
        #expect(group.wait(timeout: .now() + 30) == .success)
        #expect(woke.withLock { $0 } == 8)
    }
}
