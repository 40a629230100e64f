/// The rules of ``IVHOutboundQueue`` with no lock and no continuation of its own: every event is a
/// `mutating` function that returns what the caller must do once it has released the lock (``Actions``: the
/// waiting consumer to resume and with what, waiting producers to wake so they try again).
///
/// `Producer` and `Consumer` are whatever the storage parks: continuations in the queue, plain numbers in
/// the tests.
///
/// Rules:
/// - Before the channel first opens, and while it is up, a full queue makes producers wait (lossless).
/// - While it is down after having been up, audio is held up to the capacity and the oldest held audio
///   packet is dropped (counted) to make room; heartbeats are not held while it is down.
/// - Interrupts (`front`) and commands put back go to the front, over capacity if need be.
/// - A waiting producer is woken whenever its wait may be over (room, channel down, finish, clear); it
///   then offers its command again.
/// - The consumer waits only while nothing is queued; it sees the end once finished and empty.
package struct IVHOutboundStateMachine<Producer, Consumer> {
    package typealias ID = UInt64

    /// What the caller does after releasing the lock.
    package struct Actions {
        /// The parked consumer to resume, with its command (`nil`: the end, or cancelled).
        package var consumer: (Consumer, IVHCommand?)?
        /// Parked producers to wake (each offers its command again).
        package var producers: [Producer] = []
        package init() {}
    }

    package enum PushOutcome: Equatable {
        /// Taken (queued or handed over) or discarded; `dropped` audio packets made room for it.
        case done(dropped: Int)
        /// Full while the channel is up (or not yet opened): park with ``parkProducer(_:_:cancelled:)``.
        case mustWait
    }

    package enum NextOutcome: Equatable {
        case command(IVHCommand)
        /// Finished and empty.
        case finished
        /// Nothing queued: park with ``parkConsumer(_:_:cancelled:)``.
        case mustWait
    }

    package let capacity: Int
    package private(set) var items: [IVHCommand] = []
    package private(set) var connected = false
    /// The channel has been up once: from then on, a channel down drops old audio.
    package private(set) var opened = false
    package private(set) var finished = false
    /// Audio packets dropped while the channel was down.
    package private(set) var dropped: UInt64 = 0
    private var consumer: (id: ID, consumer: Consumer)?
    private var producers: [(id: ID, producer: Producer)] = []
    private var nextID: ID = 0

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    package mutating func makeID() -> ID {
        nextID &+= 1
        return nextID
    }

    package var consumerWaiting: Bool { consumer != nil }
    package var waitingProducers: Int { producers.count }
    /// True once finished and everything was taken.
    package var drained: Bool { finished && items.isEmpty }

    /// A producer's wait is over when there is room, the channel went down after having been up (old audio
    /// then gives way), or the queue finished.
    private var producerMayGo: Bool { items.count < capacity || (!connected && opened) || finished }

    private mutating func wakeProducers(into actions: inout Actions) {
        actions.producers += producers.map(\.producer)
        producers = []
    }

    /// Hands `command` to a parked consumer, if there is one (it parks only while nothing is queued).
    private mutating func handOver(_ command: IVHCommand, into actions: inout Actions) -> Bool {
        guard let c = consumer, items.isEmpty else { return false }
        consumer = nil
        actions.consumer = (c.consumer, command)
        return true
    }

    // MARK: Events

    /// A producer offers `command` (`front`: an interrupt, ahead of everything and never waiting).
    package mutating func push(_ command: IVHCommand, front: Bool) -> (PushOutcome, Actions) {
        var actions = Actions()
        if finished { return (.done(dropped: 0), actions) }
        if case .heartbeat = command, !connected { return (.done(dropped: 0), actions) }
        if handOver(command, into: &actions) { return (.done(dropped: 0), actions) }
        if items.count < capacity || front {
            if front { items.insert(command, at: 0) } else { items.append(command) }
            return (.done(dropped: 0), actions)
        }
        if connected || !opened { return (.mustWait, actions) }
        var drops = 0
        if let i = items.firstIndex(where: { if case .audio = $0 { true } else { false } }) {
            items.remove(at: i)
            dropped += 1
            drops = 1
        }
        items.append(command)
        return (.done(dropped: drops), actions)
    }

    /// A producer told ``PushOutcome/mustWait`` parks (the state may have changed since). Returns true when
    /// it must not wait: its wait is already over, or it is being cancelled.
    package mutating func parkProducer(_ id: ID, _ producer: Producer, cancelled: Bool) -> Bool {
        if producerMayGo || cancelled { return true }
        producers.append((id, producer))
        return false
    }

    /// A parked producer's task was cancelled: it resumes (its command is not queued).
    package mutating func cancelProducer(_ id: ID) -> Actions {
        var actions = Actions()
        if let i = producers.firstIndex(where: { $0.id == id }) { actions.producers.append(producers.remove(at: i).producer) }
        return actions
    }

    /// The consumer asks for the next command without waiting.
    package mutating func next() -> (NextOutcome, Actions) {
        var actions = Actions()
        if !items.isEmpty {
            let command = items.removeFirst()
            wakeProducers(into: &actions)
            return (.command(command), actions)
        }
        return (finished ? .finished : .mustWait, actions)
    }

    /// The consumer told ``NextOutcome/mustWait`` parks. Returns `.some(value)` to resume at once with
    /// (`nil` inside: the end, or cancelled), `nil` when parked.
    package mutating func parkConsumer(_ id: ID, _ c: Consumer, cancelled: Bool) -> (resumeWith: IVHCommand??, Actions) {
        var actions = Actions()
        if !items.isEmpty {
            let command = items.removeFirst()
            wakeProducers(into: &actions)
            return (.some(command), actions)
        }
        if finished || cancelled { return (.some(nil), actions) }
        precondition(consumer == nil, "the outbound queue has one consumer")
        consumer = (id, c)
        return (nil, actions)
    }

    /// The parked consumer's task was cancelled: it resumes with `nil`.
    package mutating func cancelConsumer(_ id: ID) -> Actions {
        var actions = Actions()
        if let c = consumer, c.id == id {
            consumer = nil
            actions.consumer = (c.consumer, nil)
        }
        return actions
    }

    /// Puts back, at the front, a command that could not be written.
    package mutating func unshift(_ command: IVHCommand) -> Actions {
        var actions = Actions()
        if !handOver(command, into: &actions) { items.insert(command, at: 0) }
        return actions
    }

    /// The channel went up or down: waiting producers check again.
    package mutating func setConnected(_ up: Bool) -> Actions {
        var actions = Actions()
        connected = up
        if up { opened = true }
        wakeProducers(into: &actions)
        return actions
    }

    /// No more commands: the consumer sees the end after the last one; waiting producers give up.
    package mutating func finish() -> Actions {
        var actions = Actions()
        finished = true
        if items.isEmpty, let c = consumer {
            consumer = nil
            actions.consumer = (c.consumer, nil)
        }
        wakeProducers(into: &actions)
        return actions
    }

    /// Drops everything queued (when giving up); waiting producers check again.
    package mutating func clear() -> Actions {
        var actions = Actions()
        items.removeAll()
        wakeProducers(into: &actions)
        return actions
    }
}
