/// One message bound for JetStream: its subject, payload and de-duplication id (`Nats-Msg-Id`).
public struct OutboundMessage: Sendable, Equatable {
    public var subject: String
    public var payload: [UInt8]
    /// Unique per message: the stream drops a second copy with the same id within its duplicate window,
    /// which makes resending after a lost acknowledgement safe.
    public var id: String

    public init(subject: String, payload: [UInt8], id: String) {
        self.subject = subject; self.payload = payload; self.id = id
    }
}

/// The bookkeeping of at-least-once publishing, as a pure state machine (no I/O, no clock of its own):
/// messages wait in a bounded queue, go out in order within a window, are resent when their
/// acknowledgement does not come in time or the connection is lost, and leave only when acknowledged.
///
/// When the queue is full, the oldest waiting message is dropped (counted): a worker whose bus is down
/// for long keeps the latest events. Messages already sent are never dropped for room.
public struct PublishQueue: Sendable {
    /// What to do about an acknowledgement.
    public enum AckOutcome: Sendable, Equatable {
        /// Stored (or a duplicate of a stored one): done.
        case stored
        /// Refused for good after `maxAttempts`: dropped and counted.
        case rejected
        /// Will be sent again.
        case retry
        /// Not ours (late, or already settled).
        case unknown
    }

    /// Messages held at most (waiting + in flight).
    public let capacity: Int
    /// Messages in flight at most.
    public let window: Int
    /// How long an acknowledgement may take before the message is sent again.
    public let ackTimeout: Duration
    /// Attempts before a message the server keeps refusing is dropped.
    public let maxAttempts: Int

    struct Entry: Sendable {
        var message: OutboundMessage
        var seq: UInt64
        var attempts = 0
        var sentAt: ContinuousClock.Instant?
    }
    private var waiting: [Entry] = []
    private var waitingHead = 0
    private var inFlight: [UInt64: Entry] = [:]
    private var nextSeq: UInt64 = 0

    /// Messages accepted, acknowledged, dropped for room, rejected by the server, sent again.
    public private(set) var accepted: UInt64 = 0
    public private(set) var acknowledged: UInt64 = 0
    public private(set) var dropped: UInt64 = 0
    public private(set) var rejected: UInt64 = 0
    public private(set) var resent: UInt64 = 0
    /// Most messages held at once.
    public private(set) var maxHeld = 0

    public init(capacity: Int = 10_000, window: Int = 256, ackTimeout: Duration = .seconds(2), maxAttempts: Int = 5) {
        precondition(capacity > 0 && window > 0 && maxAttempts > 0)
        self.capacity = capacity; self.window = window; self.ackTimeout = ackTimeout; self.maxAttempts = maxAttempts
    }

    /// Messages held: waiting and in flight.
    public var held: Int { waiting.count - waitingHead + inFlight.count }

    /// The messages held, in the order they were queued.
    public var heldMessages: [OutboundMessage] {
        (inFlight.values.map { $0 } + waiting[waitingHead...]).sorted { $0.seq < $1.seq }.map(\.message)
    }
    public var isEmpty: Bool { held == 0 }
    public var inFlightCount: Int { inFlight.count }

    /// Queues a message; returns the id of the message dropped to make room, if one was.
    @discardableResult
    public mutating func enqueue(_ message: OutboundMessage) -> OutboundMessage? {
        accepted += 1
        var victim: OutboundMessage?
        if held >= capacity {
            if waitingHead < waiting.count {
                victim = waiting[waitingHead].message
                waitingHead += 1
            } else {
                // Everything held is in flight: the new message is the one that cannot be kept.
                dropped += 1
                return message
            }
            dropped += 1
        }
        nextSeq += 1
        waiting.append(Entry(message: message, seq: nextSeq))
        compact()
        maxHeld = max(maxHeld, held)
        return victim
    }

    /// The messages to write now: acknowledgements overdue at `now` first (sent again), then waiting
    /// ones in order while the window has room. Each is marked sent at `now`.
    public mutating func takeForSending(now: ContinuousClock.Instant) -> [(seq: UInt64, message: OutboundMessage)] {
        var out: [(UInt64, OutboundMessage)] = []
        for seq in inFlight.keys.sorted() {
            guard var e = inFlight[seq], let sent = e.sentAt, now - sent >= ackTimeout else { continue }
            e.attempts += 1
            e.sentAt = now
            inFlight[seq] = e
            resent += 1
            out.append((seq, e.message))
        }
        while inFlight.count < window && waitingHead < waiting.count {
            var e = waiting[waitingHead]
            waitingHead += 1
            e.attempts += 1
            e.sentAt = now
            inFlight[e.seq] = e
            out.append((e.seq, e.message))
        }
        compact()
        return out
    }

    /// The id of in-flight message `seq`.
    public func id(inFlight seq: UInt64) -> String? { inFlight[seq]?.message.id }

    /// The server stored message `seq` (or recognized it as a duplicate).
    public mutating func acknowledged(_ seq: UInt64) -> AckOutcome {
        guard inFlight.removeValue(forKey: seq) != nil else { return .unknown }
        acknowledged += 1
        return .stored
    }

    /// The server answered `seq` with an error: sent again later, or dropped after `maxAttempts`.
    /// `permanent` errors (the message can never be stored as it is) are dropped at once.
    public mutating func refused(_ seq: UInt64, permanent: Bool) -> AckOutcome {
        guard let e = inFlight.removeValue(forKey: seq) else { return .unknown }
        if permanent || e.attempts >= maxAttempts {
            rejected += 1
            return .rejected
        }
        requeueFront([e])
        return .retry
    }

    /// The connection was lost: everything in flight waits again, in its original order, ahead of the rest.
    public mutating func connectionLost() {
        let back = inFlight.values.sorted { $0.seq < $1.seq }
        inFlight = [:]
        requeueFront(back)
    }

    private mutating func requeueFront(_ entries: [Entry]) {
        guard !entries.isEmpty else { return }
        let rest = Array(waiting[waitingHead...])
        waiting = entries.map { var e = $0; e.sentAt = nil; return e } + rest
        waitingHead = 0
        // Keep order by sequence: entries sent earlier go before later waiting ones.
        waiting.sort { $0.seq < $1.seq }
    }

    private mutating func compact() {
        if waitingHead > 1024 && waitingHead * 2 > waiting.count {
            waiting.removeFirst(waitingHead)
            waitingHead = 0
        }
    }
}
