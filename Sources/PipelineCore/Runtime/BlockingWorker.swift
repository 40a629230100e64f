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

/// The worker's job queue.
///
/// `@unchecked Sendable` is safe here: every access to `jobs` and `closed` happens while holding
/// `condition`, which is also what the worker thread waits on.
private final class JobQueue: @unchecked Sendable {
    private let condition = NSCondition()
    private var jobs: [@Sendable () -> Void] = []
    private var head = 0
    private var closed = false

    func put(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock(); defer { condition.unlock() }
        if closed { return false }
        jobs.append(job)
        condition.signal()
        return true
    }

    func take() -> (@Sendable () -> Void)? {
        condition.lock(); defer { condition.unlock() }
        while head == jobs.count && !closed { condition.wait() }
        if head == jobs.count { return nil }
        let job = jobs[head]
        head += 1
        if head > 64 && head * 2 > jobs.count { jobs.removeFirst(head); head = 0 }
        return job
    }

    func close() {
        condition.lock(); closed = true; condition.broadcast(); condition.unlock()
    }
}
