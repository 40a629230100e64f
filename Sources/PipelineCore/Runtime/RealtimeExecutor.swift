import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// The executor of latency-critical nodes (`executor: realtime`): a few dedicated threads, apart
/// from Swift's cooperative pool where bulk work (recognizers, encoders fed whole slices, uploads)
/// runs, so that a source's next frame or a sink's next write never waits behind a burst of bulk
/// work. The threads ask for real-time scheduling (see ``RealtimeScheduling``).
///
/// A node's task runs here when its graph node's executor class is `realtime`: the runtime adds
/// the node's child task with this executor as its preference, so the node's code — an actor's
/// included — and the resumption after its clock sleeps run on these threads. Structured
/// concurrency is unchanged: the task is still a child of the pipeline's task group.
public final class RealtimeExecutor: TaskExecutor, @unchecked Sendable {
    // @unchecked: the job list is only touched under `queue`'s lock; `threadNames` is written once
    // in init before any job can arrive.
    /// The process-wide instance, started at first use with ``sharedThreadCount`` threads.
    public static var shared: RealtimeExecutor { sharedInstance }
    private static let sharedInstance = RealtimeExecutor(threads: sharedThreads.load(ordering: .relaxed), name: "voicepipe-rt")
    private static let sharedThreads = Atomic<Int>(2)

    /// Threads of ``shared`` (1...64, default 2): a process-wide setting the application makes before
    /// its first real-time node runs; later changes do not resize a running executor. (The `voicepipe`
    /// command sets it from `VOICEPIPE_RT_THREADS`.)
    public static var sharedThreadCount: Int {
        get { sharedThreads.load(ordering: .relaxed) }
        set { sharedThreads.store(min(max(newValue, 1), 64), ordering: .relaxed) }
    }

    private struct Queue {
        var jobs: [UnownedJob] = []
        var head = 0
    }
    private let queue = LockedCondition(Queue())
    /// Names of the threads (for diagnostics and tests).
    public let threadNames: [String]

    init(threads: Int, name: String) {
        threadNames = (0..<max(1, threads)).map { "\(name)-\($0)" }
        for n in threadNames {
            let t = Thread { [unowned self] in
                RealtimeScheduling.applyToCurrentThread()
                self.loop()
            }
            t.name = n
            t.stackSize = 1 << 20
            t.start()
        }
    }

    public func enqueue(_ job: consuming ExecutorJob) {
        let unowned = UnownedJob(job)
        queue.withLock { q in
            q.jobs.append(unowned)
            return ((), wake: .one)
        }
    }

    /// Marks this executor's threads (a thread-specific value, set once per thread).
    private static let marker: pthread_key_t = {
        var key = pthread_key_t()
        pthread_key_create(&key, nil)
        return key
    }()

    /// True when the calling code runs on one of this executor's threads.
    public static var isCurrentThread: Bool { pthread_getspecific(marker) != nil }

    private func loop() {
        pthread_setspecific(Self.marker, UnsafeRawPointer(bitPattern: 1))
        while true {
            let job = queue.wait { q -> LockedCondition<Queue>.Step<UnownedJob> in
                guard q.head < q.jobs.count else { return .wait(until: nil) }
                let job = q.jobs[q.head]
                q.head += 1
                if q.head > 256, q.head * 2 > q.jobs.count {
                    q.jobs.removeFirst(q.head)
                    q.head = 0
                }
                return .done(job)
            }
            job.runSynchronously(on: asUnownedTaskExecutor())
        }
    }
}

/// Real-time scheduling (SCHED_FIFO) for device threads and the real-time executor, where the
/// system allows it (CAP_SYS_NICE, or an RLIMIT_RTPRIO above zero). Where it does not, threads
/// keep normal priority and ``status`` says why; the runtime says so once at start.
/// ``isEnabled`` turns the request off for the process (the `voicepipe` command: `VOICEPIPE_REALTIME=0`).
public enum RealtimeScheduling {
    /// Priority asked for (low in the real-time range: above every normal thread, below the
    /// system's own real-time threads).
    public static let priority: Int32 = 10

    private static let result = LockedValue<String?>(nil)
    private static let reported = Atomic<Bool>(false)
    private static let enabled = Atomic<Bool>(true)

    /// Whether threads ask for real-time scheduling (default true): a process-wide setting the
    /// application makes before its first device thread or real-time node starts.
    public static var isEnabled: Bool {
        get { enabled.load(ordering: .relaxed) }
        set { enabled.store(newValue, ordering: .relaxed) }
    }

    /// Asks real-time scheduling for the calling thread; returns whether it was granted.
    @discardableResult
    public static func applyToCurrentThread() -> Bool {
        if !isEnabled {
            result.withLock { if $0 == nil { $0 = "turned off (RealtimeScheduling.isEnabled = false; the voicepipe command: VOICEPIPE_REALTIME=0)" } }
            return false
        }
        #if canImport(Glibc)
        var param = sched_param()
        param.sched_priority = priority
        let rc = pthread_setschedparam(pthread_self(), Int32(SCHED_FIFO), &param)
        if rc == 0 {
            result.withLock { if $0 == nil { $0 = "granted" } }
            return true
        }
        let why = rc == EPERM ? "not permitted (needs CAP_SYS_NICE or an RLIMIT_RTPRIO of \(priority) or more, e.g. through rtkit or limits.conf)" : String(cString: strerror(rc))
        result.withLock { $0 = why }
        #else
        result.withLock { $0 = "not supported on this system" }
        #endif
        return false
    }

    /// "granted", or why real-time scheduling is not in use (`nil` before any thread asked).
    public static var status: String? { result.withLock { $0 } }

    /// Returns the status the first time it is called in the process, `nil` afterwards (so that it
    /// is said once).
    static func statusOnce() -> String? {
        guard !reported.exchange(true, ordering: .relaxed) else { return nil }
        _ = RealtimeExecutor.shared
        // Give the executor's threads a moment to ask.
        for _ in 0..<50 where status == nil { usleep(1000) }
        return status ?? "unknown"
    }
}
