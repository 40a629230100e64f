import Foundation
import PipelineCore

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
    private enum Outcome: Sendable { case result(Result<Value, any Error>), timedOut, cancelled }
    /// A ``Handoff`` of one result; the node's giving up is the consumer finishing.
    private let slot = Handoff<Result<Value, any Error>>(capacity: 1, overflow: .dropNewest)

    /// Called by the device thread. Returns false when the node already gave up (then the
    /// device thread must close the device and return).
    @discardableResult
    func resolve(_ result: Result<Value, any Error>) -> Bool {
        slot.trySend(result) == .accepted
    }

    /// Waits for the device thread's result, at most `timeout`; `onTimeout` makes the error.
    func wait(timeout: Duration, onTimeout: @escaping @Sendable () -> any Error) async throws -> Value {
        let outcome: Outcome = await withTaskGroup(of: Outcome.self) { group in
            group.addTask { await self.slot.receive().map { .result($0.element) } ?? .cancelled }
            group.addTask {
                do { try await Task.sleep(for: timeout); return .timedOut } catch { return .cancelled }
            }
            var first = await group.next() ?? .cancelled
            group.cancelAll()
            // A result that arrived as the deadline passed wins over the deadline.
            while let rest = await group.next() { if case .result = rest { first = rest } }
            return first
        }
        switch outcome {
        case .result(let r):
            return try r.get()
        case .timedOut, .cancelled:
            // Giving up: a result that comes later is refused, and its device thread closes the device.
            if let late = slot.tryReceive(), let r = late { slot.consumerFinished(); return try r.element.get() }
            slot.consumerFinished()
            if case .timedOut = outcome { throw onTimeout() }
            throw CancellationError()
        }
    }
}
