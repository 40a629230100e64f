/// What a full hand-off does with one more element.
public enum HandoffOverflow: Sendable, Hashable {
    /// The sender waits for room (lossless back-pressure).
    case suspend
    /// The oldest droppable element queued is dropped to make room (counted).
    case dropOldest
    /// The new element is dropped (counted).
    case dropNewest
}

/// An element taken from a hand-off, with the tally of what was dropped since the previous take (each dropped
/// element's weight, or the tally its sender gave: a capture queue counts audio frames lost before this chunk).
public struct HandoffTaken<Element> {
    public var element: Element
    public var droppedBefore: Int
    public init(element: Element, droppedBefore: Int) {
        self.element = element
        self.droppedBefore = droppedBefore
    }
}

extension HandoffTaken: Sendable where Element: Sendable {}

/// Outcome of offering an element to a hand-off without waiting.
public enum HandoffSendOutcome: Sendable, Hashable {
    /// Queued or handed to the receiver.
    case accepted
    /// Dropped (overflow policy `dropNewest`, or the consumer has finished); counted.
    case dropped
    /// Full under `.suspend`: the element was not taken; the sender may wait for room.
    case mustWait
}

/// The state of a bounded, multi-producer single-consumer hand-off, with no lock and no continuation of its
/// own: every event is a `mutating` function that returns what the caller must do once it has released the
/// lock (``Effects``: a waiting receiver to resume and with what, waiting senders to resume).
///
/// `Sender` and `Receiver` are whatever the storage parks — continuations in ``Handoff``, plain numbers in
/// the tests, which drive this type through every interleaving of send, receive, cancel and finish.
///
/// Rules, in one place:
/// - Capacity is counted in weight (1 per element unless the caller weighs them, as a byte queue does);
///   an element is admitted while the queue holds less than `capacity`, so one heavier than the whole
///   capacity still passes alone.
/// - A sender that must wait (`.suspend`) and is cancelled keeps its element: it is queued over capacity
///   and the sender resumes. Nothing a sender gave is lost except by an overflow policy or a consumer that
///   has finished, and both are counted as dropped.
/// - A receiver waits only while nothing is queued; a cancelled receiver gets `nil`.
/// - The stream ends for the receiver when every producer has finished and the queue is empty.
/// - Once the consumer has finished, whatever is queued or waiting is dropped (counted) and no sender waits.
public struct HandoffStateMachine<Element, Sender, Receiver> {
    /// Identifies a parked sender or receiver (for cancellation).
    public typealias ID = UInt64

    public typealias Taken = HandoffTaken<Element>
    public typealias SendOutcome = HandoffSendOutcome

    /// What the caller does after releasing the lock.
    public struct Effects {
        /// A parked receiver to resume, with its element (`nil`: end of stream, or cancelled).
        public var receiver: (Receiver, Taken?)?
        /// Parked senders to resume (their elements were queued, or dropped and counted).
        public var senders: [Sender] = []
        public init() {}
        public var isEmpty: Bool { receiver == nil && senders.isEmpty }
    }

    /// Outcome of ``receive()``.
    public enum ReceiveOutcome {
        case element(Taken)
        /// End of stream (every producer finished, nothing queued).
        case finished
        /// Nothing queued: the caller parks with ``parkReceiver(_:_:cancelled:)``.
        case mustWait
    }

    struct Item {
        var element: Element
        var weight: Int
        var droppable: Bool
        /// What a drop of this item adds to the next ``Taken/droppedBefore`` (its weight unless told).
        var tally: Int
    }

    struct ParkedSender {
        var id: ID
        var item: Item
        var sender: Sender
    }

    /// Capacity in weight units (at least 1).
    public let capacity: Int
    public let overflow: HandoffOverflow

    // Ring of queued items.
    private var ring: [Item?]
    private var head = 0
    private(set) public var depth = 0
    /// Weight of what is queued.
    private(set) public var weight = 0

    private var producers: Int
    private(set) public var consumerFinished = false
    private var receiver: (id: ID, receiver: Receiver)?
    private var parked: [ParkedSender] = []
    private var nextID: ID = 0

    /// Elements accepted (queued or handed over).
    private(set) public var sent: UInt64 = 0
    /// Elements dropped: overflow policy, flushes, and anything given after or left at the consumer's finish.
    private(set) public var dropped: UInt64 = 0
    /// Highest number of elements queued at once.
    private(set) public var maxDepth = 0
    private var droppedWeightSinceTake = 0

    public init(capacity: Int, overflow: HandoffOverflow, producers: Int = 1) {
        self.capacity = Swift.max(1, capacity)
        self.overflow = overflow
        self.producers = producers
        self.ring = Array(repeating: nil, count: Swift.min(Swift.max(1, capacity), 64))
    }

