// The README's node example, compiled here: the text between the two marker lines is what README.md
// shows under "Writing your own node" (a test below checks they are the same).

// README:begin
import Foundation
import PipelineCore

public actor GainNode: FrameProcessor {
    public struct Configuration: NodeConfiguration {
        var db: Double                                    // parameter `db`; `frameMs` would read `frame_ms`
        public static let parameters: [ParamSpec] = [
            ParamSpec("db", .double(-96...48), default: 0.0, doc: "gain in dB"),
        ]
        // func problems() -> [String]   checks combinations of parameters, if any
        // func problems(environment:)   the same, when a check looks at the graph's variables
    }
    let factor: Double
    var clipped: Int64 = 0
    init(configuration c: Configuration) { factor = pow(10, c.db / 20) }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard var audio = frame.audio else { return try await context.send(frame) }  // pass on the rest
        for i in audio.samples.indices {
            let v = (Double(audio.samples[i]) * factor).rounded()
            if abs(v) > 32767 { clipped += 1 }
            audio.samples[i] = Int16(max(-32768, min(32767, v)))
        }
        var out = frame
        out.payload = .audio(audio)
        try await context.send(out)           // forward it: a frame not sent goes no further
    }

    public func finish(context: NodeContext) async throws {  // end of stream: flush, report
        try await context.emit("gain_done", [("clipped", .int(clipped))])
    }

    public static let descriptor = NodeDescriptor(
        type: "gain", summary: "Amplifies or attenuates audio by a number of dB",
        inputs: [PortSpec("in", [.audio])], outputs: [PortSpec("out", [.audio]), .events],
        configuration: Configuration.self,
        fusable: true, make: { c, env in GainNode(configuration: c) })
}
// README:end

import Testing
import VoicepipeTesting

@Suite("README")
struct ReadmeNodeTests {
    /// The project's README: the first README.md above this file that has the section (the file is
    /// also compiled by the PipelineCore package, from a folder inside the project).
    static func readme() throws -> String {
        var folder = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while folder.path != "/" {
            folder = folder.deletingLastPathComponent()
            if let text = try? String(contentsOf: folder.appendingPathComponent("README.md"), encoding: .utf8),
               text.contains("## Writing your own node") { return text }
        }
        throw CocoaError(.fileNoSuchFile)
    }

    @Test("the README's node example is this file's, verbatim")
    func theReadmeShowsTheCompiledExample() throws {
        let source = try String(contentsOf: URL(fileURLWithPath: #filePath), encoding: .utf8)
        let begin = try #require(source.range(of: "// README:begin\n")), end = try #require(source.range(of: "// README:end"))
        let example = String(source[begin.upperBound..<end.lowerBound])
        let readme = try Self.readme()
        let section = try #require(readme.range(of: "## Writing your own node"))
        let open = try #require(readme.range(of: "```swift\n", range: section.upperBound..<readme.endIndex))
        let close = try #require(readme.range(of: "```", range: open.upperBound..<readme.endIndex))
        #expect(String(readme[open.upperBound..<close.lowerBound]) == example,
                "README.md's node example differs from Tests/PipelineCoreTests/ReadmeNodeTests.swift: copy the marked text over")
    }

    @Test("the README's node forwards every frame, and reports at the end of the stream")
    func theExampleNodeWorks() async throws {
        let format = AudioFormat(sampleRate: 16000, channels: 1)
        let samples: [Int16] = (0..<1600).map { Int16(($0 % 200) * 170 - 17000) }
        let h = try NodeHarness(GainNode.descriptor, parameters: ["db": .double(6)])
        h.send(ScriptedSource.audioFrames(samples, format: format, samplesPerFrame: 320))
        try await h.run()
        let out = h.output().samples
        #expect(out.count == samples.count)
        #expect(out[110] == Int16((Double(samples[110]) * pow(10, 6.0 / 20)).rounded()) && out[1] == -32768)
        let done = h.events(named: "gain_done")
        #expect(done.count == 1)
        #expect((done.first?["clipped"]?.intValue ?? 0) > 0)
    }
}
