import Foundation
import Testing
@testable import PipelineCore
import VoicepipeTesting

/// The storage around the state machine, with real tasks and threads (the sanitizer run checks it for races).
@Suite("Hand-off with tasks and threads")
struct HandoffTests {
    @Test("four producers, one slow queue: every value arrives once, in each producer's order",
          arguments: [HandoffOverflow.suspend])
    func manyProducers(overflow: HandoffOverflow) async {
        let perProducer = 2_000
        let h = Handoff<Int>(capacity: 4, overflow: overflow, producers: 4)
        async let received: [Int] = {
            var got: [Int] = []
            while let t = await h.receive() { got.append(t.element) }
            return got
        }()
        await withTaskGroup(of: Void.self) { group in
            for p in 0..<4 {
                group.addTask {
                    for i in 0..<perProducer { await h.send(p * 100_000 + i) }
                    h.producerFinished()
                }
            }
        }
        let got = await received
        #expect(got.count == 4 * perProducer)
        for p in 0..<4 {
            let mine = got.filter { $0 / 100_000 == p }
            #expect(mine == Array(0..<perProducer).map { p * 100_000 + $0 })
        }
        #expect(h.counters.dropped == 0)
    }

    @Test("producers cancelled while waiting still deliver what they sent; a cancelled receiver returns nil")
    func cancellation() async {
        let h = Handoff<Int>(capacity: 1, overflow: .suspend, producers: 8)
        let sent = LockedValue(0)
        let senders = (0..<8).map { p in
            Task {
                var i = 0
                while !Task.isCancelled {
                    await h.send(p * 1_000_000 + i)
                    sent.withLock { $0 += 1 }
                    i += 1
                }
                h.producerFinished()
            }
        }
        // Nobody receives: all eight wait (one element queued, one held by each waiting sender).
        #expect(await eventually { h.held == 9 }, "all eight senders wait")
        for s in senders { s.cancel() }
        for s in senders { await s.value }
        var got = 0
        while let _ = await h.receive() { got += 1 }
        #expect(got == sent.withLock { $0 }, "every completed send was received")
        #expect(h.counters.dropped == 0)

        let idle = Handoff<Int>(capacity: 1, overflow: .suspend)
        let receiver = Task { await idle.receive() }
        #expect(await eventually { idle.isReceiverWaiting })
        receiver.cancel()
        #expect(await receiver.value == nil)
    }

    @Test("a thread that cannot await blocks on a full queue and resumes when the consumer takes")
    func blockingSend() async {
        let h = Handoff<Int>(capacity: 2, overflow: .suspend)
        let done = LockedValue(false)
        let t = Thread {
            for i in 0..<500 { h.sendBlocking(i) }
            h.producerFinished()
            done.withLock { $0 = true }
        }
        t.start()
        var got: [Int] = []
        while let v = await h.receive() { got.append(v.element) }
        #expect(got == Array(0..<500))
        #expect(done.withLock { $0 })
    }

    @Test("a thread that cannot await blocks on an empty queue: it takes every element in order, then the end")
    func blockingReceive() async {
        let h = Handoff<Int>(capacity: 2, overflow: .suspend)
        let got: [Int] = await withCheckedContinuation { c in
            let t = Thread {
                var got: [Int] = []
                while let v = h.receiveBlocking() { got.append(v.element) }
                c.resume(returning: got)
            }
            t.start()
            Task {
                // The receiver is waiting before anything is sent, then sends outrun it.
                _ = await eventually { h.isReceiverWaiting }
                for i in 0..<500 { await h.send(i) }
                h.producerFinished()
            }
        }
        #expect(got == Array(0..<500))
        #expect(h.counters.sent == 500 && h.counters.dropped == 0)
    }

    @Test("drop-oldest from a device thread: the consumer learns how much was lost before each element")
    func dropOldestTally() async {
        let h = Handoff<Int>(capacity: 3, overflow: .dropOldest, weight: { _ in 10 })
        for i in 0..<10 { h.trySend(i) }    // 3 fit (weight 30 ≥ capacity after the first), the rest push out the oldest
        h.producerFinished()
        var lost = 0
        var got: [Int] = []
        while let t = await h.receive() { lost += t.droppedBefore; got.append(t.element) }
        #expect(got == [9])
        #expect(lost == 90)
        #expect(h.counters.dropped == 9)
    }
}