    /// A fresh identity for a sender or receiver about to park.
    public mutating func makeID() -> ID {
        nextID &+= 1
        return nextID
    }

    /// True when the receiver would see the end of the stream now.
    public var isFinished: Bool { producers <= 0 && depth == 0 }
    /// Senders waiting for room.
    public var waitingSenders: Int { parked.count }
    /// True while a receiver is parked.
    public var receiverWaiting: Bool { receiver != nil }

    // MARK: - Ring

    private mutating func push(_ item: Item) {
        if depth == ring.count {
            var grown: [Item?] = []
            grown.reserveCapacity(ring.count * 2)
            for i in 0..<depth { grown.append(ring[(head + i) % ring.count]) }
            grown.append(contentsOf: repeatElement(nil, count: ring.count))
            ring = grown
            head = 0
        }
        ring[(head + depth) % ring.count] = item
        depth += 1
        weight += item.weight
        if depth > maxDepth { maxDepth = depth }
    }

    private mutating func popFirst() -> Item {
        let item = ring[head]!
        ring[head] = nil
        head = (head + 1) % ring.count
        depth -= 1
        weight -= item.weight
        return item
    }

    /// Removes the item at offset `i` from the head, keeping the order of the rest.
    private mutating func remove(at i: Int) -> Item {
        if i == 0 { return popFirst() }
        let item = ring[(head + i) % ring.count]!
        for j in stride(from: i, to: depth - 1, by: 1) {
            ring[(head + j) % ring.count] = ring[(head + j + 1) % ring.count]
        }
        ring[(head + depth - 1) % ring.count] = nil
        depth -= 1
        weight -= item.weight
        return item
    }

    private var hasRoom: Bool { weight < capacity }

    private mutating func take() -> Taken {
        let item = popFirst()
        let taken = Taken(element: item.element, droppedBefore: droppedWeightSinceTake)
        droppedWeightSinceTake = 0
        return taken
    }

    private mutating func countDrop(_ item: Item) {
        dropped += 1
        droppedWeightSinceTake += item.tally
    }

    /// Parked senders take the room there is, oldest first.
    private mutating func admitParked(into effects: inout Effects) {
        while hasRoom, !parked.isEmpty {
            let p = parked.removeFirst()
            push(p.item); sent += 1
            effects.senders.append(p.sender)
        }
    }

    // MARK: - Events

    /// A producer offers an element without waiting.
    public mutating func send(_ element: Element, weight: Int = 1, droppable: Bool = true, tally: Int? = nil) -> (SendOutcome, Effects) {
        var effects = Effects()
        let item = Item(element: element, weight: weight, droppable: droppable, tally: tally ?? weight)
        if consumerFinished { dropped += 1; return (.dropped, effects) }
        if let r = receiver {
            // A parked receiver means nothing is queued: hand over directly.
            receiver = nil
            sent += 1
            if maxDepth == 0 { maxDepth = 1 }
            let taken = Taken(element: element, droppedBefore: droppedWeightSinceTake)
            droppedWeightSinceTake = 0
            effects.receiver = (r.receiver, taken)
            return (.accepted, effects)
        }
        // Parked senders go first, so a new element does not overtake them.
        if hasRoom && parked.isEmpty {
            push(item); sent += 1
            return (.accepted, effects)
        }
        switch overflow {
        case .suspend:
            return (.mustWait, effects)
        case .dropNewest:
            countDrop(item)
            return (.dropped, effects)
        case .dropOldest:
            if let i = (0..<depth).first(where: { ring[(head + $0) % ring.count]!.droppable }) {
                countDrop(remove(at: i))
            }
            // With nothing droppable queued, the element is queued over capacity rather than lost.
            push(item); sent += 1
            return (.accepted, effects)
        }
    }

    /// A sender told ``SendOutcome/mustWait`` parks (the state may have changed since). Returns whether
    /// it must resume at once: the consumer finished (element dropped), room appeared, or the sender is
    /// being cancelled (the element is queued over capacity).
    public mutating func parkSender(_ id: ID, _ sender: Sender, element: Element, weight: Int = 1, droppable: Bool = true,
                                    tally: Int? = nil, cancelled: Bool) -> (resumeNow: Bool, Effects) {
        var effects = Effects()
        let item = Item(element: element, weight: weight, droppable: droppable, tally: tally ?? weight)
        if consumerFinished { dropped += 1; return (true, effects) }
        if let r = receiver {
            receiver = nil
            sent += 1
            if maxDepth == 0 { maxDepth = 1 }
            effects.receiver = (r.receiver, Taken(element: element, droppedBefore: droppedWeightSinceTake))
            droppedWeightSinceTake = 0
            return (true, effects)
        }
        if (hasRoom && parked.isEmpty) || cancelled {
            push(item); sent += 1
            return (true, effects)
        }
        parked.append(ParkedSender(id: id, item: item, sender: sender))
        return (false, effects)
    }

