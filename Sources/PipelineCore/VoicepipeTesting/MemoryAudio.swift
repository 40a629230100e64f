import Foundation
import PipelineCore
import Synchronization

/// In-memory capture and playback devices, for tests: a capture device plays back samples it was
/// given (paced at 1x real time unless told otherwise), a playback device collects what it is sent.
///
/// ```swift
/// MemoryAudio.addCapture("mic-1", samples: chirp, format: AudioFormat(sampleRate: 16000, channels: 1))
/// // ... run a graph whose source uses backend .memory and device "mic-1" ...
/// let played = MemoryAudio.played("spk-1")
/// ```
public enum MemoryAudio {
    struct CaptureMaterial: Sendable {
        var samples: [Int16]
        var format: AudioFormat
        var realtime: Bool
    }
    struct Store: Sendable {
        var captures: [String: CaptureMaterial] = [:]
        var playbacks: [String: [Int16]] = [:]
        var busy: Set<String> = []
    }
    static let store: LockedValue<Store> = {
        AudioBackendRegistry.install(.memory, capture: { try MemoryAudio.openCapture($0) }, playback: { try MemoryAudio.openPlayback($0) })
        return LockedValue(Store())
    }()

    /// Installs the in-memory backend (`AudioBackendKind.memory`) in this process. Declaring a
    /// device does it too; call it before opening a device that was never declared.
    public static func install() { store.withLock { _ in } }

    /// Declares a capture device `name` that delivers `samples` (then ends).
    public static func addCapture(_ name: String, samples: [Int16], format: AudioFormat, realtime: Bool = true) {
        store.withLock { $0.captures[name] = CaptureMaterial(samples: samples, format: format, realtime: realtime) }
    }

    /// Declares a playback device `name`.
    public static func addPlayback(_ name: String) {
        store.withLock { $0.playbacks[name] = [] }
    }

    /// What the playback device `name` was sent so far.
    public static func played(_ name: String) -> [Int16] {
        store.withLock { $0.playbacks[name] ?? [] }
    }

    /// Forgets device `name`.
    public static func remove(_ name: String) {
        store.withLock { $0.captures[name] = nil; $0.playbacks[name] = nil; $0.busy.remove(name) }
    }

    static func claim(_ spec: AudioStreamSpec, exists: (Store) -> Bool) throws {
        try store.withLock { s in
            guard exists(s) else { throw NodeError(.deviceNotFound, "\(spec.label) does not exist") }
            guard !s.busy.contains(spec.device) else { throw NodeError(.deviceBusy, "\(spec.label) is busy (already open)") }
            s.busy.insert(spec.device)
        }
    }

    static func release(_ name: String) { _ = store.withLock { $0.busy.remove(name) } }

    static func openCapture(_ spec: AudioStreamSpec) throws -> any CaptureBackend {
        try claim(spec) { $0.captures[spec.device] != nil }
        let material = store.withLock { $0.captures[spec.device]! }
        return MemoryCapture(device: spec.device, material: material)
    }

    static func openPlayback(_ spec: AudioStreamSpec) throws -> any PlaybackBackend {
        try claim(spec) { $0.playbacks[spec.device] != nil }
        return MemoryPlayback(device: spec.device, format: spec.format)
    }
}

/// Capture from samples in memory.
final class MemoryCapture: CaptureBackend {
    let device: String
    let material: MemoryAudio.CaptureMaterial
    var position = 0
    let start = ContinuousClock.now

    init(device: String, material: MemoryAudio.CaptureMaterial) {
        self.device = device
        self.material = material
    }

    var format: AudioFormat { material.format }

    func read(frames: Int) throws -> CaptureChunk? {
        let ch = material.format.channels
        guard position < material.samples.count else { return nil }
        let end = min(material.samples.count, position + frames * ch)
        let chunk = Array(material.samples[position..<end])
        position = end
        if material.realtime {
            let due = start + .nanoseconds(MediaTime.nanos(samples: Int64(position / ch), rate: material.format.sampleRate))
            let wait = ContinuousClock.now.duration(to: due)
            if wait > .zero { Thread.sleep(forTimeInterval: Double(wait.components.attoseconds) / 1e18 + Double(wait.components.seconds)) }
        }
        return CaptureChunk(samples: chunk)
    }

    func close() { MemoryAudio.release(device) }
}

/// Playback into memory.
final class MemoryPlayback: PlaybackBackend {
    let device: String
    let format: AudioFormat

    init(device: String, format: AudioFormat) {
        self.device = device
        self.format = format
    }

    func write(_ samples: [Int16]) throws -> Int {
        MemoryAudio.store.withLock { $0.playbacks[device, default: []].append(contentsOf: samples) }
        return 0
    }

    func drain() throws {}

    func close() { MemoryAudio.release(device) }
}
