import Foundation
import Testing
@testable import PipelineCore

/// The hand-off's rules, checked on the pure state machine through every interleaving of sends, parks,
/// receives, cancellations, flushes and finishes that two producers and one consumer can make.
///
/// The storage (``Handoff``) takes the lock once per event and may be interrupted between an event that
/// says "wait" and the park that follows (another task's events, or a cancellation handler that finds
/// nobody parked yet); those windows are events of their own here, so every order the storage allows is
/// explored.
@Suite("Hand-off state machine, exhaustively")
struct HandoffStateMachineTests {
    typealias Machine = HandoffStateMachine<Int, Int, Int>

    enum ProducerPhase: Hashable { case idle, pending(Int), parked(UInt64, Int), finished }
    enum ConsumerPhase: Hashable { case idle, pending, parked(UInt64), done, gone }

    struct Model {
        var machine: Machine
        var producers: [ProducerPhase]
        var produced: [Int]          // values offered so far per producer
        var producerCancelled: [Bool]
        var consumer: ConsumerPhase = .idle
        var consumerCancelled = false
        var received: [Int] = []
        var flushes = 0
        var given = 0                // values the machine has taken charge of (queued, handed, parked or dropped)
        var everCancelledSender = false

        /// The state as a value (parked identities left out: they only pair a cancellation with its park).
        struct Key: Hashable {
            var queued: [Int]
            var candidates: [Int]
            var counts: [UInt64]
            var flags: [Bool]
            var producers: [Int]
            var produced: [Int]
            var consumer: Int
            var received: [Int]
        }

        var key: Key {
            func phase(_ p: ProducerPhase) -> Int {
                switch p {
                case .idle: -1
                case .pending(let v): 1_000 + v
                case .parked(_, let v): 2_000 + v
                case .finished: -2
                }
            }
            let c: Int = switch consumer {
            case .idle: 0
            case .pending: 1
            case .parked: 2
            case .done: 3
            case .gone: 4
            }
            return Key(queued: machine.queued, candidates: machine.flushCandidates,
                       counts: [machine.sent, machine.dropped, UInt64(flushes), UInt64(given)],
                       flags: [machine.receiverWaiting, machine.consumerFinished, consumerCancelled] + producerCancelled,
                       producers: producers.map(phase), produced: produced, consumer: c, received: received)
        }
    }

    struct Violation: Error, CustomStringConvertible {
        var description: String
    }

    static let valuesPerProducer = 2

    /// Applies what the machine said to resume; every resume must find its party parked, exactly once.
    static func apply(_ effects: Machine.Effects, to m: inout Model, trace: [String]) throws {
        if let (token, value) = effects.receiver {
            guard token == 0, case .parked = m.consumer else {
                throw Violation(description: "receiver resumed while not parked: \(trace)")
            }
            if let value {
                m.received.append(value.element)
                m.consumer = .idle
            } else {
                m.consumer = .done
            }
        }
        for token in effects.senders {
            guard case .parked = m.producers[token] else {
                throw Violation(description: "sender \(token) resumed while not parked: \(trace)")
            }
            m.producers[token] = .idle
        }
    }

    /// Every event enabled in `m`, as a name and a transition.
    static func events(_ m: Model) -> [(String, (inout Model, [String]) throws -> Void)] {
        var out: [(String, (inout Model, [String]) throws -> Void)] = []
        for i in m.producers.indices {
            switch m.producers[i] {
            case .idle:
                if m.produced[i] < valuesPerProducer {
                    out.append(("send\(i)", { m, trace in
                        let value = i * 100 + m.produced[i]
                        m.produced[i] += 1
                        let (outcome, effects) = m.machine.send(value)
                        if outcome == .mustWait { m.producers[i] = .pending(value) } else { m.given += 1 }
                        try apply(effects, to: &m, trace: trace)
                    }))
                }
                out.append(("finish\(i)", { m, trace in
                    m.producers[i] = .finished
                    try apply(m.machine.producerFinished(), to: &m, trace: trace)
                }))
            case .pending(let value):
                out.append(("park\(i)", { m, trace in
                    let id = m.machine.makeID()
                    let (now, effects) = m.machine.parkSender(id, i, element: value, cancelled: m.producerCancelled[i])
                    m.given += 1
                    m.producers[i] = now ? .idle : .parked(id, value)
                    try apply(effects, to: &m, trace: trace)
                }))
            case .parked, .finished:
                break
            }
            if !m.producerCancelled[i], m.producers[i] != .finished {
                out.append(("cancel\(i)", { m, trace in
                    m.producerCancelled[i] = true
                    m.everCancelledSender = true
                    if case .parked(let id, _) = m.producers[i] {
                        try apply(m.machine.cancelSender(id), to: &m, trace: trace)
                    }
                }))
            }
        }
        switch m.consumer {
        case .idle:
            out.append(("receive", { m, trace in
                let (outcome, effects) = m.machine.receive()
                switch outcome {
                case .element(let taken): m.received.append(taken.element)
                case .finished: m.consumer = .done
                case .mustWait: m.consumer = .pending
                }
                try apply(effects, to: &m, trace: trace)
            }))
            out.append(("consumerFinished", { m, trace in
                m.consumer = .gone
                try apply(m.machine.finishConsumer(), to: &m, trace: trace)
            }))
            if m.flushes == 0 {
                out.append(("flushOdd", { m, trace in
                    m.flushes += 1
                    let (_, effects) = m.machine.flush(where: { $0 % 2 == 1 })
                    try apply(effects, to: &m, trace: trace)
                    // Nothing the flush selected stays behind, queued or with a waiting sender.
                    let left = m.machine.flushCandidates.filter { $0 % 2 == 1 }
                    if !left.isEmpty { throw Violation(description: "the flush left \(left) to be delivered later: \(trace)") }
                }))
            }
        case .pending:
            out.append(("parkReceiver", { m, trace in
                let id = m.machine.makeID()
                let (now, effects) = m.machine.parkReceiver(id, 0, cancelled: m.consumerCancelled)
                if let now {
                    if let taken = now { m.received.append(taken.element); m.consumer = .idle } else { m.consumer = .done }
                } else {
                    m.consumer = .parked(id)
                }
                try apply(effects, to: &m, trace: trace)
            }))
        case .done:
            // The runtime finishes a node's input when the node returns, after the end or a cancellation.
            out.append(("consumerFinished", { m, trace in
                m.consumer = .gone
                try apply(m.machine.finishConsumer(), to: &m, trace: trace)
            }))
        case .parked, .gone:
            break
        }
        if !m.consumerCancelled, m.consumer != .done, m.consumer != .gone {
            out.append(("cancelReceiver", { m, trace in
                m.consumerCancelled = true
                if case .parked(let id) = m.consumer {
                    try apply(m.machine.cancelReceiver(id), to: &m, trace: trace)
                }
            }))
        }
        return out
    }

