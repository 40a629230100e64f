#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A bounded, multi-producer single-consumer queue between tasks and threads: the one hand-off the runtime
/// and the nodes build on (edges, capture and playback queues, upload bodies, wake-ups).
///
/// The rules live in ``HandoffStateMachine``; this class only holds it behind a lock and resumes the
/// continuations the machine hands back, always after releasing the lock. Tasks `send` and `receive`
/// with `async` functions (cancellation-safe: a cancelled sender keeps its element, a cancelled receiver
/// gets `nil`); threads that cannot await use ``trySend(_:)`` (never waits) or ``sendBlocking(_:)`` to send,
/// and ``tryReceive()`` or ``receiveBlocking()`` to take.
public final class Handoff<Element: Sendable>: Sendable {
    enum SenderWaker: Sendable {
        case task(CheckedContinuation<Void, Never>)
        case thread(ThreadParker)

        func resume() {
            switch self {
            case .task(let c): c.resume()
            case .thread(let p): p.unpark()
            }
        }
    }

    enum ReceiverWaker: Sendable {
        case task(CheckedContinuation<HandoffTaken<Element>?, Never>)
        case thread(ThreadMailbox<HandoffTaken<Element>?>)

        func resume(returning value: HandoffTaken<Element>?) {
            switch self {
            case .task(let c): c.resume(returning: value)
            case .thread(let m): m.deliver(value)
            }
        }
    }

    typealias Machine = HandoffStateMachine<Element, SenderWaker, ReceiverWaker>

    private let state: LockedValue<Machine>
    private let weigh: (@Sendable (Element) -> Int)?
    private let droppable: (@Sendable (Element) -> Bool)?
    private let onTake: (@Sendable (Element) -> Void)?
    private let tally: (@Sendable (Element) -> Int)?

    /// A hand-off of `capacity` (elements, or weight units when `weight` is given) with `producers`
    /// producers. `droppable` marks what a `.dropOldest` overflow may drop (everything by default); `tally`
    /// is what a dropped element adds to the next ``HandoffTaken/droppedBefore`` (its weight by default).
    /// `onTake` sees every element the consumer takes, at the moment it is taken (by the sender that hands
    /// it to a waiting receiver, or by the receiver that finds it queued), before the receiver resumes.
    public init(capacity: Int, overflow: HandoffOverflow, producers: Int = 1,
                weight: (@Sendable (Element) -> Int)? = nil, droppable: (@Sendable (Element) -> Bool)? = nil,
                tally: (@Sendable (Element) -> Int)? = nil, onTake: (@Sendable (Element) -> Void)? = nil) {
        state = LockedValue(Machine(capacity: capacity, overflow: overflow, producers: producers))
        weigh = weight
        self.droppable = droppable
        self.onTake = onTake
        self.tally = tally
    }

    /// Counters, read at any time.
    public struct Counters: Sendable, Hashable {
        public var sent: UInt64
        public var dropped: UInt64
        public var maxDepth: Int
        public var depth: Int
        public var weight: Int
    }

    public var counters: Counters {
        state.withLock { Counters(sent: $0.sent, dropped: $0.dropped, maxDepth: $0.maxDepth, depth: $0.depth, weight: $0.weight) }
    }
    /// Elements queued now.
    public var depth: Int { state.withLock { $0.depth } }
    /// Weight queued now.
    public var weight: Int { state.withLock { $0.weight } }
    /// True once the consumer has finished.
    public var isConsumerFinished: Bool { state.withLock { $0.consumerFinished } }
    /// Senders waiting for room now.
    public var waitingSenders: Int { state.withLock { $0.waitingSenders } }
    /// True while the consumer waits for an element.
    public var isReceiverWaiting: Bool { state.withLock { $0.receiverWaiting } }

    @inline(__always)
    private func run(_ effects: Machine.Effects) {
        if let (r, value) = effects.receiver {
            if let value, let onTake { onTake(value.element) }
            r.resume(returning: value)
        }
        for s in effects.senders { s.resume() }
    }

    // MARK: Producers

    /// Offers `element` without ever waiting. `.mustWait` only under `.suspend` with the queue full: the
    /// element was not taken.
    @discardableResult
    public func trySend(_ element: Element) -> HandoffSendOutcome {
        offer(element).outcome
    }

    /// What sending needs to know about an element, computed once.
    private struct Traits {
        var weight: Int
        var droppable: Bool
        var tally: Int?
    }

    /// Offers `element` without waiting; under `.mustWait` also returns the identity to park with.
    private func offer(_ element: Element) -> (outcome: HandoffSendOutcome, id: Machine.ID, traits: Traits) {
        let traits = Traits(weight: weigh?(element) ?? 1, droppable: droppable?(element) ?? true, tally: tally?(element))
        let (outcome, effects, id) = state.withLock { m -> (HandoffSendOutcome, Machine.Effects, Machine.ID) in
            let (o, e) = m.send(element, weight: traits.weight, droppable: traits.droppable, tally: traits.tally)
            return (o, e, o == .mustWait ? m.makeID() : 0)
        }
        run(effects)
        return (outcome, id, traits)
    }

