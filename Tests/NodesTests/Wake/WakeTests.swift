import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// `wake` (TensorFlow Lite and openWakeWord's models from scripts/install-wake.sh).
@Suite("wake", .serialized)
struct WakeTests {
    static let format = AudioFormat(sampleRate: 16000, channels: 1)

    static func flite(_ text: String, voice: String = "slt") throws -> [Int16] {
        let path = temporaryPath("wake.wav")
        let r = try shell("flite", ["-voice", voice, "-t", text, "-o", path])
        #expect(r.status == 0)
        return DSPFixtures.trimSilence(try readWAV(path).samples)
    }

    static func silence(_ ms: Int) -> [Int16] { [Int16](repeating: 0, count: ms * 16) }

    @Test(.enabled(if: haveTool("flite")))
    func hearsTheWordAndMarksTheNextFrame() async throws {
        let phrase = try Self.flite("hey jarvis")
        let samples = Self.silence(1000) + phrase + Self.silence(1000) + (try Self.flite("the weather is nice today")) + Self.silence(1000)
        let path = try DSPFixtures.wav(samples, format: Self.format)
        let (events, log) = try await DSPFixtures.run(input: path, chain: ["{ type: wake, words: [hey_jarvis, alexa] }"])
        let wakes = events.named("wake")
        #expect(wakes.count == 1, "\(wakes)")
        #expect(wakes.first?["word"]?.stringValue == "hey_jarvis")
        #expect((wakes.first?["score"]?.doubleValue ?? 0) >= 0.5)
        let at = Int(wakes.first?["media_ms"]?.intValue ?? 0)
        let phraseEnd = 1000 + phrase.count / 16
        #expect(at > phraseEnd - 300 && at < phraseEnd + 600, "detected at \(at) ms, the phrase ends at \(phraseEnd)")
        let marked = log.audio.filter { $0.marks.wake != nil }
        #expect(marked.count == 1 && marked.first?.marks.wake?.word == "hey_jarvis")
        #expect(log.samples == samples)  // gate: false passes everything
    }

    @Test(.enabled(if: haveTool("flite")))
    func aGatedSatelliteListensOnlyAfterTheWord() async throws {
        // Wake word then nothing (the flow ends on wake_timeout); wake word then a command.
        let samples = Self.silence(1000) + (try Self.flite("hey jarvis")) + Self.silence(3000)
            + (try Self.flite("hey jarvis")) + Self.silence(400) + (try Self.flite("turn on the kitchen lights")) + Self.silence(2000)
            + (try Self.flite("turn off the radio")) + Self.silence(2000)
        let path = try DSPFixtures.wav(samples, format: Self.format)
        let log = DSPFrameLog()
        let yaml = """
            version: 1
            name: satellite-test
            nodes:
              src: { type: file-source, path: "\(path)" }
              wake: { type: wake, words: [hey_jarvis], gate: true, listen_timeout_ms: 1500 }
              vad: { type: vad, engine: silero, stop_ms: 500 }
              slicer: { type: slicer, mode: utterance }
              sink: { type: dsp-collect }
            links:
              - src -> wake -> vad -> slicer -> sink
              - vad.events -> wake.listen
            """
        let events = try await runGraph(yaml, registry: DSPFixtures.registry(log))
        #expect(events.named("wake").count == 2)
        let ends = events.named("utterance_end")
        #expect(ends.map { $0["reason"]?.stringValue } == ["wake_timeout", "silence"], "\(ends)")
        // The command after the second wake word is the second flow; "turn off the radio" (no wake
        // word) never leaves the gate.
        let flows = Set(log.audio.compactMap { $0.marks.slice?.voiceID })
        #expect(flows.count == 2)
        let secondFlowMs = log.audio.filter { $0.marks.slice?.voiceID == ends.last?["voice_id"]?.stringValue }.reduce(0) { $0 + ($1.audio?.frameCount ?? 0) } / 16
        #expect(secondFlowMs > 1000 && secondFlowMs < 3500, "second flow \(secondFlowMs) ms")
    }

    @Test func anUnknownWordIsNamedAtValidation() throws {
        let yaml = "version: 1\nname: w\nnodes:\n  src: { type: tone-source, duration_ms: 100 }\n  wake: { type: wake, words: [hey_nobody] }\n  out: { type: null-sink }\nlinks:\n  - src -> wake -> out\n"
        #expect { _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) } throws: { "\($0)".contains("hey_nobody") }
    }
}