    /// What must hold in every reachable state.
    static func check(_ m: Model, trace: [String]) throws {
        let mac = m.machine
        func fail(_ what: String) throws { throw Violation(description: "\(what): \(trace)") }
        if mac.receiverWaiting && mac.depth > 0 { try fail("a receiver waits while \(mac.depth) are queued") }
        if !m.everCancelledSender && mac.overflow != .dropOldest && mac.depth > mac.capacity {
            try fail("\(mac.depth) queued over capacity \(mac.capacity) with no cancellation")
        }
        // Nothing lost: every value the machine took is received, queued, waiting with its sender, or counted dropped.
        if m.given != m.received.count + mac.depth + mac.waitingSenders + Int(mac.dropped) {
            try fail("given \(m.given) ≠ received \(m.received.count) + queued \(mac.depth) + waiting \(mac.waitingSenders) + dropped \(mac.dropped)")
        }
        // Each producer's values arrive in order, none twice.
        for p in m.producers.indices {
            let mine = m.received.filter { $0 / 100 == p }
            if mine != mine.sorted() || Set(mine).count != mine.count { try fail("producer \(p) out of order: \(mine)") }
        }
        // End of stream only when every producer finished and nothing is queued (or the receiver was cancelled).
        if m.consumer == .done, !m.consumerCancelled {
            if m.producers.contains(where: { $0 != .finished }) { try fail("end of stream before every producer finished") }
        }
        // Once every producer finished, nobody is still parked as a sender.
        if mac.waitingSenders != m.producers.filter({ if case .parked = $0 { true } else { false } }).count {
            try fail("machine holds \(mac.waitingSenders) waiting senders, model \(m.producers)")
        }
    }

    /// From `m`, the consumer keeps receiving and the producers stop sending: everything ends, nobody stays
    /// parked, and with the consumer still there every value taken was received or counted as dropped.
    static func drains(_ start: Model, trace: [String], known: inout Set<Model.Key>) throws {
        var m = start
        var path: [Model.Key] = []
        for _ in 0..<64 {
            // A state already known to drain drains again the same way (the drain is deterministic).
            if known.contains(m.key) { known.formUnion(path); return }
            path.append(m.key)
            if m.producers.allSatisfy({ $0 == .finished }) && m.consumer == .gone { break }
            // Prefer: parks that are due, then the consumer, then finishing idle producers.
            let names = events(m)
            let order = ["park0", "park1", "parkReceiver", "receive", "finish0", "finish1"]
                + (m.consumer == .done ? ["consumerFinished"] : [])
            guard let next = order.lazy.compactMap({ name in names.first(where: { $0.0 == name }) }).first else {
                throw Violation(description: "stuck: producers \(m.producers), consumer \(m.consumer): \(trace)")
            }
            try next.1(&m, trace + ["(drain) " + next.0])
        }
        guard m.producers.allSatisfy({ $0 == .finished }), m.consumer == .gone else {
            throw Violation(description: "did not drain: producers \(m.producers), consumer \(m.consumer): \(trace)")
        }
        if m.given != m.received.count + Int(m.machine.dropped) {
            throw Violation(description: "after the drain, given \(m.given) ≠ received \(m.received.count) + dropped \(m.machine.dropped): \(trace)")
        }
        known.formUnion(path)
    }

