import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// Playback through the real daemon: what pulse-sink / alsa-sink play is recorded from the sink's
/// monitor with `pacat -r` and must be the signal, played to its end (the sink drains).
@Suite("AudioPlayback", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioPlaybackTests {
    func playChirp(type: String, device: (PrivateSink) -> String, fileRate: Int = 16000) async throws -> (reference: [Int16], recorded: [Int16], elapsed: Duration) {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let chirp = AudioSignals.chirp(rate: fileRate)
        let file = try AudioSignals.writeWAV(chirp, rate: fileRate)
        async let recording = recordMonitor(device: sink.monitor, seconds: 5)
        // The recording runs for a fixed window: start playing once pacat surely records, and leave the
        // window room for a slow graph start on a busy machine (the test waits for the window either way).
        try await Task.sleep(for: .milliseconds(500))
        let yaml = """
        version: 1
        nodes:
          src: { type: file-source, path: "\(file)", realtime: false }
          spk: { type: \(type), device: "\(device(sink))" }
        links:
          - src -> spk
        """
        let start = ContinuousClock.now
        _ = try await runGraph(yaml, timeout: .seconds(20))
        let elapsed = ContinuousClock.now - start
        // The graph ended only after the sink drained: the whole chirp is already on the monitor.
        let recorded = try await recording
        let reference = fileRate == 16000 ? chirp : try AudioConverter(from: AudioFormat(sampleRate: fileRate, channels: 1), to: AudioFormat(sampleRate: 16000, channels: 1)).convert(chirp)
        return (reference, recorded, elapsed)
    }

    @Test("pulse-sink plays the signal, to its end")
    func pulseSinkPlaysChirp() async throws {
        let r = try await playChirp(type: "pulse-sink", device: { $0.name })
        let m = AudioMatch.locate(r.reference, in: r.recorded)
        #expect(m.coefficient > AudioCaptureTests.matchBound, "correlation \(m.coefficient) at lag \(m.lag)")
        // Drained: a 0.8 s chirp cannot have been played in less than 0.8 s.
        #expect(r.elapsed >= .milliseconds(750))
        // The tail made it out: the last 100 ms of the chirp are in the recording too.
        let tail = Array(r.reference.suffix(1600))
        #expect(AudioMatch.locate(tail, in: r.recorded).coefficient > AudioCaptureTests.matchBound)
    }

    @Test("alsa-sink plays the signal through ALSA's pulse plugin, to its end")
    func alsaSinkPlaysChirp() async throws {
        let r = try await playChirp(type: "alsa-sink", device: { "pulse:DEVICE=\($0.name)" })
        let m = AudioMatch.locate(r.reference, in: r.recorded)
        #expect(m.coefficient > AudioCaptureTests.matchBound, "correlation \(m.coefficient) at lag \(m.lag)")
        #expect(r.elapsed >= .milliseconds(750))
        let tail = Array(r.reference.suffix(1600))
        #expect(AudioMatch.locate(tail, in: r.recorded).coefficient > AudioCaptureTests.matchBound)
    }

    @Test("a sink converts audio in another format (44.1 kHz file, 16 kHz device)")
    func sinkConverts() async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let chirp = AudioSignals.chirp(rate: 44100)
        let file = try AudioSignals.writeWAV(chirp, rate: 44100)
        async let recording = recordMonitor(device: sink.monitor, seconds: 5)
        // The recording runs for a fixed window: start playing once pacat surely records, and leave the
        // window room for a slow graph start on a busy machine (the test waits for the window either way).
        try await Task.sleep(for: .milliseconds(500))
        _ = try await runGraph("""
        version: 1
        nodes:
          src: { type: file-source, path: "\(file)" }
          spk: { type: alsa-sink, device: "pulse:DEVICE=\(sink.name)", rate: 16000, channels: 1 }
        links:
          - src -> spk
        """, timeout: .seconds(20))
        let recorded = try await recording
        let reference = try AudioConverter(from: AudioFormat(sampleRate: 44100, channels: 1), to: AudioFormat(sampleRate: 16000, channels: 1)).convert(chirp)
        let m = AudioMatch.locate(reference, in: recorded)
        #expect(m.coefficient > 0.8, "correlation \(m.coefficient)")
    }

    /// Both clocks are the system clock here, so the true drift is 0; over four seconds the queue
    /// depth (which moves in whole device periods) cannot resolve drift finer than a few hundred ppm
    /// on a loaded machine, so this checks the mechanism — the gauge is reported and the controller
    /// is not pinned at its clamp — and DriftCompensatorTests check the estimate on synthetic clocks.
    @Test("pulse-sink runs its drift controller against the device clock and reports clock_drift_ppm, unsaturated")
    func driftIsMeasured() async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let pipeline = try Pipeline(yaml: """
            version: 1
            nodes:
              src: { type: tone-source, frequency: 1000, duration_ms: 4000, realtime: true }
              spk: { type: pulse-sink, device: "\(sink.name)", latency_ms: 20 }
            links:
              - src -> spk
            """, registry: BuiltinNodes.registry())
        _ = try await runPipeline(pipeline, timeout: .seconds(20))
        let drift = try #require(pipeline.nodeStats.first { $0.id == "spk" }?.gauges["clock_drift_ppm"])
        #expect(drift.isFinite && abs(drift) < DriftCompensator().maxPPM, "drift \(drift) ppm")
        let off = try #require(pipeline.nodeStats.first { $0.id == "spk" })
        #expect(off.counters["underruns", default: 0] == 0)
    }
}
