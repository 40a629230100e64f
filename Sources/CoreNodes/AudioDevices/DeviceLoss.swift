import Foundation
import PipelineCore
import Synchronization

/// What a device node does when its device disappears mid-stream (`on_device_lost`).
public enum DeviceLossPolicy: String, Sendable, Decodable, CaseIterable {
    /// End the node with a `device_lost` error (the graph fails as with any node error).
    case fail
    /// Open the backend's default device instead, at once and then every retry interval.
    case reopen
    /// Wait for the same device to come back and reopen it.
    case wait
}

/// Notices a device that went away while its stream is open.
///
/// ALSA hardware reports an unplugged device on the next read or write (`-ENODEV`). PulseAudio does
/// not: when a sink or source is removed, the server moves its streams to another device and the
/// client's `pa_simple` calls go on as if nothing happened. For a named PulseAudio device the watch
/// therefore asks the server every `interval` whether the device still exists (one short
/// introspection connection, ~1 ms).
struct DevicePresence {
    let spec: AudioStreamSpec
    let kind: AudioDeviceInfo.Kind
    let interval: Duration
    private var next: ContinuousClock.Instant

    init(_ spec: AudioStreamSpec, kind: AudioDeviceInfo.Kind, interval: Duration = .milliseconds(500)) {
        self.spec = spec
        self.kind = kind
        self.interval = interval
        next = .now + interval
    }

    /// Whether the backend needs asking: PulseAudio and a device other than the server's default.
    var watches: Bool { spec.backend == .pulse && spec.device != "default" && !spec.device.isEmpty }

    /// Checks when due; throws `device_lost` when the device is gone. An unreachable server is left to
    /// the stream's own next read or write to report.
    mutating func check() throws {
        guard watches, ContinuousClock.now >= next else { return }
        next = .now + interval
        guard let devices = try? PulseDeviceList.list(timeout: .milliseconds(500)) else { return }
        if !devices.contains(where: { $0.name == spec.device && $0.kind == kind }) {
            throw NodeError(.deviceLost, "\(spec.label) was removed from the server")
        }
    }
}

/// Reopening after a loss, on the device thread.
enum DeviceReopen {
    /// Time between attempts.
    static let retryInterval = Duration.milliseconds(250)

    /// The spec to try under `policy`: the default device for `reopen`, the same one for `wait`.
    static func target(_ spec: AudioStreamSpec, policy: DeviceLossPolicy) -> AudioStreamSpec {
        var s = spec
        if policy == .reopen { s.device = "default" }
        return s
    }

    /// Tries `open` every ``retryInterval`` until it succeeds or `stopped()` says to give up (nil).
    static func loop<B>(_ spec: AudioStreamSpec, policy: DeviceLossPolicy, stopped: () -> Bool, open: (AudioStreamSpec) throws -> B) -> (B, AudioStreamSpec)? {
        let target = target(spec, policy: policy)
        var first = policy == .reopen
        while !stopped() {
            if !first { Thread.sleep(forTimeInterval: Double(retryInterval.components.attoseconds) / 1e18) }
            first = false
            if stopped() { return nil }
            if let b = try? open(target) { return (b, target) }
        }
        return nil
    }

    /// The message of a loss, whatever the backend threw.
    static func message(_ error: any Error) -> String {
        (error as? NodeError)?.message ?? "\(error)"
    }
}

/// Device-loss news from a playback thread to its node (which emits the events).
final class DeviceLossLog: Sendable {
    enum Entry: Sendable {
        case lost(message: String, at: ContinuousClock.Instant)
        case restored(device: String, at: ContinuousClock.Instant)
    }
    private let entries = LockedValue<[Entry]>([])
    private let droppedFrames = Atomic<Int>(0)

    func append(_ e: Entry) { entries.withLock { $0.append(e) } }
    /// Takes what happened since the last call.
    func drain() -> [Entry] { entries.withLock { e in defer { e = [] }; return e } }
    func addDropped(_ frames: Int) { droppedFrames.add(frames, ordering: .relaxed) }
    var dropped: Int { droppedFrames.load(ordering: .relaxed) }
}
