import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// `vad` with `turn_model: smart-turn` (ONNX Runtime from scripts/install-onnx.sh, the model from
/// scripts/install-smart-turn.sh).
@Suite("Smart Turn", .serialized)
struct SmartTurnTests {
    static func model() throws -> SmartTurnModel {
        let path = try #require(SmartTurnFiles.model(nil, ProcessInfo.processInfo.environment), "no smart-turn model: run scripts/install-smart-turn.sh (scripts/test.sh does)")
        return try SmartTurnModel(modelPath: path)
    }

    /// `text` spoken by flite's slt voice (16 kHz mono).
    static func flite(_ text: String) throws -> [Int16] {
        let path = temporaryPath("turn.wav")
        let r = try shell("flite", ["-voice", "slt", "-t", text, "-o", path])
        #expect(r.status == 0)
        let (format, samples) = try readWAV(path)
        #expect(format == AudioFormat(sampleRate: 16000, channels: 1))
        return samples
    }

    /// A WAV file: 0.5 s of silence, "What is the weather like in", 2.5 s of silence, "What is the weather
    /// like in Paris today?", 2 s of silence (flite's slt, trimmed).
    static func unfinishedThenFinished() throws -> String {
        let first = DSPFixtures.trimSilence(try flite("What is the weather like in"))
        let second = DSPFixtures.trimSilence(try flite("What is the weather like in Paris today?"))
        let lead = [Int16](repeating: 0, count: 8000)
        let samples = lead + first + [Int16](repeating: 0, count: 40000) + second + [Int16](repeating: 0, count: 32000)
        return try DSPFixtures.wav(samples, format: AudioFormat(sampleRate: 16000, channels: 1))
    }

    @Test func featuresMatchWhispersExtractor() {
        // transformers' WhisperFeatureExtractor (chunk_length 8, as Smart Turn uses it) on 1 s of a
        // 440 Hz sine at 0.3 (s16-rounded) at the end of 8 s of zeros.
        var x = [Float](repeating: 0, count: 128_000)
        for n in 0..<16000 {
            x[112_000 + n] = Float((0.3 * sin(2 * Double.pi * 440 * Double(n) / 16000) * 32767).rounded() / 32768)
        }
        let mel = WhisperLogMel(mels: 80, samples: 128_000)
        let f = mel.features(x)
        #expect(f.count == 80 * 800)
        let at = { (m: Int, t: Int) in f[m * 800 + t] }
        let mean = f.reduce(0, +) / Float(f.count)
        for (got, want) in [(at(0, 0), -0.110253155), (at(10, 790), 1.8002807), (at(40, 795), -0.110253155), (at(12, 799), 1.7488071), (mean, -0.09604767)] {
            #expect(abs(Double(got) - want) < 0.002, "\(got) vs \(want)")
        }
    }

    @Test(.enabled(if: haveTool("flite")))
    func completeAndIncompleteSentences() throws {
        // The reference (pipecat's Smart Turn v3 analyzer on onnxruntime 1.32) on the same audio followed
        // by 200 ms of silence: 0.911 complete, 0.150 incomplete. The model is quantized: feature
        // differences of 1e-5 (float against double arithmetic) move its answer by up to ±0.15, so
        // only clear margins are checked.
        let model = try Self.model()
        let silence = [Int16](repeating: 0, count: 3200)
        let complete = try model.probability((try Self.flite("What is the weather like in Paris today?") + silence)[...])
        let incomplete = try model.probability((try Self.flite("What is the weather like in") + silence)[...])
        #expect(complete > 0.7, "complete: \(complete)")
        #expect(incomplete < 0.35, "incomplete: \(incomplete)")
    }

    @Test(.enabled(if: haveTool("flite")))
    func anIncompleteTurnWaitsAndACompleteOneEndsAtOnce() async throws {
        let path = try Self.unfinishedThenFinished()
        // The VAD alone at 300 ms ends both on silence.
        let (alone, _) = try await DSPFixtures.run(input: path, chain: ["{ type: vad, engine: silero, stop_ms: 300 }"])
        #expect(alone.named("speech_end").map { $0["reason"]?.stringValue } == ["silence", "silence"])
        // With the model and the threshold policy: the incomplete one waits for max_pause_ms, the
        // complete one ends after stop_ms.
        let (events, log) = try await DSPFixtures.run(input: path, chain: [
            "{ type: vad, engine: silero, stop_ms: 300, turn_model: smart-turn, turn_policy: threshold, max_pause_ms: 1500 }",
        ])
        let ends = events.named("speech_end")
        #expect(ends.map { $0["reason"]?.stringValue } == ["silence", "turn_model"], "\(ends)")
        #expect((ends.first?["silence_ms"]?.intValue ?? 0) >= 1500)
        #expect((ends.last?["silence_ms"]?.intValue ?? 9999) < 500)
        #expect((ends.last?["probability"]?.doubleValue ?? 0) >= 0.5)
        let marked = log.audio.filter { $0.marks.speechEnd }
        #expect(marked.map { $0.marks.endReason?.name } == ["silence", "turn_model"])
    }

