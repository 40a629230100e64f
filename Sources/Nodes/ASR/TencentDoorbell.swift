import Synchronization

/// Wakes one waiting task when something changed (audio queued, input ended, a connection
/// accepted). A ring with nobody waiting is remembered until the next wait. Cancellation ends
/// a wait at once.
///
/// Safe to share across tasks: all state is behind a `Mutex`.
final class TencentDoorbell: Sendable {
    private struct State {
        var rung = false
        var waiter: CheckedContinuation<Void, Never>?
        var waiterID: UInt64 = 0
    }
    private let state = Mutex(State())

    init() {}

    /// Wakes the waiter (or the next one to wait).
    func ring() {
        let c = state.withLock { s -> CheckedContinuation<Void, Never>? in
            if let w = s.waiter { s.waiter = nil; return w }
            s.rung = true
            return nil
        }
        c?.resume()
    }

    /// Waits for a ring (returns at once if one came since the last wait, or on cancellation).
    func wait() async {
        let id = state.withLock { s -> UInt64 in s.waiterID &+= 1; return s.waiterID }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let resumeNow = state.withLock { s -> Bool in
                    if s.rung || Task.isCancelled { s.rung = false; return true }
                    s.waiter = c
                    return false
                }
                if resumeNow { c.resume() }
            }
        } onCancel: {
            let c = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard s.waiterID == id, let w = s.waiter else { return nil }
                s.waiter = nil
                return w
            }
            c?.resume()
        }
    }
}
