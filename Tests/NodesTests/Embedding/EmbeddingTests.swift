import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// The embedding API as an app uses it (the README's example): audio pushed from the app into an
/// `app-source`, every event received as an AsyncSequence.
@Suite("Embedding API")
struct EmbeddingTests {
    @Test("an app pushes speech and receives utterances and transcripts as values", .timeLimit(.minutes(2)))
    func pushAndListen() async throws {
        let wav = temporaryPath("speech.wav")
        let raw = temporaryPath("speech-raw.wav")
        try shell("flite", ["-voice", "slt", "-t", "please turn on the lights in the kitchen", "-o", raw])
        try shell("sox", [raw, "-r", "16000", "-c", "1", "-b", "16", wav, "pad", "0.5", "1.0"])
        let (format, samples) = try readWAV(wav)
        #expect(format == AudioFormat(sampleRate: 16000, channels: 1))

        let pipeline = try Pipeline(yaml: """
            nodes:
              mic:    { type: app-source, rate: 16000, channels: 1, capacity: 8, overflow: block }
              vad:    { type: vad, stop_ms: 500 }
              slicer: { type: slicer, mode: utterance, slice_ms: 600 }
              asr:    { type: asr }
            links:
              - mic -> vad -> slicer -> asr
            """, registry: BuiltinNodes.registry())
        let events = pipeline.events()
        let mic = try #require(pipeline.appSource("mic"))
        let run = Task { try await pipeline.run() }
        // Push 20 ms chunks as a capture callback would.
        var i = 0
        while i < samples.count {
            await mic.push(Array(samples[i..<min(i + 320, samples.count)]))
            i += 320
        }
        mic.finish()

        var names: [EventName] = []
        var finals: [String] = []
        for await e in events {
            names.append(e.name)
            if e.name == "transcript", e["final"]?.boolValue == true { finals.append(e["text"]?.stringValue ?? "") }
        }
        try await run.value
        #expect(names.contains("speech_start") && names.contains("speech_end"))
        #expect(names.contains("utterance_start") && names.contains("utterance_end"))
        #expect(names.last == "finished")
        #expect(finals.count == 1)
        let words = Set((finals.first ?? "").split(separator: " ").map(String.init))
        #expect(words.isSuperset(of: ["lights", "kitchen"]), "\(finals)")
        #expect(mic.dropped == 0)
        #expect(pipeline.edgeStats.allSatisfy { $0.dropped == 0 })
    }
    @Test("the README's GraphBuilder example is valid as written, and meters what the app pushes")
    func builderExample() async throws {
        // README:builder:begin
        var g = GraphBuilder(name: "meter")
        g.node("mic", "app-source", ["rate": 16000, "channels": 1])
        g.node("vol", "volume", ["interval_ms": 100])
        g.node("out", "null-sink")
        g.chain("mic", "vol", "out")
        let meter = try Pipeline(g, registry: BuiltinNodes.registry())
        // README:builder:end
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let begin = try #require(source.range(of: "// README:builder:begin\n")), end = try #require(source.range(of: "        // README:builder:end"))
        let example = source[begin.upperBound..<end.lowerBound].split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.dropFirst(8) }.joined(separator: "\n")
        let readme = try String(contentsOf: URL(fileURLWithPath: #filePath).deletingLastPathComponent()
            .appendingPathComponent("../../../README.md").standardized, encoding: .utf8)
        #expect(readme.contains("```swift\n" + example + "```"), "README.md's GraphBuilder example differs from this test's")

        let events = meter.events()
        let mic = try #require(meter.appSource("mic"))
        async let run: Void = meter.run()
        await mic.push([Int16](repeating: 3000, count: 16000))
        mic.finish()
        try await run
        var volumes = 0
        for await e in events where e.name == .volume { volumes += 1 }
        #expect(volumes >= 9)
        #expect(meter.state == .finished(.completed))
    }
}
