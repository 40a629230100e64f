import Synchronization

/// Counters of one edge, read at any time.
public struct EdgeStats: Sendable, Hashable {
    /// `from -> to` as written in the graph.
    public var label: String
    /// Frames accepted into the queue.
    public var sent: UInt64
    /// Frames dropped by the overflow policy (or sent after the consumer had finished).
    public var dropped: UInt64
    /// Highest queue depth seen.
    public var maxDepth: Int
    /// Queue capacity.
    public var capacity: Int
    /// Overflow policy.
    public var overflow: OverflowPolicy
    /// Age of the frames the consumer took (now minus ``Frame/created``), when frames carry it.
    public var age: AgeSummary? = nil
}

/// A bounded, multi-producer single-consumer queue of frames: the only kind of edge there is, a
/// ``Handoff`` of frames (whose state machine holds the rules) that measures what its consumer takes.
///
/// - `block`: a producer that finds the queue full is suspended until the consumer takes a frame
///   (lossless back-pressure). A producer cancelled while suspended still delivers its frame.
/// - `drop-oldest` / `drop-newest`: the producer never waits; drops are counted.
///
/// The edge ends when every producer has called ``producerFinished()`` and the queue is empty.
/// If the consumer finishes first, later frames are counted as dropped and producers never block.
public final class BoundedEdge: Sendable {
    /// Capacity in frames (at least 1).
    public let capacity: Int
    /// Overflow policy.
    public let overflow: OverflowPolicy
    /// `from -> to`, for statistics and messages.
    public let label: String
    private let queue: Handoff<Frame>
    /// The ages of the frames taken, and the last one's (one consumer: read after its `receive`), under
    /// one lock taken once per frame.
    private struct Ages {
        var histogram = AgeHistogram()
        var last: Duration?
    }
    private let age = LockedValue(Ages())
    let clock: MediaClock?
    /// The audio level of frames taken, measured only while a live view watches.
    let level = EdgeLevel()

    /// Creates an edge with `producers` producers (more than one for fan-in).
    public convenience init(capacity: Int, overflow: OverflowPolicy, label: String = "", producers: Int = 1) {
        self.init(capacity: capacity, overflow: overflow, label: label, producers: producers, clock: nil)
    }

    /// An edge that measures the age of the frames its consumer takes on `clock`.
    init(capacity: Int, overflow: OverflowPolicy, label: String, producers: Int, clock: MediaClock?) {
        precondition(capacity >= 1, "edge capacity must be at least 1")
        self.clock = clock
        self.capacity = capacity
        self.overflow = overflow
        self.label = label
        let policy: HandoffOverflow = switch overflow {
        case .block: .suspend
        case .dropOldest: .dropOldest
        case .dropNewest: .dropNewest
        }
        let level = self.level, age = self.age
        queue = Handoff(capacity: capacity, overflow: policy, producers: producers, onTake: { frame in
            level.note(frame)
            if let clock, let created = frame.created {
                let frameAge = clock.now() - created
                age.withLock { a in
                    a.histogram.record(nanos: frameAge.nanoseconds)
                    a.last = frameAge
                }
            }
        })
    }

    /// Current statistics.
    public var stats: EdgeStats {
        let c = queue.counters
        return EdgeStats(label: label, sent: c.sent, dropped: c.dropped, maxDepth: c.maxDepth, capacity: capacity, overflow: overflow,
                         age: clock == nil ? nil : age.withLock { $0.histogram.summary })
    }

    /// The ages measured so far.
    var ageHistogram: AgeHistogram { age.withLock { $0.histogram } }

    /// Frames currently queued.
    public var depth: Int { queue.depth }
    /// Producers waiting for room now.
    public var waitingProducers: Int { queue.waitingSenders }
    /// True while the consumer waits for a frame.
    public var isConsumerWaiting: Bool { queue.isReceiverWaiting }

    /// Offers a frame without ever waiting. Returns `false` only under `block` when the queue is full
    /// (the frame was not taken); drop policies always return `true` (counting any drop).
    public func trySend(_ frame: Frame) -> Bool {
        queue.trySend(frame) != .mustWait
    }

    /// Sends a frame, suspending under `block` while the queue is full.
    public func send(_ frame: Frame) async {
        await queue.send(frame)
    }

    /// Takes the next frame, suspending while the queue is empty; `nil` at end of stream.
    public func receive() async -> Frame? {
        await queue.receive()?.element
    }

    /// The next frame with its age when it was taken (as the edge's statistics count it), `nil` at end of stream.
    func receiveMeasured() async -> (frame: Frame, age: Duration?)? {
        guard let frame = await queue.receive()?.element else { return nil }
        guard clock != nil, frame.created != nil else { return (frame, nil) }
        return (frame, age.withLock { $0.last })
    }

    /// Discards the frames waiting in the queue that `matching` selects (all by default), as an
    /// interruption does; they are counted as dropped. Returns how many were discarded.
    @discardableResult
    public func flush(where matching: (Frame) -> Bool = { _ in true }) -> Int {
        queue.flush(where: matching)
    }

    /// One producer is done. When all are, the consumer sees end of stream after the queue drains.
    public func producerFinished() {
        queue.producerFinished()
    }

    /// The consumer is done: queued frames are discarded (counted as dropped) and producers never block again.
    public func consumerFinished() {
        queue.consumerFinished()
    }
}
