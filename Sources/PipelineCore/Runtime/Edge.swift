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

/// A bounded, multi-producer single-consumer queue of frames: the only kind of edge there is.
///
/// - `block`: a producer that finds the queue full is suspended until the consumer takes a frame
///   (lossless back-pressure). A producer cancelled while suspended still delivers its frame.
/// - `drop-oldest` / `drop-newest`: the producer never waits; drops are counted.
///
/// The edge ends when every producer has called ``producerFinished()`` and the queue is empty.
/// If the consumer finishes first, later frames are counted as dropped and producers never block.
public final class BoundedEdge: Sendable {
    private struct Waiter {
        var id: UInt64
        var frame: Frame
        var continuation: CheckedContinuation<Void, Never>
    }

    private struct State {
        var buffer: [Frame?]
        var head = 0
        var count = 0
        var producers: Int
        var consumerGone = false
        var consumer: CheckedContinuation<Frame?, Never>?
        var blocked: [Waiter] = []
        var nextWaiterID: UInt64 = 0
        var sent: UInt64 = 0
        var dropped: UInt64 = 0
        var maxDepth = 0
        var age = AgeHistogram()

        mutating func push(_ frame: Frame) {
            buffer[(head + count) % buffer.count] = frame
            count += 1
            if count > maxDepth { maxDepth = count }
        }

        mutating func pop() -> Frame {
            let f = buffer[head]!
            buffer[head] = nil
            head = (head + 1) % buffer.count
            count -= 1
            return f
        }

        /// Grows the ring by one slot at the tail end (used only for cancelled blocked producers).
        mutating func pushOverCapacity(_ frame: Frame) {
            if count == buffer.count {
                var grown: [Frame?] = []
                grown.reserveCapacity(buffer.count + 1)
                for i in 0..<count { grown.append(buffer[(head + i) % buffer.count]) }
                grown.append(nil)
                buffer = grown
                head = 0
            }
            push(frame)
        }
    }

