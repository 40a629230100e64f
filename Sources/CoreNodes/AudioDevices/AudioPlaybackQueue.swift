import Dispatch
import PipelineCore
import Synchronization

/// A bounded queue from a playback node's task to its device thread: a ``PlaybackQueueStateMachine``
/// under a lock, and the waking it asks for, done after the lock is released.
///
/// The task suspends (without blocking a thread) while the queue is full, which back-pressures
/// the graph; the device thread blocks on a semaphore while it is empty.
final class AudioPlaybackQueue: Sendable {
    typealias Producer = CheckedContinuation<Result<PlaybackProducerResume, any Error>, Never>
    typealias FlushWaiter = CheckedContinuation<Duration?, Never>
    private typealias Machine = PlaybackQueueStateMachine<Producer, FlushWaiter>
    private let state: LockedValue<Machine>
    private let available = DispatchSemaphore(value: 0)
    private let underrunCount = Atomic<Int>(0)

    /// A queue of at most `capacity` buffers.
    init(capacity: Int) { state = LockedValue(Machine(capacity: capacity)) }

    /// Task: queues samples, waiting while the queue is full; throws the device thread's failure.
    func put(_ samples: [Int16]) async throws {
        while true {
            let resume = await withCheckedContinuation { (c: Producer) in
                switch state.withLock({ $0.put(samples, producer: c) }) {
                case .queued: c.resume(returning: .success(.taken))
                case .wait: break
                case .failed(let e): c.resume(returning: .failure(e))
                case .stopped: c.resume(returning: .failure(CancellationError()))
                }
            }
            switch try resume.get() {
            case .taken:
                available.signal()
                return
            case .retry:
                continue
            }
        }
    }

    /// Task: no more samples; the device thread drains and ends.
    func finish() {
        state.withLock { $0.finish() }
        available.signal()
    }

    /// Task: abandon what is queued (abort).
    func stop() {
        let (p, w) = state.withLock { $0.stop() }
        p?.resume(returning: .success(.retry))
        w?.resume(returning: nil)
        available.signal()
    }

    /// Task: discards every queued buffer (an interruption), then has the device thread discard what
    /// the device holds. Returns the samples (interleaved) discarded here and the audio the device
    /// discarded (`nil`: unknown, or the device thread did not answer within `timeout`).
    func interrupt(timeout: Duration = .milliseconds(300)) async -> (queued: Int, device: Duration?) {
        let (discarded, producer) = state.withLock { $0.interrupt() }
        // A put waiting for room is answered as if taken: its audio belongs to what is cut.
        producer?.resume(returning: .success(.taken))
        let device: Duration? = await withTaskGroup(of: (answered: Bool, discarded: Duration?).self) { group in
            group.addTask {
                let d = await withCheckedContinuation { (c: FlushWaiter) in
                    switch self.state.withLock({ $0.requestFlush(c) }) {
                    case .answerNow:
                        c.resume(returning: nil)
                    case .requested(let previous):
                        previous?.resume(returning: nil)
                        self.available.signal()
                    }
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
                self.state.withLock { $0.flushTimedOut() }?.resume(returning: nil)
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
        state.withLock { $0.flushed() }?.resume(returning: discarded)
    }

    /// Device thread: the next buffer, or `nil` at the end (finished and empty) or when stopped; an
    /// empty buffer when an interruption asks to flush the device.
    func take() -> [Int16]? {
        while true {
            switch state.withLock({ $0.take() }) {
            case .buffer(let item, let producer):
                producer?.resume(returning: .success(.retry))
                return item
            case .flush: return []
            case .end: return nil
            case .empty: available.wait()
            }
        }
    }

    /// Device thread: the device failed; the next ``put(_:)`` throws `error`.
    func fail(_ error: any Error) {
        let (p, w) = state.withLock { $0.fail(error) }
        p?.resume(returning: .success(.retry))
        w?.resume(returning: nil)
    }

    /// Device thread: the device's delay after a write.
    func reportDelay(_ delay: Duration?) {
        let now = ContinuousClock.now
        state.withLock { $0.reportDelay(delay, at: now) }
    }

    /// Task: audio not yet played, in `format` — what waits here plus what the device has not played
    /// yet (its delay at the last write, less the time since); `nil` while the device reports none.
    func depth(format: AudioFormat) -> Duration? {
        let now = ContinuousClock.now
        return state.withLock { $0.unplayed(format: format, at: now) }
    }

    /// Device thread: records recovered underruns.
    func addUnderruns(_ n: Int) { if n > 0 { underrunCount.add(n, ordering: .relaxed) } }

    /// Task: underruns recorded so far.
    var underruns: Int { underrunCount.load(ordering: .relaxed) }
}
