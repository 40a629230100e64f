import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// Capture through the real PulseAudio daemon (directly, and through ALSA's pulse plugin):
/// a chirp played on a null sink must come back from its monitor, recognizably.
@Suite("AudioCapture", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioCaptureTests {
    /// The bound leaves room for the server's resampling (16 kHz → 48 kHz stereo → 16 kHz); each
    /// test also checks that an unrelated (falling) chirp stays below 0.5, so the check can fail.
    static let matchBound = 0.9

    /// Plays a chirp on a private sink while `type` records its monitor; returns the recording.
    func captureChirp(type: String, device: (PrivateSink) -> String, rate: Int = 16000) async throws -> (chirp: [Int16], captured: [Int16], events: [Event]) {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let path = temporaryPath("capture.wav")
        let pipeline = try Pipeline(yaml: captureGraph(type: type, device: device(sink), path: path, rate: rate), registry: BuiltinNodes.registry())
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(400))
        let chirp = AudioSignals.chirp(rate: 16000)
        try await pacatPlay(chirp, rate: 16000, device: sink.name)
        try await Task.sleep(for: .milliseconds(300))
        pipeline.stop()
        let events = try await run.value
        let wav = try readWAV(path)
        #expect(wav.format == AudioFormat(sampleRate: rate, channels: 1))
        return (chirp, wav.samples, events)
    }

    @Test("pulse-source records exactly what is played on the sink")
    func pulseSourceCapturesChirp() async throws {
        let r = try await captureChirp(type: "pulse-source", device: { $0.monitor })
        #expect(r.captured.count > r.chirp.count)
        let m = AudioMatch.locate(r.chirp, in: r.captured)
        #expect(m.coefficient > Self.matchBound, "correlation \(m.coefficient) at lag \(m.lag)")
        // The check can fail: a falling chirp is not in the recording.
        let other = AudioMatch.locate(AudioSignals.chirp(from: 3400, to: 300), in: r.captured)
        #expect(other.coefficient < 0.5, "unrelated chirp correlates \(other.coefficient)")
        #expect(!r.events.contains { $0.name == "error" })
    }

    @Test("alsa-source records it through ALSA's pulse plugin")
    func alsaSourceCapturesChirp() async throws {
        let r = try await captureChirp(type: "alsa-source", device: { "pulse:DEVICE=\($0.monitor)" })
        let m = AudioMatch.locate(r.chirp, in: r.captured)
        #expect(m.coefficient > Self.matchBound, "correlation \(m.coefficient) at lag \(m.lag)")
        let other = AudioMatch.locate(AudioSignals.chirp(from: 3400, to: 300), in: r.captured)
        #expect(other.coefficient < 0.5, "unrelated chirp correlates \(other.coefficient)")
    }

    @Test("capture at another rate still delivers the signal (converted by the server or the node)")
    func captureAt8kHz() async throws {
        let r = try await captureChirp(type: "pulse-source", device: { $0.monitor }, rate: 8000)
        // Compare at 8 kHz: the chirp (300–3400 Hz) fits below 4 kHz.
        let converter = try AudioConverter(from: AudioFormat(sampleRate: 16000, channels: 1), to: AudioFormat(sampleRate: 8000, channels: 1))
        let reference = converter.convert(r.chirp)
        let m = AudioMatch.locate(reference, in: r.captured)
        // The server's resampler and ours differ near 4 kHz, so the match is looser than at 16 kHz
        // (0.72–0.9 measured); unrelated audio stays below 0.5.
        #expect(m.coefficient > 0.6, "correlation \(m.coefficient)")
    }

    @Test("frames have the requested size, contiguous timestamps and the source counts no overrun")
    func frameShapeAndTimestamps() async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        var registry = BuiltinNodes.registry()
        let box = FrameBox()
        registry.register(FrameCollector.descriptor(box))
        let yaml = """
        version: 1
        nodes:
          mic: { type: pulse-source, device: "\(sink.monitor)", rate: 16000, channels: 1, frame_ms: 10 }
          col: { type: frame-collector }
        links:
          - mic -> col
        """
        let pipeline = try Pipeline(yaml: yaml, registry: registry)
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(800))
        pipeline.stop()
        _ = try await run.value
        let frames = box.frames
        #expect(frames.count > 20)
        for (i, f) in frames.enumerated() {
            #expect(f.audio?.samples.count == 160)
            #expect(f.pts == Int64(i) * 10_000_000)
        }
        #expect(pipeline.nodeStats.first { $0.id == "mic" }?.counters["overruns", default: 0] == 0)
    }
}
