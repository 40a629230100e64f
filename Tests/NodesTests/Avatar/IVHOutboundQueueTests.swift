import Foundation
import PipelineCore
import Testing
@testable import DigitalHuman

/// The avatar's outbound command queue: its rules on the pure state machine, over every interleaving a
/// few producers, the consumer and the channel can make, and its storage's promise to resume only after
/// releasing its lock.
@Suite("IVH outbound queue")
struct IVHOutboundQueueTests {
    typealias Machine = IVHOutboundStateMachine<Int, Int>

    static func audio(_ n: Int) -> IVHCommand { .audio(reqID: "r", seq: n, pcm: [], isFinal: false) }

    enum Producer: Hashable { case idle(sent: Int), parked(UInt64, sent: Int), done }
    enum Consumer: Hashable { case idle, parked(UInt64), ended }

    struct Model: Hashable {
        var machine: MachineKey
        var producers: [Producer]
        var consumer: Consumer = .idle
        var taken: [IVHCommand] = []
        var given = 0
        var discarded = 0
    }

    /// The parts of the machine that make its state.
    struct MachineKey: Hashable {
        var items: [IVHCommand], connected: Bool, opened: Bool, finished: Bool, dropped: UInt64, waiting: Int, consumer: Bool
        init(_ m: Machine) {
            items = m.items; connected = m.connected; opened = m.opened; finished = m.finished; dropped = m.dropped
            waiting = m.waitingProducers; consumer = m.consumerWaiting
        }
    }

    struct Violation: Error, CustomStringConvertible { var description: String }

    struct World {
        var machine = Machine(capacity: 1)
        var model: Model

        mutating func apply(_ a: Machine.Actions, _ trace: [String]) throws {
            if let (token, command) = a.consumer {
                guard token == 0, case .parked = model.consumer else { throw Violation(description: "consumer resumed while not parked: \(trace)") }
                if let command { model.taken.append(command); model.consumer = .idle } else { model.consumer = .ended }
            }
            for p in a.producers {
                guard case .parked(_, let sent) = model.producers[p] else { throw Violation(description: "producer \(p) woken while not parked: \(trace)") }
                model.producers[p] = .idle(sent: sent)   // it offers the same command again
            }
            model.machine = MachineKey(machine)
        }
    }

    static let perProducer = 2

    static func events(_ w: World) -> [(String, (inout World, [String]) throws -> Void)] {
        var out: [(String, (inout World, [String]) throws -> Void)] = []
        for i in w.model.producers.indices {
            switch w.model.producers[i] {
            case .idle(let sent) where sent < perProducer:
                out.append(("push\(i)", { w, t in
                    let (outcome, actions) = w.machine.push(audio(i * 10 + sent), front: false)
                    switch outcome {
                    case .done(let dropped):
                        w.model.given += 1
                        w.model.producers[i] = .idle(sent: sent + 1)
                        _ = dropped
                    case .mustWait:
                        let id = w.machine.makeID()
                        if w.machine.parkProducer(id, i, cancelled: false) {
                            w.model.producers[i] = .idle(sent: sent)
                        } else {
                            w.model.producers[i] = .parked(id, sent: sent)
                        }
                    }
                    try w.apply(actions, t)
                }))
            case .idle:
                out.append(("done\(i)", { w, t in w.model.producers[i] = .done; try w.apply(.init(), t) }))
            case .parked(let id, let sent):
                out.append(("cancel\(i)", { w, t in
                    let a = w.machine.cancelProducer(id)
                    try w.apply(a, t)
                    w.model.producers[i] = .idle(sent: sent + 1)   // a cancelled producer gives up its command
                    w.model.discarded += 1
                }))
            case .done:
                break
            }
        }
        switch w.model.consumer {
        case .idle:
            out.append(("next", { w, t in
                let (outcome, actions) = w.machine.next()
                switch outcome {
                case .command(let c): w.model.taken.append(c)
                case .finished: w.model.consumer = .ended
                case .mustWait:
                    let id = w.machine.makeID()
                    let (now, more) = w.machine.parkConsumer(id, 0, cancelled: false)
                    try w.apply(more, t)
                    if let now { if let c = now { w.model.taken.append(c) } else { w.model.consumer = .ended } }
                    else { w.model.consumer = .parked(id) }
                }
                try w.apply(actions, t)
            }))
        case .parked(let id):
            out.append(("cancelNext", { w, t in try w.apply(w.machine.cancelConsumer(id), t); w.model.consumer = .ended }))
        case .ended:
            break
        }
        if !w.machine.finished {
            out.append(("up", { w, t in try w.apply(w.machine.setConnected(true), t) }))
            out.append(("down", { w, t in try w.apply(w.machine.setConnected(false), t) }))
            out.append(("finish", { w, t in try w.apply(w.machine.finish(), t) }))
        }
        return out
    }