    /// A parked sender's task was cancelled: its element is queued (over capacity) and it resumes.
    public mutating func cancelSender(_ id: ID) -> Effects {
        var effects = Effects()
        guard let i = parked.firstIndex(where: { $0.id == id }) else { return effects }
        let p = parked.remove(at: i)
        push(p.item); sent += 1
        effects.senders.append(p.sender)
        return effects
    }

    /// The consumer asks for the next element without waiting.
    public mutating func receive() -> (ReceiveOutcome, Effects) {
        var effects = Effects()
        if depth > 0 {
            let taken = take()
            admitParked(into: &effects)
            return (.element(taken), effects)
        }
        if producers <= 0 || consumerFinished { return (.finished, effects) }
        return (.mustWait, effects)
    }

    /// A receiver told ``ReceiveOutcome/mustWait`` parks. Returns `.some(value)` to resume at once with
    /// (`nil` inside: end of stream or cancelled), `nil` when parked.
    public mutating func parkReceiver(_ id: ID, _ r: Receiver, cancelled: Bool) -> (resumeWith: Taken??, Effects) {
        var effects = Effects()
        if depth > 0 {
            let taken = take()
            admitParked(into: &effects)
            return (.some(taken), effects)
        }
        if producers <= 0 || consumerFinished || cancelled { return (.some(nil), effects) }
        precondition(receiver == nil, "a hand-off has one consumer")
        receiver = (id, r)
        return (nil, effects)
    }

    /// The parked receiver's task was cancelled: it resumes with `nil`.
    public mutating func cancelReceiver(_ id: ID) -> Effects {
        var effects = Effects()
        if let r = receiver, r.id == id {
            receiver = nil
            effects.receiver = (r.receiver, nil)
        }
        return effects
    }

    /// One producer is done; after the last, the receiver sees the end once the queue is empty.
    public mutating func producerFinished() -> Effects {
        var effects = Effects()
        producers -= 1
        if producers <= 0, depth == 0, let r = receiver {
            receiver = nil
            effects.receiver = (r.receiver, nil)
        }
        return effects
    }

    /// The consumer is done: what is queued or waiting is dropped (counted), waiting senders resume and no
    /// sender waits again.
    public mutating func finishConsumer() -> Effects {
        var effects = Effects()
        consumerFinished = true
        while depth > 0 { countDrop(popFirst()) }
        for p in parked { countDrop(p.item); effects.senders.append(p.sender) }
        parked = []
        if let r = receiver {
            receiver = nil
            effects.receiver = (r.receiver, nil)
        }
        return effects
    }

    /// Discards the queued and waiting elements `matching` selects, as an interruption does; counted as
    /// dropped. A waiting sender whose element is discarded resumes at once, room or not; the others take
    /// the room freed, oldest first. Returns how many were discarded.
    public mutating func flush(where matching: (Element) -> Bool) -> (Int, Effects) {
        flush(removing: flushCandidates.map(matching))
    }

    /// What ``flush(removing:)`` decides on: the queued elements, oldest first, then the waiting senders'.
    public var flushCandidates: [Element] { queued + parked.map(\.item.element) }

    /// ``flush(where:)`` with the decision made: `remove[i]` for the i-th of ``flushCandidates``.
    public mutating func flush(removing remove: [Bool]) -> (Int, Effects) {
        var effects = Effects()
        var kept: [Item] = []
        var removed = 0
        var index = 0
        func discards() -> Bool {
            defer { index += 1 }
            return index < remove.count && remove[index]
        }
        while depth > 0 {
            let item = popFirst()
            if discards() { countDrop(item); removed += 1 } else { kept.append(item) }
        }
        for item in kept { push(item) }
        // Every waiting sender is decided on, not only those the freed room admits: one left waiting with a
        // discarded element would deliver it later.
        var waiting: [ParkedSender] = []
        for p in parked {
            if discards() {
                sent += 1
                countDrop(p.item); removed += 1
                effects.senders.append(p.sender)
            } else {
                waiting.append(p)
            }
        }
        parked = waiting
        admitParked(into: &effects)
        return (removed, effects)
    }

    /// Every element queued, oldest first (for tests and inspection).
    public var queued: [Element] { (0..<depth).map { ring[(head + $0) % ring.count]!.element } }
}

extension HandoffStateMachine.Effects: Sendable where Element: Sendable, Sender: Sendable, Receiver: Sendable {}