    static func explore(capacity: Int, overflow: HandoffOverflow, producers: Int) throws -> Int {
        let start = Model(machine: Machine(capacity: capacity, overflow: overflow, producers: producers),
                          producers: Array(repeating: .idle, count: producers),
                          produced: Array(repeating: 0, count: producers),
                          producerCancelled: Array(repeating: false, count: producers))
        var seen: Set<Model.Key> = [start.key]
        var drained: Set<Model.Key> = []
        var stack: [(Model, [String])] = [(start, [])]
        while let (m, trace) = stack.popLast() {
            try check(m, trace: trace)
            try drains(m, trace: trace, known: &drained)
            for (name, step) in events(m) {
                var next = m
                let t = trace + [name]
                try step(&next, t)
                if seen.insert(next.key).inserted { stack.append((next, t)) }
            }
        }
        return seen.count
    }

    @Test("every interleaving keeps the rules (each overflow policy, capacity 1 and 2)")
    func everyInterleaving() async throws {
        // Seconds of pure computation, one case after another on a thread of its own: not on the tasks'
        // shared pool, and on one core, so the real-time tests that run beside it keep theirs.
        let counts = try await Self.onThread {
            try [HandoffOverflow.suspend, .dropOldest, .dropNewest].flatMap { overflow in
                try [1, 2].map { capacity in try Self.explore(capacity: capacity, overflow: overflow, producers: 2) }
            }
        }
        // The spaces are large enough to have covered parks, cancellations and flushes together.
        #expect(counts.count == 6 && counts.allSatisfy { $0 > 10_000 }, "states explored: \(counts)")
    }

    static func onThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { c in
            let t = Thread { c.resume(with: Result { try body() }) }
            t.stackSize = 8 << 20
            t.start()
        }
    }

    @Test("a cancelled waiting sender keeps its element; a cancelled receiver gets nil")
    func cancellation() {
        var m = Machine(capacity: 1, overflow: .suspend)
        #expect(m.send(1).0 == .accepted)
        #expect(m.send(2).0 == .mustWait)
        let id = m.makeID()
        #expect(m.parkSender(id, 7, element: 2, cancelled: false).resumeNow == false)
        let effects = m.cancelSender(id)
        #expect(effects.senders == [7])
        #expect(m.queued == [1, 2])
        _ = m.receive(); _ = m.receive()
        let rid = m.makeID()
        #expect(m.parkReceiver(rid, 0, cancelled: false).resumeWith == nil)
        let r = m.cancelReceiver(rid)
        #expect(r.receiver?.0 == 0 && r.receiver?.1 == nil)
    }

    @Test("drop-oldest skips what may not be dropped and reports the weight lost before the next take")
    func droppableAndWeight() {
        var m = Machine(capacity: 4, overflow: .dropOldest)
        _ = m.send(1, weight: 2, droppable: false)
        _ = m.send(2, weight: 2)
        _ = m.send(3, weight: 2)   // full: 2 (weight 2) goes, 1 stays
        #expect(m.queued == [1, 3])
        #expect(m.dropped == 1)
        guard case .element(let first) = m.receive().0 else { Issue.record("nothing queued"); return }
        #expect(first.element == 1 && first.droppedBefore == 2)
        guard case .element(let second) = m.receive().0 else { Issue.record("nothing queued"); return }
        #expect(second.element == 3 && second.droppedBefore == 0)
    }

    @Test("a flush discards a waiting sender's element even when it frees no room, and resumes that sender")
    func flushReachesWaitingSenders() {
        var m = Machine(capacity: 1, overflow: .suspend)
        #expect(m.send(0).0 == .accepted)
        #expect(m.send(1).0 == .mustWait)
        #expect(m.parkSender(m.makeID(), 7, element: 1, cancelled: false).resumeNow == false)
        #expect(m.send(2).0 == .mustWait)
        #expect(m.parkSender(m.makeID(), 8, element: 2, cancelled: false).resumeNow == false)
        // The queued 0 stays, so no room is freed: the waiting 1 is discarded all the same, 2 keeps waiting.
        let (n, effects) = m.flush(where: { $0 % 2 == 1 })
        #expect(n == 1)
        #expect(effects.senders == [7])
        #expect(m.queued == [0] && m.flushCandidates == [0, 2])
        #expect(m.dropped == 1)
        guard case .element(let first) = m.receive().0 else { Issue.record("nothing queued"); return }
        #expect(first.element == 0)
        guard case .element(let second) = m.receive().0 else { Issue.record("nothing queued"); return }
        #expect(second.element == 2)
    }

    @Test("one element heavier than the capacity passes alone; the next waits")
    func heavyElement() {
        var m = Machine(capacity: 10, overflow: .suspend)
        #expect(m.send(1, weight: 25).0 == .accepted)
        #expect(m.send(2, weight: 1).0 == .mustWait)
        _ = m.receive()
        #expect(m.send(2, weight: 1).0 == .accepted)
    }
}