    static func check(_ w: World, _ trace: [String]) throws {
        let m = w.machine
        if m.consumerWaiting && !m.items.isEmpty { throw Violation(description: "the consumer waits while \(m.items.count) are queued: \(trace)") }
        let parked = w.model.producers.filter { if case .parked = $0 { true } else { false } }.count
        if parked != m.waitingProducers { throw Violation(description: "machine holds \(m.waitingProducers) producers, model \(parked): \(trace)") }
        if m.waitingProducers > 0, m.items.count < m.capacity || (!m.connected && m.opened) || m.finished {
            throw Violation(description: "a producer waits when it could go: \(trace)")
        }
        if !m.opened || m.connected, m.items.count > m.capacity { throw Violation(description: "over capacity while lossless: \(trace)") }
        // Nothing lost unsaid: every command taken in is taken out, queued, or counted as dropped (or came after the finish).
        if !m.finished, w.model.given != w.model.taken.count + m.items.count + Int(m.dropped) {
            throw Violation(description: "given \(w.model.given) ≠ taken \(w.model.taken.count) + queued \(m.items.count) + dropped \(m.dropped): \(trace)")
        }
    }

    @Test("every interleaving of two producers, the consumer and the channel keeps the rules")
    func everyInterleaving() throws {
        let start = World(model: Model(machine: MachineKey(Machine(capacity: 1)), producers: [.idle(sent: 0), .idle(sent: 0)]))
        var seen: Set<Model> = [start.model]
        var stack: [(World, [String])] = [(start, [])]
        var sawDrop = false, sawWait = false
        while let (w, trace) = stack.popLast() {
            try Self.check(w, trace)
            sawDrop = sawDrop || w.machine.dropped > 0
            sawWait = sawWait || w.machine.waitingProducers > 0
            for (name, step) in Self.events(w) {
                var next = w
                let t = trace + [name]
                try step(&next, t)
                if seen.insert(next.model).inserted { stack.append((next, t)) }
            }
        }
        #expect(seen.count > 200 && sawDrop && sawWait, "states: \(seen.count)")
    }

    @Test("while the channel is down after having been up, the oldest audio gives way; heartbeats are not held")
    func channelDown() {
        var m = Machine(capacity: 2)
        _ = m.setConnected(true)
        _ = m.setConnected(false)
        #expect(m.push(.heartbeat, front: false).0 == .done(dropped: 0))
        _ = m.push(Self.audio(1), front: false)
        _ = m.push(.text("hi", interrupt: false), front: false)
        #expect(m.push(Self.audio(2), front: false).0 == .done(dropped: 1))
        #expect(m.items == [.text("hi", interrupt: false), Self.audio(2)] && m.dropped == 1)
        _ = m.setConnected(true)
        #expect(m.push(Self.audio(3), front: false).0 == .mustWait)
        #expect(m.push(.text("", interrupt: true), front: true).0 == .done(dropped: 0))
        #expect(m.items.first == .text("", interrupt: true))
    }

    @Test("a command put back reaches a consumer already waiting")
    func unshiftWakesConsumer() {
        var m = Machine(capacity: 1)
        #expect(m.next().0 == .mustWait)
        #expect(m.parkConsumer(m.makeID(), 5, cancelled: false).resumeWith == nil)
        let a = m.unshift(.heartbeat)
        #expect(a.consumer?.0 == 5 && a.consumer?.1 == .heartbeat)
    }

    // MARK: Storage

    /// Runs every job on a thread of its own, and first asks `probe` (on the enqueuing thread, where a
    /// continuation is being resumed).
    final class ProbingExecutor: TaskExecutor, @unchecked Sendable {
        let probe: @Sendable () -> Void
        init(probe: @escaping @Sendable () -> Void) { self.probe = probe }
        func enqueue(_ job: consuming ExecutorJob) {
            probe()
            let job = UnownedJob(job)
            let me = asUnownedTaskExecutor()
            Thread { job.runSynchronously(on: me) }.start()
        }
    }

    /// Whether another thread can take the queue's lock now (waits up to 2 s for it).
    static func lockIsFree(_ queue: IVHOutboundQueue) -> Bool {
        let done = DispatchSemaphore(value: 0)
        Thread { _ = queue.count; done.signal() }.start()
        return done.wait(timeout: .now() + 2) == .success
    }

    @Test("the waiting consumer is resumed after the queue's lock is released")
    func resumesOutsideTheLock() async throws {
        let queue = IVHOutboundQueue(capacity: 4)
        let probes = LockedValue<[Bool]>([])
        let executor = ProbingExecutor { let free = Self.lockIsFree(queue); probes.withLock { $0.append(free) } }
        let consumer = Task(executorPreference: executor) { await queue.next() }
        let deadline = ContinuousClock.now + .seconds(10)
        while !queue.isConsumerWaiting, ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(5)) }
        #expect(queue.isConsumerWaiting)
        let before = probes.withLock { $0.count }
        await queue.push(.text("hello", interrupt: false))
        #expect(await consumer.value == .text("hello", interrupt: false))
        let seen = probes.withLock { $0 }
        #expect(seen.count > before, "the consumer's resumption was not seen")
        #expect(seen.allSatisfy { $0 }, "resumed while the lock was held: \(seen)")
    }
}
