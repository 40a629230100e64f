import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// The contract of ``CaptureBackend`` and ``PlaybackBackend`` (see their doc comments), checked
/// for every backend: ALSA and PulseAudio on the test daemon, and the in-memory backend.
@Suite("AudioBackendContract", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioBackendContractTests {
    /// A capture and a playback device on `backend`; `close` removes them.
    func devices(_ backend: AudioBackendKind) async throws -> (capture: String, playback: String, close: @Sendable () -> Void) {
        switch backend {
        case .pulse:
            let sink = try await PrivateSink.make()
            return (sink.monitor, sink.name, { sink.close() })
        case .alsa:
            let sink = try await PrivateSink.make()
            return ("pulse:DEVICE=\(sink.monitor)", "pulse:DEVICE=\(sink.name)", { sink.close() })
        case .memory:
            let name = "contract-\(UUID().uuidString)"
            MemoryAudio.addCapture(name + "-in", samples: AudioSignals.chirp(), format: AudioFormat(sampleRate: 16000, channels: 1), realtime: true)
            MemoryAudio.addPlayback(name + "-out")
            return (name + "-in", name + "-out", { MemoryAudio.remove(name + "-in"); MemoryAudio.remove(name + "-out") })
        }
    }

    func spec(_ backend: AudioBackendKind, _ device: String, channels: Int = 1) -> AudioStreamSpec {
        AudioStreamSpec(backend: backend, device: device, format: AudioFormat(sampleRate: 16000, channels: channels),
                        periodFrames: 320, latencyMs: 100, streamName: "contract")
    }

    @Test("capture: opens in the requested format (or says which), reads whole periods, closes", arguments: AudioBackendKind.allCases)
    func capture(backend: AudioBackendKind) async throws {
        let d = try await devices(backend)
        defer { d.close() }
        let spec = spec(backend, d.capture)
        let chunks = try await offPool { () -> [Int] in
            let b = try AudioBackends.openCapture(spec)
            defer { b.close() }
            var sizes: [Int] = []
            for _ in 0..<5 { if let c = try b.read(frames: 320) { sizes.append(c.samples.count / b.format.channels) } }
            return sizes
        }
        #expect(chunks == [320, 320, 320, 320, 320])
    }

    @Test("playback: writes, drains in bounded time, closes", arguments: AudioBackendKind.allCases)
    func playback(backend: AudioBackendKind) async throws {
        let d = try await devices(backend)
        defer { d.close() }
        let spec = spec(backend, d.playback)
        let chirp = AudioSignals.chirp(seconds: 0.3)
        let start = ContinuousClock.now
        try await offPool {
            let b = try AudioBackends.openPlayback(spec)
            defer { b.close() }
            var i = 0
            while i < chirp.count {
                _ = try b.write(Array(chirp[i..<min(i + 320, chirp.count)]))
                i += 320
            }
            try b.drain()
        }
        let elapsed = ContinuousClock.now - start
        #expect(elapsed < .seconds(3))
        if backend == .memory { #expect(MemoryAudio.played(d.playback) == chirp) }
    }

    @Test("a missing device throws device_not_found naming the backend", arguments: AudioBackendKind.allCases)
    func missing(backend: AudioBackendKind) async throws {
        if backend != .memory { try AudioTestEnv.requireDaemon() } else { MemoryAudio.install() }
        let spec = spec(backend, "vp_absent_device")
        let error = await #expect(throws: NodeError.self) {
            try await offPool { _ = try AudioBackends.openCapture(spec) }
        }
        #expect(error?.code == "device_not_found")
        #expect(error?.message.contains("\(backend) device 'vp_absent_device'") == true)
    }
}

/// `AudioDevices.list()` against the test daemon.
@Suite("AudioDevices", .enabled(if: AudioTestEnv.enabled))
struct AudioDevicesTests {
    @Test("lists the daemon's null sink and its monitor as defaults, and ALSA's default PCM")
    func listing() async throws {
        try AudioTestEnv.requireDaemon()
        let listing = try await offPool { AudioDevices.list() }
        #expect(listing.problems.isEmpty, "\(listing.problems)")
        let pulse = listing.devices.filter { $0.backend == "pulse" }
        #expect(pulse.contains { $0.name == "vp_null" && $0.kind == .playback && $0.isDefault })
        #expect(pulse.contains { $0.name == "vp_null.monitor" && $0.kind == .capture && $0.isDefault })
        let alsa = listing.devices.filter { $0.backend == "alsa" }
        #expect(alsa.contains { $0.name == "default" && $0.kind == .capture && $0.isDefault })
        #expect(alsa.contains { $0.name == "default" && $0.kind == .playback && $0.isDefault })
    }
}
