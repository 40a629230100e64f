import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// microWakeWord's front end and detector against the `pymicro-features` and `pymicro-wakeword`
/// packages (in `.deps/venv`, scripts/install-python-deps.sh), on the same audio.
@Suite("microWakeWord", .serialized)
struct MicroWakeWordTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    static let python = root + "/.deps/venv/bin/python3"
    static let micro = root + "/.deps/wake/micro"
    static var haveReference: Bool {
        FileManager.default.isExecutableFile(atPath: python)
            && ((try? shell(python, ["-c", "import pymicro_features, pymicro_wakeword"]).status) ?? 1) == 0
    }

    /// Speech in noise, then the extremes the fixed-point arithmetic must survive: full-scale square
    /// waves, −32768 spikes in silence, a sweep, digital silence.
    static func audio() throws -> (speech: [Int16], all: [Int16]) {
        let path = temporaryPath("micro-speech.wav")
        #expect(try shell("espeak-ng", ["-v", "en-us", "-w", path, "alexa, turn on the lights"]).status == 0)
        let (format, raw) = try readWAV(path)
        let speech16 = try AudioConverter(from: format, to: AudioFormat(sampleRate: 16000, channels: 1), quality: 3).convert(raw)
        // Both sides hear the same samples, so the noise need not repeat from run to run.
        let noisy = ([Int16](repeating: 0, count: 8000) + speech16 + [Int16](repeating: 0, count: 8000)).map { s in
            Int16(clamping: Int(s) + Int.random(in: -300...300))
        }
        var extremes: [Int16] = []
        for i in 0..<4800 { extremes.append((i / 20) % 2 == 0 ? 32767 : -32768) }
        for i in 0..<4800 { extremes.append(i % 997 == 0 ? -32768 : 0) }
        for i in 0..<8000 { extremes.append(Int16(32000 * sin(Double(i) * Double(i) * 0.00006))) }
        extremes += [Int16](repeating: 0, count: 3200)
        extremes += [Int16](repeating: -32768, count: 1600)
        return (noisy, noisy + extremes)
    }

    static func writeRaw(_ samples: [Int16]) throws -> String {
        let path = temporaryPath("micro.s16")
        try samples.withUnsafeBytes { Data($0) }.write(to: URL(fileURLWithPath: path))
        return path
    }

    @Test(.enabled(if: haveTool("espeak-ng") && haveReference))
    func theFrontEndEqualsPymicroFeaturesBitForBit() throws {
        let samples = try Self.audio().all
        let raw = try Self.writeRaw(samples)
        let script = """
            import sys, numpy as np
            from pymicro_features import MicroFrontend
            a = open(sys.argv[1], 'rb').read(); f = MicroFrontend()
            for i in range(0, len(a) - 319, 320):
                out = f.process_samples(a[i:i + 320])
                if out.features: print(' '.join(str(round(x / 0.0390625)) for x in out.features))
            """
        let r = try shell(Self.python, ["-c", script, raw])
        #expect(r.status == 0, "\(r.error)")
        let expected = String(decoding: r.output, as: UTF8.self).split(separator: "\n").map { $0.split(separator: " ").map { UInt16($0)! } }
        var got: [[UInt16]] = []
        let frontend = MicroFrontend()
        // Fed in uneven pieces: the framing must not depend on how the audio arrives.
        var at = 0, piece = 1
        while at < samples.count {
            let end = min(samples.count, at + piece)
            frontend.process(Array(samples[at..<end])) { got.append($0) }
            at = end
            piece = piece * 7 % 1013 + 1
        }
        #expect(expected.count == samples.count / 160 - 2 && got.count == expected.count, "\(got.count) frames, \(expected.count) expected")
        let differing = zip(got, expected).enumerated().filter { $0.element.0 != $0.element.1 }
        let allEqual = differing.isEmpty  // (the message names the first difference, not all of them)
        #expect(allEqual, "\(differing.count) frames differ, first \(differing.first.map { "\($0.offset): \($0.element.0) vs \($0.element.1)" } ?? "")")
    }

    @Test(.enabled(if: haveTool("espeak-ng") && haveReference && FileManager.default.fileExists(atPath: micro + "/alexa.json")))
    func theDetectorScoresAsPymicroWakewordDoes() throws {
        let samples = try Self.audio().speech
        let raw = try Self.writeRaw(samples)
        let script = """
            import sys
            from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model
            ww = MicroWakeWord.from_builtin(Model.ALEXA); feats = MicroWakeWordFeatures()
            for x in feats.process_streaming(open(sys.argv[1], 'rb').read()):
                print(ww.process_streaming_prob(x))
            """
        let r = try shell(Self.python, ["-c", script, raw])
        #expect(r.status == 0, "\(r.error)")
        let expected = String(decoding: r.output, as: UTF8.self).split(separator: "\n").compactMap { Double($0) }
        let detector = try MicroWakeWord(folder: Self.micro, words: ["alexa"], variables: ["VOICEPIPE_TFLITE": Self.root + "/.deps/wake/lib/libtensorflowlite_c.so"])
        var got: [Double] = []
        try detector.feed(samples) { got.append(Double($0[0])) }
        #expect(got.count == expected.count)
        // pymicro-wakeword judges a score only on a model run (every third frame); between runs it says 0.
        let runs = zip(got, expected).enumerated().filter { ($0.offset + 1) % 3 == 0 }
        let worst = runs.map { abs($0.element.0 - $0.element.1) }.max() ?? 1
        #expect(worst < 1e-6, "largest difference \(worst)")
        #expect(expected.max() ?? 0 > 0.9, "the reference does not hear alexa: \(expected.max() ?? 0)")
    }

    @Test(.enabled(if: FileManager.default.fileExists(atPath: micro + "/alexa.json")))
    func autoTakesEachWordFromTheEngineMeasuredBetter() throws {
        let plan = try WakeEngines.plan(words: ["alexa", "hey_jarvis", "hey_rhasspy", "hey_mycroft", "okay_nabu"], engine: "auto", models: nil, variables: [:])
        #expect(plan.microWakeWord == ["alexa", "hey_mycroft"])
        #expect(plan.openWakeWord == ["hey_jarvis", "hey_rhasspy", "okay_nabu"])
        let forced = try WakeEngines.plan(words: ["alexa", "hey_jarvis"], engine: "openwakeword", models: nil, variables: [:])
        #expect(forced.microWakeWord.isEmpty && forced.openWakeWord == ["alexa", "hey_jarvis"])
        #expect { _ = try WakeEngines.plan(words: ["hey_rhasspy"], engine: "microwakeword", models: nil, variables: [:]) } throws: {
            "\($0)".contains("no model for wake word hey_rhasspy") && "\($0)".contains("okay_nabu")
        }
    }

    @Test(.enabled(if: haveTool("espeak-ng") && FileManager.default.fileExists(atPath: micro + "/alexa.json")))
    func theNodeHearsAlexaThroughMicroWakeWord() async throws {
        let speech = try Self.audio().speech
        let samples = speech + [Int16](repeating: 0, count: 16000)
        let path = try DSPFixtures.wav(samples, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: ["{ type: wake, words: [alexa, hey_jarvis] }"])
        let wakes = events.named("wake")
        #expect(wakes.count == 1, "\(wakes)")
        #expect(wakes.first?["word"]?.stringValue == "alexa")
        #expect(wakes.first?["engine"]?.stringValue == "microwakeword")
        #expect((wakes.first?["score"]?.doubleValue ?? 0) > 0.9)
        // espeak-ng's "alexa" ends about 0.6 s into the speech, which starts 0.5 s in.
        let at = Int(wakes.first?["media_ms"]?.intValue ?? 0)
        #expect(at > 700 && at < 2000, "detected at \(at) ms")
        #expect(log.audio.filter { $0.marks.wake != nil }.count == 1)
    }

    @Test func aBrokenSettingsFileIsNamedWithWhatIsWrong() throws {
        let folder = temporaryPath("micro-broken")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        try Data(#"{"model": "alexa.tflite", "micro": {"probability_cutoff": 0.9}}"#.utf8).write(to: URL(fileURLWithPath: folder + "/alexa.json"))
        #expect { _ = try WakeEngines.plan(words: ["alexa"], engine: "auto", models: folder, variables: [:]) } throws: {
            "\($0)".contains(folder + "/alexa.json") && "\($0)".contains("sliding_window_size")
        }
    }

    @Test func aModelFolderWithoutTheWordIsNamed() throws {
        let folder = temporaryPath("micro-empty")
        try FileManager.default.createDirectory(atPath: folder, withIntermediateDirectories: true)
        #expect { _ = try WakeEngines.plan(words: ["alexa"], engine: "microwakeword", models: folder, variables: [:]) } throws: {
            "\($0)".contains("no model for wake word alexa") && "\($0)".contains(folder)
        }
    }
}
