import Dispatch
import PipelineCore
import Synchronization

/// A bounded queue from a playback node's task to its device thread.
///
/// The task suspends (without blocking a thread) while the queue is full, which back-pressures
/// the graph; the device thread blocks on a semaphore while it is empty.
final class AudioPlaybackQueue: Sendable {
    typealias Waiter = CheckedContinuation<Result<Bool, any Error>, Never>
    private struct State {
        var items: [[Int16]] = []
        var head = 0
        var finished = false
        var stopped = false
        var failure: (any Error)?
        var producer: Waiter?
        var queuedSamples = 0
        var deviceDelay: Duration?
        var delayMeasuredAt: ContinuousClock.Instant?
        /// An interruption waits for the device thread to flush the device.
        var flushWaiter: CheckedContinuation<Duration?, Never>?
        var flushRequested = false
    }
    private let state = LockedValue(State())
    private let available = DispatchSemaphore(value: 0)
    private let capacity: Int
    private let underrunCount = Atomic<Int>(0)

    /// A queue of at most `capacity` buffers.
    init(capacity: Int) { self.capacity = max(capacity, 1) }

    /// Task: queues samples, waiting while the queue is full; throws the device thread's failure.
    func put(_ samples: [Int16]) async throws {
        while true {
            let outcome: Result<Bool, any Error> = await withCheckedContinuation { (c: Waiter) in
                let r = state.withLock { s -> Result<Bool, any Error>? in
                    if let f = s.failure { return .failure(f) }
                    if s.stopped { return .failure(CancellationError()) }
                    if s.items.count - s.head < capacity {
                        s.items.append(samples)
                        s.queuedSamples += samples.count
                        return .success(true)
                    }
                    // Full: wait for the device thread to take one, then try again.
                    s.producer = c
                    return nil
                }
                if let r { c.resume(returning: r) }
            }
            switch outcome {
            case .success(true): available.signal(); return
            case .success(false): continue
            case .failure(let e): throw e
            }
        }
    }

    /// Task: no more samples; the device thread drains and ends.
    func finish() {
        state.withLock { $0.finished = true }
        available.signal()
    }

    /// Task: abandon what is queued (abort).
    func stop() {
        let (p, w) = state.withLock { s -> (Waiter?, CheckedContinuation<Duration?, Never>?) in
            s.stopped = true
            let p = s.producer; s.producer = nil
            let w = s.flushWaiter; s.flushWaiter = nil
            return (p, w)
        }
        p?.resume(returning: .success(false))
        w?.resume(returning: nil)
        available.signal()
    }

    /// Task: discards every queued buffer (an interruption), then has the device thread discard what
    /// the device holds. Returns the samples (interleaved) discarded here and the audio the device
    /// discarded (`nil`: unknown, or the device thread did not answer within `timeout`).
    func interrupt(timeout: Duration = .milliseconds(300)) async -> (queued: Int, device: Duration?) {
        let (discarded, producer) = state.withLock { s -> (Int, Waiter?) in
            let n = s.queuedSamples
            s.items = []
            s.head = 0
            s.queuedSamples = 0
            let p = s.producer; s.producer = nil
            return (n, p)
        }
        // A put waiting for room is answered as if taken: its audio belongs to what is cut.
        producer?.resume(returning: .success(true))
        let device: Duration? = await withTaskGroup(of: (answered: Bool, discarded: Duration?).self) { group in
            group.addTask {
                let d = await withCheckedContinuation { (c: CheckedContinuation<Duration?, Never>) in
                    let resumeNow = self.state.withLock { s -> Bool in
                        if s.stopped || s.finished || s.failure != nil { return true }
                        if let old = s.flushWaiter { old.resume(returning: nil) }
                        s.flushWaiter = c
                        s.flushRequested = true
                        return false
                    }
                    if resumeNow { c.resume(returning: nil) } else { self.available.signal() }
                }
                return (true, d)
            }
            group.addTask {
                try? await Task.sleep(for: timeout)
                return (false, nil)
            }
            let first = await group.next() ?? (false, nil)
            if !first.answered {
                // Timed out: the device thread answers later, to no one.
                let w = self.state.withLock { s -> CheckedContinuation<Duration?, Never>? in
                    let w = s.flushWaiter; s.flushWaiter = nil; s.flushRequested = false; return w
                }
                w?.resume(returning: nil)
            }
            group.cancelAll()
            return first.discarded
        }
        return (discarded, device)
    }

    /// Device thread: true when an interruption asks to flush the device (then call ``flushed(_:)``).
    func flushPending() -> Bool { state.withLock { $0.flushRequested } }

    /// Device thread: the device was flushed, `discarded` being what it dropped.
    func flushed(_ discarded: Duration?) {
        let w = state.withLock { s -> CheckedContinuation<Duration?, Never>? in
            let w = s.flushWaiter; s.flushWaiter = nil; s.flushRequested = false; return w
        }
        w?.resume(returning: discarded)
    }

    /// Device thread: the next buffer, or `nil` at the end (finished and empty) or when stopped; an
    /// empty buffer when an interruption asks to flush the device.
    func take() -> [Int16]? {
        while true {
            let (item, done, producer) = state.withLock { s -> ([Int16]?, Bool, Waiter?) in
                if s.stopped { return (nil, true, nil) }
                if s.flushRequested { return ([], false, nil) }
                if s.head < s.items.count {
                    let item = s.items[s.head]
                    s.queuedSamples -= item.count
                    s.head += 1
                    if s.head > 64 && s.head * 2 > s.items.count { s.items.removeFirst(s.head); s.head = 0 }
                    let p = s.producer; s.producer = nil
                    return (item, false, p)
                }
                return (nil, s.finished, nil)
            }
            producer?.resume(returning: .success(false))
            if let item { return item }
            if done { return nil }
            available.wait()
        }
    }

    /// Device thread: the device failed; the next ``put(_:)`` throws `error`.
    func fail(_ error: any Error) {
        let (p, w) = state.withLock { s -> (Waiter?, CheckedContinuation<Duration?, Never>?) in
            s.failure = error
            let p = s.producer; s.producer = nil
            let w = s.flushWaiter; s.flushWaiter = nil
            return (p, w)
        }
        p?.resume(returning: .success(false))
        w?.resume(returning: nil)
    }

    /// Device thread: the device's delay after a write.
    func reportDelay(_ delay: Duration?) {
        let now = ContinuousClock.now
        state.withLock { s in s.deviceDelay = delay; s.delayMeasuredAt = now }
    }

    /// Task: audio not yet played, in `format` — what waits here plus what the device has not played
    /// yet (its delay at the last write, less the time since); `nil` while the device reports none.
    func depth(format: AudioFormat) -> Duration? {
        let now = ContinuousClock.now
        return state.withLock { s -> Duration? in
            guard let delay = s.deviceDelay, let at = s.delayMeasuredAt else { return nil }
            let queued = Duration.nanoseconds(MediaTime.nanos(samples: Int64(s.queuedSamples / max(format.channels, 1)), rate: format.sampleRate))
            return queued + max(.zero, delay - (now - at))
        }
    }

    /// Device thread: records recovered underruns.
    func addUnderruns(_ n: Int) { if n > 0 { underrunCount.add(n, ordering: .relaxed) } }

    /// Task: underruns recorded so far.
    var underruns: Int { underrunCount.load(ordering: .relaxed) }
}