    /// Sends `element`, waiting for room under `.suspend`. A sender cancelled while waiting still delivers
    /// its element (queued over capacity). Returns `false` if it was dropped (policy, or consumer gone).
    @discardableResult
    public func send(_ element: Element) async -> Bool {
        let (outcome, id, t) = offer(element)
        if outcome != .mustWait { return outcome == .accepted }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let (now, effects) = state.withLock {
                    $0.parkSender(id, .task(c), element: element, weight: t.weight, droppable: t.droppable, tally: t.tally,
                                  cancelled: Task.isCancelled)
                }
                run(effects)
                if now { c.resume() }
            }
            return true
        } onCancel: {
            run(state.withLock { $0.cancelSender(id) })
        }
    }

    /// Sends from a thread that cannot await, blocking it while the queue is full under `.suspend`.
    @discardableResult
    public func sendBlocking(_ element: Element) -> Bool {
        let (outcome, id, t) = offer(element)
        if outcome != .mustWait { return outcome == .accepted }
        let parker = ThreadParker()
        let (now, parkEffects) = state.withLock {
            $0.parkSender(id, .thread(parker), element: element, weight: t.weight, droppable: t.droppable, tally: t.tally, cancelled: false)
        }
        run(parkEffects)
        if !now { parker.park() }
        return true
    }

    /// One producer is done; after the last, the consumer sees the end once the queue is empty.
    public func producerFinished() {
        run(state.withLock { $0.producerFinished() })
    }

    // MARK: Consumer

    /// The next element, waiting while none is queued; `nil` at the end of the stream, once the consumer
    /// finished, or when the waiting task is cancelled.
    public func receive() async -> HandoffTaken<Element>? {
        let (outcome, effects, id) = state.withLock { m -> (Machine.ReceiveOutcome, Machine.Effects, Machine.ID) in
            let (o, e) = m.receive()
            if case .mustWait = o { return (o, e, m.makeID()) }
            return (o, e, 0)
        }
        run(effects)
        switch outcome {
        case .element(let taken): onTake?(taken.element); return taken
        case .finished: return nil
        case .mustWait: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<HandoffTaken<Element>?, Never>) in
                let (now, effects) = state.withLock { $0.parkReceiver(id, .task(c), cancelled: Task.isCancelled) }
                run(effects)
                if let now {
                    if let taken = now, let onTake { onTake(taken.element) }
                    c.resume(returning: now)
                }
            }
        } onCancel: {
            run(state.withLock { $0.cancelReceiver(id) })
        }
    }

    /// The next element, from a thread that cannot await (a device thread), blocking it while none is
    /// queued; `nil` at the end of the stream or once the consumer finished.
    public func receiveBlocking() -> HandoffTaken<Element>? {
        let (outcome, effects, id) = state.withLock { m -> (Machine.ReceiveOutcome, Machine.Effects, Machine.ID) in
            let (o, e) = m.receive()
            if case .mustWait = o { return (o, e, m.makeID()) }
            return (o, e, 0)
        }
        run(effects)
        switch outcome {
        case .element(let taken): onTake?(taken.element); return taken
        case .finished: return nil
        case .mustWait: break
        }
        let mailbox = ThreadMailbox<HandoffTaken<Element>?>()
        let (now, parkEffects) = state.withLock { $0.parkReceiver(id, .thread(mailbox), cancelled: false) }
        run(parkEffects)
        if let now {
            if let taken = now, let onTake { onTake(taken.element) }
            return now
        }
        return mailbox.wait()
    }

    /// Takes an element if one is queued: `.some(nil)` at the end of the stream, `nil` for "nothing yet".
    public func tryReceive() -> HandoffTaken<Element>?? {
        let (outcome, effects) = state.withLock { $0.receive() }
        run(effects)
        switch outcome {
        case .element(let taken): onTake?(taken.element); return .some(taken)
        case .finished: return .some(nil)
        case .mustWait: return nil
        }
    }

    /// The consumer is done: what is queued or waiting is dropped (counted); senders never wait again.
    public func consumerFinished() {
        run(state.withLock { $0.finishConsumer() })
    }

    /// Discards the queued and waiting elements `matching` selects (all by default), counted as dropped; a
    /// sender waiting with a discarded element resumes.
    @discardableResult
    public func flush(where matching: (Element) -> Bool = { _ in true }) -> Int {
        var n = 0
        var effects = Machine.Effects()
        state.withLock { m in
            let remove = m.flushCandidates.map { matching($0) }
            (n, effects) = m.flush(removing: remove)
        }
        run(effects)
        return n
    }
}

/// Blocks one thread until another releases it (a sender of ``Handoff/sendBlocking(_:)``).
final class ThreadParker: Sendable {
    private let released = LockedCondition(false)

    func park() {
        released.wait { released -> LockedCondition<Bool>.Step<Void> in released ? .done(()) : .wait(until: nil) }
    }

    func unpark() {
        released.withLock { released in
            released = true
            return ((), wake: .one)
        }
    }
}

/// Blocks one thread until another hands it a value (the receiver of ``Handoff/receiveBlocking()``).
final class ThreadMailbox<Value: Sendable>: Sendable {
    private let slot = LockedCondition<Value?>(nil)

    /// Waits for the value ``deliver(_:)`` hands over.
    func wait() -> Value {
        slot.wait { slot -> LockedCondition<Value?>.Step<Value> in
            guard let value = slot else { return .wait(until: nil) }
            slot = nil
            return .done(value)
        }
    }

    func deliver(_ v: Value) {
        slot.withLock { slot in
            slot = v
            return ((), wake: .one)
        }
    }
}
