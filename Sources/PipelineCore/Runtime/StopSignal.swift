import Synchronization

/// A one-shot signal that many tasks can await: `fire()` for a graceful stop, `abort()` to cancel all.
final class StopSignal: Sendable {
    private struct State {
        var fired = false
        var aborted = false
        var next: UInt64 = 0
        var waiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var abortWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    }
    private let state = LockedValue(State())

    var aborted: Bool { state.withLock { $0.aborted } }

    func fire() {
        let w = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            if s.fired { return [] }
            s.fired = true
            let w = Array(s.waiters.values); s.waiters = [:]; return w
        }
        w.forEach { $0.resume() }
    }

    func abort() {
        fire()
        let w = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            if s.aborted { return [] }
            s.aborted = true
            let w = Array(s.abortWaiters.values); s.abortWaiters = [:]; return w
        }
        w.forEach { $0.resume() }
    }

    /// Returns when the signal fires (or the waiting task is cancelled).
    func wait() async { await wait(abort: false) }
    /// Returns on abort (or when the waiting task is cancelled).
    func waitAbort() async { await wait(abort: true) }

    private func wait(abort: Bool) async {
        let id = state.withLock { s -> UInt64 in s.next += 1; return s.next }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let now = state.withLock { s -> Bool in
                    if abort ? s.aborted : s.fired { return true }
                    if Task.isCancelled { return true }
                    if abort { s.abortWaiters[id] = c } else { s.waiters[id] = c }
                    return false
                }
                if now { c.resume() }
            }
        } onCancel: {
            let w = state.withLock { s -> CheckedContinuation<Void, Never>? in
                abort ? s.abortWaiters.removeValue(forKey: id) : s.waiters.removeValue(forKey: id)
            }
            w?.resume()
        }
    }
}
