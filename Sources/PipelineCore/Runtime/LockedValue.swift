#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif

/// A value behind a mutex: the lock the runtime uses everywhere it guards state.
///
/// The API is `Synchronization.Mutex`'s (`withLock`, `withLockIfAvailable`), but the lock is a
/// `pthread_mutex_t`: ThreadSanitizer intercepts pthread mutexes, whereas `Mutex` on Linux is a futex
/// word it cannot see, so every access under a `Mutex` shows up as a data race and a real one would
/// drown among them. With this lock the runtime's tests run race-checked (scripts/sanitize.sh).
/// Never held across a suspension point: `body` is synchronous.
public final class LockedValue<Value: ~Copyable>: @unchecked Sendable {
    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private var value: Value

    public init(_ initialValue: consuming sending Value) {
        value = initialValue
        mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
        mutex.initialize(to: pthread_mutex_t())
        let rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed (\(rc))")
    }

    deinit {
        pthread_mutex_destroy(mutex)
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value.
    public func withLock<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E) -> sending Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }

    /// Runs `body` with exclusive access if the lock is free at once; nil if another thread holds it.
    public func withLockIfAvailable<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E) -> sending Result? {
        guard pthread_mutex_trylock(mutex) == 0 else { return nil }
        defer { pthread_mutex_unlock(mutex) }
        return try body(&value)
    }
}

/// A ``LockedValue`` that threads can also wait on: the runtime's one tool for a thread that blocks until
/// another changes the value (a worker waiting for jobs, the timer thread waiting for its next deadline).
///
/// A pthread mutex and condition variable (ThreadSanitizer sees both), used only through two calls:
/// ``withLock(_:)`` changes the value and says whom to wake; ``wait(_:)`` runs a step under the lock until
/// the step says it is done, waiting (the lock released) between steps until woken or its deadline.
public final class LockedCondition<Value: ~Copyable>: @unchecked Sendable {
    /// Whom a change wakes.
    public enum Wake: Sendable { case none, one, all }

    /// What a waiting step decided.
    public enum Step<Result> {
        /// Done: the result, returned by ``wait(_:)``.
        case done(Result)
        /// Not yet: wait for a wake-up, or until the deadline (nil: no deadline), then step again.
        case wait(until: ContinuousClock.Instant?)
    }

    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private var value: Value

    public init(_ initialValue: consuming sending Value) {
        value = initialValue
        mutex.initialize(to: pthread_mutex_t())
        condition.initialize(to: pthread_cond_t())
        var rc = pthread_mutex_init(mutex, nil)
        precondition(rc == 0, "pthread_mutex_init failed (\(rc))")
        // Deadlines are on the monotonic clock, as ContinuousClock's instants are.
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        rc = pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        precondition(rc == 0, "pthread_cond_init failed (\(rc))")
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Runs `body` with exclusive access to the value; then wakes one waiter, all, or none, as `body` says.
    public func withLock<Result>(_ body: (inout Value) -> (Result, wake: Wake)) -> Result {
        pthread_mutex_lock(mutex)
        let (result, wake) = body(&value)
        switch wake {
        case .none: break
        case .one: pthread_cond_signal(condition)
        case .all: pthread_cond_broadcast(condition)
        }
        pthread_mutex_unlock(mutex)
        return result
    }

    /// Runs `step` under the lock until it is done, waiting between steps (the lock released) until another
    /// thread wakes this one or the step's deadline passes. Spurious wake-ups only cost another step.
    public func wait<Result>(_ step: (inout Value) -> Step<Result>) -> Result {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        while true {
            switch step(&value) {
            case .done(let result):
                return result
            case .wait(until: nil):
                pthread_cond_wait(condition, mutex)
            case .wait(until: let deadline?):
                let left = ContinuousClock.now.duration(to: deadline)
                guard left > .zero else { continue }
                var now = timespec()
                clock_gettime(CLOCK_MONOTONIC, &now)
                let (seconds, attoseconds) = left.components
                var nanos = Int(now.tv_nsec) + Int(attoseconds / 1_000_000_000)
                var whole = Int(now.tv_sec) + Int(seconds) + nanos / 1_000_000_000
                nanos %= 1_000_000_000
                if whole < 0 { whole = 0 }
                var until = timespec(tv_sec: whole, tv_nsec: nanos)
                _ = pthread_cond_timedwait(condition, mutex, &until)
            }
        }
    }
}
