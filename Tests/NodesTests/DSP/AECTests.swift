import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// The `aec` node on a simulated echo path: far-end speech delayed, attenuated and low-passed, added to
/// a near-end talker who speaks alone and then over the far end.
@Suite("aec", .serialized, .enabled(if: haveTool("flite") && haveTool("sox")))
struct AECTests {
    struct Signals {
        let mic: String, far: String
        let clean: [Int16]
        let micSamples: [Int16]
    }

    /// 16 kHz: far end 0.5–8.5 s; near end alone 9–11 s, then over the far end from 12 s.
    static func signals(delayMs: Int) throws -> Signals {
        let dir = (temporaryPath("aec-x") as NSString).deletingLastPathComponent
        func run(_ tool: String, _ args: [String]) throws {
            let r = try shell(tool, args)
            guard r.status == 0 else { throw NodeError(NodeErrorCode(tool), r.error) }
        }
        try run("flite", ["-voice", "slt", "-t", "the train to the city leaves at seven in the morning and the next one an hour later, so please be on time tomorrow", "-o", dir + "/far-a.wav"])
        try run("flite", ["-voice", "slt", "-t", "we will meet at the station near the old clock tower", "-o", dir + "/far-b.wav"])
        try run("flite", ["-voice", "rms", "-t", "can you hear me now", "-o", dir + "/near-a.wav"])
        let far = dir + "/far.wav", near = dir + "/near.wav", echo = dir + "/echo.wav", mic = dir + "/mic.wav"
        // Far end: sentence a from 0.5 s, sentence b from 12 s (over the near end's second line).
        try run("sox", [dir + "/far-a.wav", "-r", "16000", "-b", "16", dir + "/fa.wav", "pad", "0.5", "0"])
        try run("sox", [dir + "/far-b.wav", "-r", "16000", "-b", "16", dir + "/fb.wav", "pad", "12", "0"])
        try run("sox", ["-m", dir + "/fa.wav", dir + "/fb.wav", far, "trim", "0", "15"])
        try run("sox", [far, echo, "pad", String(Double(delayMs) / 1000), "0", "vol", "0.4", "lowpass", "3800", "trim", "0", "15"])
        // Near end: alone at 9 s, then again at 12.2 s over the far end.
        try run("sox", [dir + "/near-a.wav", "-r", "16000", "-b", "16", dir + "/na.wav", "pad", "9", "0", "vol", "0.6"])
        try run("sox", [dir + "/near-a.wav", "-r", "16000", "-b", "16", dir + "/nb.wav", "pad", "12.2", "0", "vol", "0.6"])
        try run("sox", ["-m", dir + "/na.wav", dir + "/nb.wav", near, "trim", "0", "15"])
        try run("sox", ["-m", "-v", "1", echo, "-v", "1", near, mic, "trim", "0", "15"])
        // The cancellers high-pass the microphone (webrtc at 80 Hz): compare with the talker filtered alike,
        // or the phase shift of a low voice alone costs a good part of the correlation.
        try run("sox", [near, dir + "/near-hp.wav", "highpass", "80"])
        return Signals(mic: mic, far: far, clean: try readWAV(dir + "/near-hp.wav").samples, micSamples: try readWAV(mic).samples)
    }

    static func power(_ x: ArraySlice<Int16>) -> Double { x.reduce(0) { $0 + Double($1) * Double($1) } / Double(max(x.count, 1)) }

    /// Best correlation of `output` with `clean` over `range`, the output up to 25 ms late (the engines'
    /// own processing delay: webrtc ~7 ms, speex ~10 ms).
    static func correlation(_ output: [Int16], _ clean: [Int16], _ range: Range<Int>) -> Double {
        var best = -1.0
        for lag in 0...400 {
            var ab = 0.0, aa = 0.0, bb = 0.0
            for i in range where i + lag < output.count {
                let x = Double(output[i + lag]), y = Double(clean[i])
                ab += x * y; aa += x * x; bb += y * y
            }
            best = max(best, ab / max(sqrt(aa * bb), 1))
        }
        return best
    }

