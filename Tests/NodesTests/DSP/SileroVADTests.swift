import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// `vad` with `engine: silero` (ONNX Runtime and the model from scripts/install-onnx.sh).
@Suite("Silero VAD", .serialized)
struct SileroVADTests {
    static func model() throws -> String {
        try #require(SileroFiles.model(nil, ProcessInfo.processInfo.environment), "no silero model: run scripts/install-onnx.sh (scripts/test.sh does)")
    }

    /// Probabilities of each 512-sample window, as the node computes them.
    static func probabilities(_ samples: [Int16]) throws -> [Float] {
        let d = try SileroDetector(modelPath: try model())
        var out: [Float] = []
        // Zero-padded to whole windows, as the reference implementation does.
        let padded = samples + [Int16](repeating: 0, count: (512 - samples.count % 512) % 512)
        try d.feed(padded, format: AudioFormat(sampleRate: 16000, channels: 1), position: 0) { _, _, _ in out.append(d.lastProbability) }
        return out
    }

    @Test func matchesTheReferenceImplementationOnSilence() throws {
        // silero-vad's own OnnxWrapper (Python, onnxruntime 1.32.0) on one second of zeros.
        let reference: [Float] = [0.0017, 0.0069, 0.0089, 0.0079, 0.0059, 0.0060, 0.0059, 0.0056, 0.0054, 0.0052,
                                  0.0050, 0.0049, 0.0047, 0.0046, 0.0044, 0.0043]
        let p = try Self.probabilities([Int16](repeating: 0, count: 16 * 512))
        #expect(p.count == 16)
        for (a, b) in zip(p, reference) { #expect(abs(a - b) < 0.0006, "\(p) vs \(reference)") }
    }

    @Test(.enabled(if: haveTool("flite")))
    func matchesTheReferenceImplementationOnSpeech() throws {
        // flite -voice slt "hello world this is a test" (16 kHz), then the same reference.
        let reference: [Float] = [
            0.0111, 0.0149, 0.0078, 0.0058, 0.0055, 0.0620, 0.1218, 0.1882, 0.6927, 0.8187, 0.7955, 0.6871, 0.3926, 0.3521, 0.6427, 0.4143,
            0.5397, 0.8126, 0.8496, 0.7753, 0.6205, 0.4956, 0.4432, 0.5605, 0.4504, 0.9504, 0.9404, 0.9743, 0.9852, 0.9960, 0.9811, 0.9814,
            0.9651, 0.9717, 0.9982, 0.9993, 0.9999, 0.9998, 0.9999, 1.0000, 0.9999, 0.9999, 0.9999, 1.0000, 1.0000, 0.9999, 0.9999, 0.9999,
            1.0000, 0.9992, 0.9997, 0.9998, 0.9998, 0.9954, 0.9683, 0.5634, 0.1288, 0.0485,
        ]
        let path = temporaryPath("hello.wav")
        let r = try shell("flite", ["-voice", "slt", "-t", "hello world this is a test", "-o", path])
        #expect(r.status == 0)
        let (format, samples) = try readWAV(path)
        #expect(format == AudioFormat(sampleRate: 16000, channels: 1))
        let p = try Self.probabilities(samples)
        #expect(p.count == reference.count)
        let worst = zip(p, reference).map { abs($0 - $1) }.max() ?? 1
        #expect(worst < 0.01, "largest difference \(worst): \(p)")
    }

    @Test(.enabled(if: haveTool("espeak-ng")), arguments: [nil, 10.0])
    func marksEachSentenceInNoise(snr: Double?) async throws {
        let (clean, truth, speechRMS) = try DSPFixtures.sentences(DSPRealAudioTests.texts)
        let samples = snr.map { DSPFixtures.addNoise(clean, speechRMS: speechRMS, snrDB: $0) } ?? clean
        let path = try DSPFixtures.wav(samples, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: [
            "{ type: vad, engine: silero, start_ms: 100, stop_ms: 500, pre_roll_ms: 200 }",
        ])
        let starts = events.named("speech_start").compactMap { $0["media_ms"]?.intValue }
        let ends = events.named("speech_end").compactMap { $0["media_ms"]?.intValue }
        #expect(starts.count == 3 && ends.count == 3, "starts \(starts) ends \(ends), truth \(truth)")
        for (i, t) in truth.enumerated() where i < starts.count && i < ends.count {
            #expect(abs(Int(starts[i]) - t.startMs) <= 150, "start \(starts[i]) vs \(t.startMs)")
            #expect(abs(Int(ends[i]) - t.endMs) <= 200, "end \(ends[i]) vs \(t.endMs)")
        }
        // The audio passes untouched, with the marks in band.
        #expect(log.samples == samples)
        #expect(log.audio.filter { $0.marks.speechStart }.count == 3)
    }

    @Test func worksOnOtherRatesAndChannels() async throws {
        // 48 kHz stereo in: the analysis copy is 16 kHz mono; the audio passes in its own format.
        let path = try toneWAV([(0, 0.5), (440, 0.5)])
        let (_, log) = try await DSPFixtures.run(input: path, chain: ["{ type: resample, rate: 48000, channels: 2 }", "{ type: vad, engine: silero }"])
        #expect(log.audio.first?.audio?.format == AudioFormat(sampleRate: 48000, channels: 2))
        // A pure tone is not speech for the neural model (the energy detector would call it speech).
        #expect(log.audio.allSatisfy { !$0.marks.speechStart })
    }

    @Test func aMissingModelIsNamedAtValidation() throws {
        let yaml = "version: 1\nname: v\nnodes:\n  src: { type: tone-source, duration_ms: 100 }\n  vad: { type: vad, engine: silero, model: /nonexistent/silero.onnx }\n  out: { type: null-sink }\nlinks:\n  - src -> vad -> out\n"
        #expect { _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) } throws: { "\($0)".contains("/nonexistent/silero.onnx") }
    }

    @Test func aFileThatIsNotAModelIsNamedWithONNXRuntimesReason() throws {
        _ = try Self.model()   // ONNX Runtime is there
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("not-a-model-\(getpid()).onnx").path
        try Data("not an ONNX model".utf8).write(to: URL(fileURLWithPath: path))
        defer { try? FileManager.default.removeItem(atPath: path) }
        #expect { _ = try SileroDetector(modelPath: path) } throws: { error in
            guard let e = error as? NodeError else { return false }
            return e.code == .vadModel && e.message.contains("cannot load the silero VAD model \(path)") && e.message.count > path.count + 40
        }
        #expect { _ = try SileroDetector(modelPath: path + ".missing") } throws: { error in
            (error as? NodeError)?.code == .vadModelMissing && "\(error)".contains("scripts/install-onnx.sh")
        }
    }
}
