import PipelineCore

/// The rules of the queue between a playback node's task and its device thread, with nothing else:
/// events in (a put, a take, an interruption, a flush answered, a failure, a stop), and what to do out
/// (whom to wake, with what). ``AudioPlaybackQueue`` holds one under a lock and does the waking after
/// the lock is released. Generic over the waiters, so that tests drive it with plain values.
///
/// - The producer (the node's task) puts buffers while fewer than `capacity` wait; otherwise it waits
///   (one producer) until the device thread takes one, then tries again.
/// - The device thread takes buffers in order; it sees the end once the producer finished and nothing
///   waits, and nothing more once stopped.
/// - An interruption discards what waits (a waiting put counts as taken: its audio is part of what is
///   cut), then asks the device thread to flush the device; the one asking waits for the answer
///   (or its own timeout).
/// - A failure of the device thread is thrown by the next put; a stop ends everything at once.
struct PlaybackQueueStateMachine<Producer, FlushWaiter> {
    typealias ProducerResume = PlaybackProducerResume

    /// What a put leads to.
    enum PutOutcome {
        /// Queued: wake the device thread.
        case queued
        /// Full: the producer was stored; it is resumed by a later event.
        case wait
        /// The device failed: throw its error.
        case failed(any Error)
        /// Stopped: throw cancellation.
        case stopped
    }

    /// What the device thread's take leads to.
    enum TakeOutcome {
        /// The next buffer; resume `producer` (if any) with ``ProducerResume/retry``.
        case buffer([Int16], producer: Producer?)
        /// An interruption asks for the device to be flushed (then ``flushed()``).
        case flush
        /// Nothing waits yet: block until woken.
        case empty
        /// The end: finished and drained, or stopped.
        case end
    }

    /// What a flush request leads to.
    enum FlushRequest {
        /// Nothing to flush (stopped, finished or failed): answer the waiter now with nil.
        case answerNow
        /// Requested: wake the device thread; an earlier waiter, if one still waited, is answered with nil.
        case requested(previous: FlushWaiter?)
    }

    let capacity: Int
    private var items: [[Int16]] = []
    private var head = 0
    private(set) var finished = false
    private(set) var stopped = false
    private var failure: (any Error)?
    private var producer: Producer?
    private var flushWaiter: FlushWaiter?
    /// An interruption asked the device thread to flush the device and it has not answered.
    private(set) var flushRequested = false
    /// Samples (interleaved) waiting.
    private(set) var queuedSamples = 0
    /// The device's delay at its last write, and when it was measured.
    private(set) var deviceDelay: (delay: Duration, at: ContinuousClock.Instant)?

    init(capacity: Int) { self.capacity = max(capacity, 1) }

    /// Buffers waiting.
    var depth: Int { items.count - head }

    /// The producer puts `samples`; `producer` is stored when it must wait.
    mutating func put(_ samples: [Int16], producer waiter: Producer) -> PutOutcome {
        if let failure { return .failed(failure) }
        if stopped { return .stopped }
        guard depth < capacity else {
            producer = waiter
            return .wait
        }
        items.append(samples)
        queuedSamples += samples.count
        return .queued
    }

    /// The producer has no more samples.
    mutating func finish() { finished = true }

    /// The device thread takes the next buffer.
    mutating func take() -> TakeOutcome {
        if stopped { return .end }
        if flushRequested { return .flush }
        if head < items.count {
            let item = items[head]
            queuedSamples -= item.count
            head += 1
            if head > 64 && head * 2 > items.count { items.removeFirst(head); head = 0 }
            let p = producer
            producer = nil
            return .buffer(item, producer: p)
        }
        return finished ? .end : .empty
    }

    /// Everything ends now: the producer and a flush waiter are to be resumed (retry, nil).
    mutating func stop() -> (producer: Producer?, flush: FlushWaiter?) {
        stopped = true
        defer { producer = nil; flushWaiter = nil }
        return (producer, flushWaiter)
    }

    /// The device failed: the next put throws `error`; the producer and a flush waiter are to be resumed (retry, nil).
    mutating func fail(_ error: any Error) -> (producer: Producer?, flush: FlushWaiter?) {
        failure = error
        defer { producer = nil; flushWaiter = nil }
        return (producer, flushWaiter)
    }

    /// An interruption: what waits is discarded. Returns the samples discarded and the producer to resume
    /// with ``ProducerResume/taken``.
    mutating func interrupt() -> (discarded: Int, producer: Producer?) {
        let n = queuedSamples
        items = []
        head = 0
        queuedSamples = 0
        defer { producer = nil }
        return (n, producer)
    }

    /// After ``interrupt()``: asks the device thread to flush the device; `waiter` gets its answer.
    mutating func requestFlush(_ waiter: FlushWaiter) -> FlushRequest {
        if stopped || finished || failure != nil { return .answerNow }
        let previous = flushWaiter
        flushWaiter = waiter
        flushRequested = true
        return .requested(previous: previous)
    }

    /// The device thread flushed the device: the waiter to answer with what was discarded.
    mutating func flushed() -> FlushWaiter? {
        flushRequested = false
        defer { flushWaiter = nil }
        return flushWaiter
    }

    /// The one asking gave up waiting: the waiter to answer with nil (the device thread's answer goes to no one).
    mutating func flushTimedOut() -> FlushWaiter? { flushed() }

    /// The device thread's delay after a write.
    mutating func reportDelay(_ delay: Duration?, at now: ContinuousClock.Instant) {
        deviceDelay = delay.map { ($0, now) }
    }

    /// Audio not yet played at `now`, in `format`: what waits here plus what the device still holds
    /// (its delay at the last write, less the time since); nil while the device reports none.
    func unplayed(format: AudioFormat, at now: ContinuousClock.Instant) -> Duration? {
        guard let (delay, at) = deviceDelay else { return nil }
        let queued = Duration.nanoseconds(MediaTime.nanos(samples: Int64(queuedSamples / max(format.channels, 1)), rate: format.sampleRate))
        return queued + max(.zero, delay - (now - at))
    }
}

/// How a producer stored by ``PlaybackQueueStateMachine`` is resumed.
enum PlaybackProducerResume: Sendable, Equatable {
    /// Try the put again (a buffer was taken, or everything ended).
    case retry
    /// The put counts as done (an interruption discarded what it was waiting to add).
    case taken
}
