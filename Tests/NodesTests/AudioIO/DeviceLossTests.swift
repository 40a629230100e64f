import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// A device that disappears mid-run: a null sink of the private PulseAudio daemon unloaded (its
/// monitor source goes with it) and loaded again under the same name, while `pulse-source` records
/// its monitor and `pulse-sink` plays into it.
@Suite("DeviceLoss", .enabled(if: AudioTestEnv.enabled), .serialized, .timeLimit(.minutes(2)))
struct DeviceLossTests {
    /// A named null sink that can be removed and brought back. A silent low-latency stream keeps it
    /// rendering in small steps (a fresh null sink otherwise renders its first 2 s in one block).
    final class VolatileSink: @unchecked Sendable {
        let name = "vp_lost_" + UUID().uuidString.prefix(6).lowercased()
        var module: String?
        var keepalive: Process?

        func load() throws {
            (module, keepalive) = try PrivateSink.load(name, channels: 1)
        }

        func unload() {
            if let k = keepalive {
                kill(k.processIdentifier, SIGKILL)
                k.waitUntilExit()
            }
            keepalive = nil
            if let module { _ = try? shell("pactl", ["unload-module", module]) }
            module = nil
        }
    }

    func graph(_ sink: VolatileSink, policy: String, out: String) -> String {
        """
        version: 1
        nodes:
          mic:  { type: pulse-source, device: "\(sink.name).monitor", rate: 16000, channels: 1, on_device_lost: \(policy) }
          out:  { type: wav-sink, path: "\(out)" }
          tone: { type: tone-source, frequency: 500, rate: 16000, realtime: true }
          spk:  { type: pulse-sink, device: "\(sink.name)", rate: 16000, channels: 1, on_device_lost: \(policy) }
        links:
          - mic -> out
          - tone -> spk
        """
    }

    @Test("wait: device_lost, the graph runs on, device_restored when the same device is back; the timeline skips the outage")
    func waitForTheSameDevice() async throws {
        try AudioTestEnv.requireDaemon()
        let sink = VolatileSink()
        try sink.load()
        defer { sink.unload() }
        try await Task.sleep(for: .milliseconds(300))
        let path = temporaryPath("lost-wait.wav")
        let pipeline = try Pipeline(yaml: graph(sink, policy: "wait", out: path), registry: BuiltinNodes.registry())
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(1200))
        sink.unload()
        try await Task.sleep(for: .milliseconds(1500))
        try sink.load()
        // A fresh null sink renders its first block of up to 2 s at once; then audio flows in 20 ms steps.
        try await Task.sleep(for: .milliseconds(5000))
        pipeline.stop()
        let events = try await run.value
        for node in ["mic", "spk"] {
            let lost = events.filter { $0.node == node && $0.name == "device_lost" }
            let restored = events.filter { $0.node == node && $0.name == "device_restored" }
            #expect(lost.count == 1, "\(node): \(events.map(\.name))")
            #expect(restored.count == 1, "\(node): \(events.map(\.name))")
            #expect(restored.first?["device"]?.stringValue?.hasPrefix(sink.name) == true)
            // Noticed within half a second, restored within half a second of the device's return.
            let outage = restored.first?["outage_ms"]?.intValue ?? 0
            #expect(outage >= 1000 && outage <= 2600, "\(node): outage \(outage) ms")
        }
        #expect(!events.contains { $0.name == "error" }, "\(events.filter { $0.name == "error" })")
        let stats = pipeline.nodeStats
        #expect((stats.first { $0.id == "spk" }?.counters["dropped_while_lost"] ?? 0) > 8000, "the sink took the audio meanwhile")
        // The recording goes on after the outage, its timeline including the time lost.
        let wav = try readWAV(path)
        // About 1.2 s before and at least 2 s after (the WAV holds what was captured; the gap shows in the frames' timestamps).
        #expect(wav.samples.count > 16000 * 3, "\(wav.samples.count) samples")
    }

    @Test("reopen: the default device at once")
    func reopenTheDefault() async throws {
        try AudioTestEnv.requireDaemon()
        let sink = VolatileSink()
        try sink.load()
        defer { sink.unload() }
        try await Task.sleep(for: .milliseconds(300))
        let pipeline = try Pipeline(yaml: graph(sink, policy: "reopen", out: temporaryPath("lost-reopen.wav")), registry: BuiltinNodes.registry())
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(1200))
        sink.unload()
        try await Task.sleep(for: .milliseconds(1500))
        pipeline.stop()
        let events = try await run.value
        for node in ["mic", "spk"] {
            let restored = events.filter { $0.node == node && $0.name == "device_restored" }
            #expect(restored.count == 1, "\(node): \(events.map(\.name))")
            #expect(restored.first?["device"]?.stringValue == "default")
            #expect((restored.first?["outage_ms"]?.intValue ?? 9999) < 1000)
        }
    }

    @Test("fail: the node ends with device_lost naming the device")
    func failEnds() async throws {
        try AudioTestEnv.requireDaemon()
        let sink = VolatileSink()
        try sink.load()
        defer { sink.unload() }
        try await Task.sleep(for: .milliseconds(300))
        let pipeline = try Pipeline(yaml: graph(sink, policy: "fail", out: temporaryPath("lost-fail.wav")), registry: BuiltinNodes.registry())
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(1200))
        sink.unload()
        let watchdog = Task { try await Task.sleep(for: .seconds(5)); pipeline.stop() }
        defer { watchdog.cancel() }
        do {
            _ = try await run.value
            Issue.record("the pipeline should fail")
        } catch {
            #expect("\(error)".contains("device_lost") || "\(error)".contains("lost"), "\(error)")
            #expect("\(error)".contains(sink.name), "\(error)")
        }
    }
}
