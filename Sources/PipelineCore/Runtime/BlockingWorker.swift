import Foundation

/// Runs blocking calls (device reads, decoder calls) on a dedicated thread, never on Swift's
/// cooperative pool, and lets async code await their results.
///
/// One worker owns one thread; jobs run in submission order. ``shutdown()`` ends the thread after
/// the queued jobs.
///
/// ```swift
/// let worker = BlockingWorker(name: "alsa-capture")
/// let n = try await worker.run { snd_pcm_readi(pcm, buf, frames) }
/// ```
public final class BlockingWorker: Sendable {
    private let queue = JobQueue()
    /// Thread name.
    public let name: String

    /// Starts the thread.
    public init(name: String) {
        self.name = name
        let queue = self.queue
        let thread = Thread {
            while let job = queue.take() { job() }
        }
        thread.name = name
        thread.start()
    }

    /// Runs `body` on the worker thread and returns its result.
    public func run<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { (cont: CheckedContinuation<T, any Error>) in
            let accepted = queue.put { cont.resume(with: Result { try body() }) }
            if !accepted {
                cont.resume(throwing: NodeError(.workerClosed, "worker thread \(name) has shut down"))
            }
        }
    }

    /// Lets the thread end after the queued jobs.
    public func shutdown() { queue.close() }

    deinit { queue.close() }
}

/// The worker's job queue: its jobs and whether it is closed, under a ``LockedCondition`` the worker
/// thread waits on.
private final class JobQueue: Sendable {
    private struct State {
        var jobs: [@Sendable () -> Void] = []
        var head = 0
        var closed = false
    }
    private let state = LockedCondition(State())

    func put(_ job: @escaping @Sendable () -> Void) -> Bool {
        state.withLock { s in
            if s.closed { return (false, wake: .none) }
            s.jobs.append(job)
            return (true, wake: .one)
        }
    }

    func take() -> (@Sendable () -> Void)? {
        state.wait { s -> LockedCondition<State>.Step<(@Sendable () -> Void)?> in
            if s.head == s.jobs.count { return s.closed ? .done(nil) : .wait(until: nil) }
            let job = s.jobs[s.head]
            s.head += 1
            if s.head > 64 && s.head * 2 > s.jobs.count { s.jobs.removeFirst(s.head); s.head = 0 }
            return .done(job)
        }
    }

    func close() {
        state.withLock { s in
            s.closed = true
            return ((), wake: .all)
        }
    }
}
