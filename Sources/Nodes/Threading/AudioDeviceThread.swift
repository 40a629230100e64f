import Foundation
import PipelineCore
import Synchronization

/// Starts a dedicated thread for device I/O (blocking ALSA/PulseAudio calls never run on the
/// cooperative pool), at real-time priority where the system allows it.
enum AudioDeviceThread {
    static func start(name: String, _ body: @escaping @Sendable () -> Void) {
        let t = Thread {
            RealtimeScheduling.applyToCurrentThread()
            body()
        }
        t.name = name
        t.stackSize = 512 * 1024
        t.start()
    }
}

/// A result handed once from a device thread to the node's task (the device opened, playback
/// drained), with a deadline: a device that does not answer in time is reported as an error
/// instead of a hang.
final class DeviceOneShot<Value: Sendable>: Sendable {
    private struct State {
        var result: Result<Value, any Error>?
        var waiter: CheckedContinuation<Value, any Error>?
        var abandoned = false
    }
    private let state = Mutex(State())

    /// Called by the device thread. Returns false when the node already gave up (then the
    /// device thread must close the device and return).
    @discardableResult
    func resolve(_ result: Result<Value, any Error>) -> Bool {
        let (waiter, abandoned) = state.withLock { s -> (CheckedContinuation<Value, any Error>?, Bool) in
            if s.abandoned { return (nil, true) }
            s.result = result
            let w = s.waiter; s.waiter = nil
            return (w, false)
        }
        waiter?.resume(with: result)
        return !abandoned
    }

    /// Waits for the device thread's result, at most `timeout`; `onTimeout` makes the error.
    func wait(timeout: Duration, onTimeout: @escaping @Sendable () -> any Error) async throws -> Value {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (c: CheckedContinuation<Value, any Error>) in
                let ready = state.withLock { s -> Result<Value, any Error>? in
                    if let r = s.result { return r }
                    if s.abandoned { return .failure(CancellationError()) }
                    s.waiter = c
                    return nil
                }
                if let ready { c.resume(with: ready); return }
                let ms = Int(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
                DispatchQueue.global().asyncAfter(deadline: .now() + .milliseconds(ms)) { [self] in
                    self.abandon(with: onTimeout())
                }
            }
        } onCancel: {
            abandon(with: CancellationError())
        }
    }

    private func abandon(with error: any Error) {
        let w = state.withLock { s -> CheckedContinuation<Value, any Error>? in
            guard s.result == nil, !s.abandoned else { return nil }
            s.abandoned = true
            let w = s.waiter; s.waiter = nil
            return w
        }
        w?.resume(throwing: error)
    }
}