    /// Capacity in frames (at least 1).
    public let capacity: Int
    /// Overflow policy.
    public let overflow: OverflowPolicy
    /// `from -> to`, for statistics and messages.
    public let label: String
    private let state: LockedValue<State>
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
        self.state = LockedValue(State(buffer: Array(repeating: nil, count: capacity), producers: producers))
    }

    /// Current statistics.
    public var stats: EdgeStats {
        state.withLock { s in
            EdgeStats(label: label, sent: s.sent, dropped: s.dropped, maxDepth: s.maxDepth, capacity: capacity, overflow: overflow,
                      age: s.age.summary)
        }
    }

    /// The ages measured so far.
    var ageHistogram: AgeHistogram { state.withLock { $0.age } }

    /// Frames currently queued.
    public var depth: Int { state.withLock { $0.count } }

    /// Offers a frame without ever waiting. Returns `false` only under `block` when the queue is full
    /// (the frame was not taken); drop policies always return `true` (counting any drop).
    public func trySend(_ frame: Frame) -> Bool {
        var wake: CheckedContinuation<Frame?, Never>?
        var handoff: Frame?
        let accepted: Bool = state.withLock { s in
            if s.consumerGone { s.dropped += 1; return true }
            if let c = s.consumer, s.count == 0 {
                s.consumer = nil
                s.sent += 1
                if s.maxDepth == 0 { s.maxDepth = 1 }
                measure(frame, &s)
                wake = c
                handoff = frame
                return true
            }
            if s.count < capacity {
                s.push(frame); s.sent += 1
                return true
            }
            switch overflow {
            case .block:
                return false
            case .dropOldest:
                _ = s.pop(); s.dropped += 1
                s.push(frame); s.sent += 1
                return true
            case .dropNewest:
                s.dropped += 1
                return true
            }
        }
        if let wake { wake.resume(returning: handoff) }
        return accepted
    }

    /// Sends a frame, suspending under `block` while the queue is full.
    public func send(_ frame: Frame) async {
        if trySend(frame) { return }
        let id = state.withLock { s -> UInt64 in s.nextWaiterID += 1; return s.nextWaiterID }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (cont: CheckedContinuation<Void, Never>) in
                var resumeNow = false
                var wake: CheckedContinuation<Frame?, Never>?
                var handoff: Frame?
                state.withLock { s in
                    if s.consumerGone {
                        s.dropped += 1; resumeNow = true
                    } else if s.count < capacity || Task.isCancelled {
                        // Room appeared (or we are being cancelled): deliver without waiting.
                        if let c = s.consumer, s.count == 0 {
                            s.consumer = nil; s.sent += 1; measure(frame, &s); wake = c; handoff = frame
                        } else {
                            s.pushOverCapacity(frame); s.sent += 1
                        }
                        resumeNow = true
                    } else {
                        s.blocked.append(Waiter(id: id, frame: frame, continuation: cont))
                    }
                }
                if let wake { wake.resume(returning: handoff) }
                if resumeNow { cont.resume() }
            }
        } onCancel: {
            // A cancelled producer must not stay suspended, and must not lose its frame.
            let waiter: Waiter? = state.withLock { s in
                guard let i = s.blocked.firstIndex(where: { $0.id == id }) else { return nil }
                let w = s.blocked.remove(at: i)
                s.pushOverCapacity(w.frame); s.sent += 1
                return w
            }
            waiter?.continuation.resume()
        }
    }

    /// Takes the next frame, suspending while the queue is empty; `nil` at end of stream.
    public func receive() async -> Frame? {
        if let ready = tryReceive() { return ready.frame }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (cont: CheckedContinuation<Frame?, Never>) in
                var result: Frame??
                var release: CheckedContinuation<Void, Never>?
                state.withLock { s in
                    if s.count > 0 {
                        let f = s.pop()
                        measure(f, &s)
                        result = .some(f)
                        if !s.blocked.isEmpty {
                            let w = s.blocked.removeFirst()
                            s.push(w.frame); s.sent += 1
                            release = w.continuation
                        }
                    } else if s.producers <= 0 || Task.isCancelled {
                        result = .some(nil)
                    } else {
                        s.consumer = cont
                    }
                }
                release?.resume()
                if let result { cont.resume(returning: result) }
            }
        } onCancel: {
            let c: CheckedContinuation<Frame?, Never>? = state.withLock { s in
                let c = s.consumer; s.consumer = nil; return c
            }
            c?.resume(returning: nil)
        }
    }

    /// Records the age of a frame the consumer takes.
    @inline(__always)
    private func measure(_ frame: Frame, _ s: inout State) {
        level.note(frame)
        if let clock, let created = frame.created { s.age.record(nanos: (clock.now() - created).nanoseconds) }
    }

    /// Takes a frame if one is queued. `.some(nil)` means end of stream; `nil` means "nothing yet".
    private func tryReceive() -> (frame: Frame?, Void)? {
        var release: CheckedContinuation<Void, Never>?
        let out: (frame: Frame?, Void)? = state.withLock { s in
            if s.count > 0 {
                let f = s.pop()
                measure(f, &s)
                if !s.blocked.isEmpty {
                    let w = s.blocked.removeFirst()
                    s.push(w.frame); s.sent += 1
                    release = w.continuation
                }
                return (f, ())
            }
            if s.producers <= 0 { return (nil, ()) }
            return nil
        }
        release?.resume()
        return out
    }

    /// Discards the frames waiting in the queue that `matching` selects (all by default), as an
    /// interruption does; they are counted as dropped. Returns how many were discarded.
    @discardableResult
    public func flush(where matching: (Frame) -> Bool = { _ in true }) -> Int {
        var release: [CheckedContinuation<Void, Never>] = []
        let n: Int = state.withLock { s in
            var kept: [Frame] = []
            var removed = 0
            while s.count > 0 {
                let f = s.pop()
                if matching(f) { removed += 1 } else { kept.append(f) }
            }
            for f in kept { s.push(f) }
            // Producers waiting for room take it now.
            while s.count < capacity, !s.blocked.isEmpty {
                let w = s.blocked.removeFirst()
                if matching(w.frame) { removed += 1 } else { s.push(w.frame) }
                s.sent += 1
                release.append(w.continuation)
            }
            s.dropped += UInt64(removed)
            return removed
        }
        for c in release { c.resume() }
        return n
    }

    /// One producer is done. When all are, the consumer sees end of stream after the queue drains.
    public func producerFinished() {
        let c: CheckedContinuation<Frame?, Never>? = state.withLock { s in
            s.producers -= 1
            if s.producers <= 0, s.count == 0 {
                let c = s.consumer; s.consumer = nil; return c
            }
            return nil
        }
        c?.resume(returning: nil)
    }

    /// The consumer is done: queued frames are discarded (counted as dropped) and producers never block again.
    public func consumerFinished() {
        let waiters: [Waiter] = state.withLock { s in
            s.consumerGone = true
            s.dropped += UInt64(s.count) + UInt64(s.blocked.count)
            while s.count > 0 { _ = s.pop() }
            let w = s.blocked; s.blocked = []
            return w
        }
        for w in waiters { w.continuation.resume() }
    }
}