    @Test("the echo goes, the near talker stays", arguments: [("webrtc", 80), ("webrtc", 150), ("speex", 80)])
    func cancels(engine: String, delayMs: Int) async throws {
        let s = try Self.signals(delayMs: delayMs)
        let out = temporaryPath("aec-\(engine)-\(delayMs).wav")
        let events = try await runGraph("""
            version: 1
            nodes:
              mic: { type: file-source, path: "\(s.mic)" }
              far: { type: file-source, path: "\(s.far)" }
              aec: { type: aec, engine: \(engine), reference: pts, stats_interval_ms: 1000 }
              out: { type: wav-sink, path: "\(out)" }
            links:
              - mic -> aec.in
              - far -> aec.ref
              - aec -> out
            """)
        let result = try readWAV(out).samples
        #expect(result.count == s.micSamples.count, "frame for frame: \(result.count) of \(s.micSamples.count)")
        // Echo only, after convergence: 4–8.5 s.
        let echo = 16000 * 4..<16000 * 17 / 2
        let erle = 10 * log10(Self.power(s.micSamples[echo]) / max(Self.power(result[echo]), 1e-3))
        #expect(erle > (engine == "webrtc" ? 25 : 12), "\(engine) at \(delayMs) ms: ERLE \(erle) dB")
        // Near end alone (9–10.5 s): kept, level within 1.5 dB.
        let near = 16000 * 9..<16000 * 21 / 2
        let kept = Self.correlation(result, s.clean, near)
        let level = 10 * log10(Self.power(result[near]) / Self.power(s.clean[near]))
        #expect(kept > 0.9, "near end alone: correlation \(kept)")
        #expect(abs(level) < 1.5, "near end alone: level \(level) dB")
        // Both talking (12.2–13.5 s): the near talker comes through better than in the raw microphone.
        let both = 16000 * 122 / 10..<16000 * 135 / 10
        let during = Self.correlation(result, s.clean, both)
        let raw = Self.correlation(s.micSamples, s.clean, both)
        print("aec \(engine) \(delayMs) ms: ERLE \(erle) dB, near alone \(kept), double talk \(during) (microphone \(raw))")
        #expect(during > 0.5 && during > raw, "double talk: \(during) (microphone \(raw))")
        let stats = events.filter { $0.name == "aec_stats" && $0.node == "aec" }
        #expect(!stats.isEmpty)
        #expect((stats.last?["erle_db"]?.doubleValue ?? 0) > 3, "\(stats.last.map { "\($0.fields)" } ?? "")")
    }

    @Test("echo_gate_db silences what the canceller leaves of the echo, and lets the near talker through")
    func echoGate() async throws {
        let s = try Self.signals(delayMs: 80)
        func run(gate: Int) async throws -> [Int16] {
            let out = temporaryPath("aec-gate-\(gate).wav")
            _ = try await runGraph("""
                version: 1
                nodes:
                  mic: { type: file-source, path: "\(s.mic)" }
                  far: { type: file-source, path: "\(s.far)" }
                  aec: { type: aec, reference: pts, echo_gate_db: \(gate) }
                  out: { type: wav-sink, path: "\(out)" }
                links:
                  - mic -> aec.in
                  - far -> aec.ref
                  - aec -> out
                """)
            return try readWAV(out).samples
        }
        let open = try await run(gate: 0), gated = try await run(gate: 18)
        // Far end alone (0.5–8.5 s): 10 ms blocks in which something of the echo is still loud enough
        // for a VAD (above -45 dBFS).
        func loud(_ x: [Int16]) -> Int {
            stride(from: 16000 / 2, to: 16000 * 17 / 2, by: 160).filter { i in
                10 * log10(max(Self.power(x[i..<min(i + 160, x.count)]), 1e-3) / (32768.0 * 32768.0)) > -45
            }.count
        }
        print("aec echo gate: loud residual blocks \(loud(open)) without the gate, \(loud(gated)) with it")
        #expect(loud(gated) <= loud(open) / 2, "loud residual blocks: \(loud(open)) open, \(loud(gated)) gated")
        // The near talker alone, and over the far end, passes (correlation with the clean talker kept).
        let near = 16000 * 9..<16000 * 21 / 2, both = 16000 * 122 / 10..<16000 * 135 / 10
        #expect(Self.correlation(gated, s.clean, near) > 0.9)
        #expect(Self.correlation(gated, s.clean, both) > 0.5 * Self.correlation(open, s.clean, both),
                "double talk: gated \(Self.correlation(gated, s.clean, both)), open \(Self.correlation(open, s.clean, both))")
    }

    @Test("the reference may come in another format; a format the canceller cannot take is named")
    func formats() async throws {
        let tone = try RTPTest.wav(RTPTest.chirp(rate: 48000, seconds: 1), name: "aec-ref48.wav")
        let mic = try RTPTest.wav(RTPTest.chirp(rate: 16000, seconds: 1), rate: 16000, name: "aec-mic16.wav")
        let out = temporaryPath("aec-formats.wav")
        _ = try await runGraph("""
            version: 1
            nodes:
              mic: { type: file-source, path: "\(mic)" }
              far: { type: file-source, path: "\(tone)" }
              aec: { type: aec, reference: pts }
              out: { type: wav-sink, path: "\(out)" }
            links: [ "mic -> aec.in", "far -> aec.ref", "aec -> out" ]
            """)
        #expect(try readWAV(out).samples.count == 16000)
        await #expect(throws: (any Error).self) {
            _ = try await runGraph("""
                version: 1
                nodes:
                  mic: { type: file-source, path: "\(mic)", rate: 22050 }
                  far: { type: file-source, path: "\(tone)" }
                  aec: { type: aec }
                  out: { type: wav-sink, path: "\(temporaryPath("aec-bad.wav"))" }
                links: [ "mic -> aec.in", "far -> aec.ref", "aec -> out" ]
                """)
        }
    }
}