    @Test("with a turn model the defaults ask at 100 ms; incomplete waits up to 1500 ms")
    func defaultsWithATurnModel() throws {
        let plain = try VADNode.Configuration.decode([:])
        #expect(plain.closingMs == 500)
        let turn = try VADNode.Configuration.decode(["turn_model": .string("smart-turn")])
        #expect(turn.closingMs == 100 && turn.turnPolicy == .threshold && turn.turnThreshold == 0.5 && turn.maxPauseMs == 1500)
        let given = try VADNode.Configuration.decode(["turn_model": .string("smart-turn"), "stop_ms": .int(300)])
        #expect(given.closingMs == 300)
    }

    @Test(.enabled(if: haveTool("flite")))
    func theDefaultsEndACompleteTurnSoonAndWaitOutAnIncompleteOne() async throws {
        let path = try Self.unfinishedThenFinished()
        let (events, _) = try await DSPFixtures.run(input: path, chain: ["{ type: vad, engine: silero, turn_model: smart-turn }"])
        let ends = events.named("speech_end")
        // Asked at 100 ms of silence: the unfinished sentence waits out max_pause_ms (1500), the finished
        // one ends as soon as the model has answered.
        #expect(ends.map { $0["reason"]?.stringValue } == ["silence", "turn_model"], "\(ends)")
        guard ends.count == 2 else { return }
        #expect((1500..<1600).contains(ends[0]["silence_ms"]?.intValue ?? 0), "\(ends[0])")
        #expect((100..<200).contains(ends[1]["silence_ms"]?.intValue ?? 0), "\(ends[1])")
        #expect((ends[1]["probability"]?.doubleValue ?? 0) >= 0.5)
    }

    @Test(.enabled(if: haveTool("flite")))
    func theScaledPolicyWaitsLongerOnAnIncompleteTurn() async throws {
        let path = try Self.unfinishedThenFinished()
        let (events, _) = try await DSPFixtures.run(input: path, chain: ["{ type: vad, engine: silero, turn_model: smart-turn, turn_policy: scaled }"])
        let ends = events.named("speech_end")
        // Both ended by the model's wait: (1 - p)·1500 ms after the speech, asked at 100 ms.
        #expect(ends.map { $0["reason"]?.stringValue } == ["turn_model", "turn_model"], "\(ends)")
        guard ends.count == 2 else { return }
        for e in ends {
            let p = e["probability"]?.doubleValue ?? -1
            let silence = Double(e["silence_ms"]?.intValue ?? -1)
            #expect((0...1).contains(p))
            // The wait is checked on each 32 ms Silero window.
            #expect(silence >= max(100, 1500 * (1 - p)) && silence < max(100, 1500 * (1 - p)) + 100, "p \(p), silence \(silence)")
        }
        // Asked at 100 ms the model is less sure of the complete sentence than at 200 ms (0.54 against
        // 0.91 here), but the unfinished one still waits the longer by far.
        let p0 = ends[0]["probability"]?.doubleValue ?? 1, p1 = ends[1]["probability"]?.doubleValue ?? 0
        #expect(p0 < 0.35 && p1 > p0 + 0.2, "\(p0) then \(p1)")
        #expect((ends[0]["silence_ms"]?.intValue ?? 0) > 900)
        #expect((ends[0]["silence_ms"]?.intValue ?? 0) > (ends[1]["silence_ms"]?.intValue ?? 9999) + 300)
    }

    @Test func aMissingModelIsNamedAtValidation() throws {
        let yaml = "version: 1\nname: v\nnodes:\n  src: { type: tone-source, duration_ms: 100 }\n  vad: { type: vad, turn_model: smart-turn, turn_model_path: /nonexistent/turn.onnx }\n  out: { type: null-sink }\nlinks:\n  - src -> vad -> out\n"
        #expect { _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) } throws: { "\($0)".contains("/nonexistent/turn.onnx") }
    }
}
