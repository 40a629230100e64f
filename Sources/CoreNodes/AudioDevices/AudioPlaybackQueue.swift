import PipelineCore
import Synchronization

/// A bounded queue from a playback node's task to its device thread: a ``PlaybackQueueStateMachine``
/// under a lock, and the waking it asks for, done after the lock is released.
///
/// The task suspends (without blocking a thread) while the queue is full, which back-pressures
/// the graph; the device thread waits on the machine's ``LockedCondition`` while it is empty, woken by
/// the changes that give it something to do.
final class AudioPlaybackQueue: Sendable {
    typealias Producer = CheckedContinuation<Result<PlaybackProducerResume, any Error>, Never>
    typealias FlushWaiter = CheckedContinuation<Duration?, Never>
    private typealias Machine = PlaybackQueueStateMachine<Producer, FlushWaiter>
    private let state: LockedCondition<Machine>
    private let underrunCount = Atomic<Int>(0)

    /// A queue of at most `capacity` buffers.
    init(capacity: Int) { state = LockedCondition(Machine(capacity: capacity)) }

    /// Changes the machine; `wake`: the change may give the device thread something to do.
    private func locked<R>(wake: Bool = false, _ body: (inout Machine) -> R) -> R {
        state.withLock { (body(&$0), wake: wake ? .one : .none) }
    }

    /// Task: queues samples, waiting while the queue is full; throws the device thread's failure.
    func put(_ samples: [Int16]) async throws {
        while true {
            let resume = await withCheckedContinuation { (c: Producer) in
                switch locked(wake: true, { $0.put(samples, producer: c) }) {
                case .queued: c.resume(returning: .success(.taken))
                case .wait: break
                case .failed(let e): c.resume(returning: .failure(e))
                case .stopped: c.resume(returning: .failure(CancellationError()))
                }
            }
            switch try resume.get() {
            case .taken:
                return
            case .retry:
                continue
            }
        }
    }

    /// Task: no more samples; the device thread drains and ends.
    func finish() {
        locked(wake: true) { $0.finish() }
    }

    /// Task: abandon what is queued (abort).
    func stop() {
        let (p, w) = locked(wake: true) { $0.stop() }
        p?.resume(returning: .success(.retry))
        w?.resume(returning: nil)
    }

    /// Task: discards every queued buffer (an interruption), then has the device thread discard what
    /// the device holds. Returns the samples (interleaved) discarded here and the audio the device
    /// discarded (`nil`: unknown, or the device thread did not answer within `timeout`).
    func interrupt(timeout: Duration = .milliseconds(300)) async -> (queued: Int, device: Duration?) {
        let (discarded, producer) = locked { $0.interrupt() }
        // A put waiting for room is answered as if taken: its audio belongs to what is cut.
        producer?.resume(returning: .success(.taken))
        let device: Duration? = await withTaskGroup(of: (answered: Bool, discarded: Duration?).self) { group in
            group.addTask {
                let d = await withCheckedContinuation { (c: FlushWaiter) in
                    switch self.locked(wake: true, { $0.requestFlush(c) }) {
                    case .answerNow:
                        c.resume(returning: nil)
                    case .requested(let previous):
                        previous?.resume(returning: nil)
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
                self.locked { $0.flushTimedOut() }?.resume(returning: nil)
            }
            group.cancelAll()
            return first.discarded
        }
        return (discarded, device)
    }

    /// Device thread: true when an interruption asks to flush the device (then call ``flushed(_:)``).
    func flushPending() -> Bool { locked { $0.flushRequested } }

    /// Device thread: the device was flushed, `discarded` being what it dropped.
    func flushed(_ discarded: Duration?) {
        locked { $0.flushed() }?.resume(returning: discarded)
    }

    /// Device thread: the next buffer, or `nil` at the end (finished and empty) or when stopped; an
    /// empty buffer when an interruption asks to flush the device.
    func take() -> [Int16]? {
        let taken = state.wait { m -> LockedCondition<Machine>.Step<Machine.TakeOutcome> in
            let outcome = m.take()
            if case .empty = outcome { return .wait(until: nil) }
            return .done(outcome)
        }
        switch taken {
        case .buffer(let item, let producer):
            producer?.resume(returning: .success(.retry))
            return item
        case .flush: return []
        case .end, .empty: return nil
        }
    }

    /// Device thread: the device failed; the next ``put(_:)`` throws `error`.
    func fail(_ error: any Error) {
        let (p, w) = locked { $0.fail(error) }
        p?.resume(returning: .success(.retry))
        w?.resume(returning: nil)
    }

    /// Device thread: the device's delay after a write.
    func reportDelay(_ delay: Duration?) {
        let now = ContinuousClock.now
        locked { $0.reportDelay(delay, at: now) }
    }

    /// Task: audio not yet played, in `format` — what waits here plus what the device has not played
    /// yet (its delay at the last write, less the time since); `nil` while the device reports none.
    func depth(format: AudioFormat) -> Duration? {
        let now = ContinuousClock.now
        return locked { $0.unplayed(format: format, at: now) }
    }

    /// Device thread: records recovered underruns.
    func addUnderruns(_ n: Int) { if n > 0 { underrunCount.add(n, ordering: .relaxed) } }

    /// Task: underruns recorded so far.
    var underruns: Int { underrunCount.load(ordering: .relaxed) }
}
