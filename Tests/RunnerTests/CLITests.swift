import Testing
import Foundation

@Suite("voicepipe CLI", .serialized)
struct CLITests {
    @Test("file-source -> wav-sink reproduces the input PCM exactly, for several formats")
    func formatsRoundTrip() throws {
        let dir = tempDir()
        let reference: [Int16] = (0..<4800).map { Int16(truncatingIfNeeded: ($0 * 7919) % 65536 - 32768) }
        let refBytes = reference.flatMap { WAVBytes.le(UInt32(UInt16(bitPattern: $0)), 2) }
        let cases: [(String, Data, [Int16])] = [
            ("s16.wav", WAVBytes.file(tag: 1, rate: 16000, channels: 1, bits: 16, data: refBytes), reference),
            ("s16-stereo.wav", WAVBytes.file(tag: 1, rate: 44100, channels: 2, bits: 16, data: refBytes), reference),
            ("s24.wav", WAVBytes.file(tag: 1, rate: 48000, channels: 1, bits: 24, data: reference.flatMap { [0x5A] + WAVBytes.le(UInt32(UInt16(bitPattern: $0)), 2) }), reference),
            ("s32.wav", WAVBytes.file(tag: 1, rate: 8000, channels: 1, bits: 32, data: reference.flatMap { [0x01, 0x80] + WAVBytes.le(UInt32(UInt16(bitPattern: $0)), 2) }), reference),
            ("f32-ext.wav", WAVBytes.file(tag: 3, rate: 16000, channels: 1, bits: 32,
                                          data: reference.flatMap { WAVBytes.le((Float($0) / 32768).bitPattern, 4) }, extensible: true), reference),
            ("u8.wav", WAVBytes.file(tag: 1, rate: 11025, channels: 1, bits: 8, data: (0..<4800).map { UInt8($0 % 256) }),
             (0..<4800).map { Int16(($0 % 256) - 128) << 8 }),
        ]
        for (name, bytes, expected) in cases {
            let input = dir.appendingPathComponent(name).path
            let output = dir.appendingPathComponent("out-" + name).path
            try bytes.write(to: URL(fileURLWithPath: input))
            let graph = try writeGraph("""
                nodes:
                  src: { type: file-source, path: "\(input)", frame_ms: 7 }
                  out: { type: wav-sink, path: "\(output)" }
                links: [ "src -> out" ]
                """, in: dir, name: name + ".yaml")
            let r = try voicepipe(["run", graph, "--quiet"])
            #expect(r.status == 0, "\(name): \(r.stderr)")
            let written = try Data(contentsOf: URL(fileURLWithPath: output))
            #expect(written.count == 44 + expected.count * 2, "\(name)")
            let samples = written.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
            #expect(samples == expected, "\(name): samples differ")
        }
    }

    @Test("raw PCM with a declared format")
    func rawPCM() throws {
        let dir = tempDir()
        let samples: [Int16] = (0..<1000).map { Int16($0 * 3) }
        let input = dir.appendingPathComponent("in.raw")
        try Data(samples.flatMap { WAVBytes.le(UInt32(UInt16(bitPattern: $0)), 2) }).write(to: input)
        let output = dir.appendingPathComponent("out.wav").path
        let graph = try writeGraph("""
            nodes:
              src: { type: file-source, path: "\(input.path)", raw: { rate: 8000, channels: 1 } }
              out: { type: wav-sink, path: "\(output)" }
            links: [ "src -> out" ]
            """, in: dir)
        let r = try voicepipe(["run", graph])
        #expect(r.status == 0, "\(r.stderr)")
        let written = try Data(contentsOf: URL(fileURLWithPath: output))
        #expect(written.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) } == samples)
        #expect(written[24..<28] == Data(WAVBytes.le(8000, 4)))
    }

    @Test("bad inputs give a clear error and exit code 1, without a crash",
          arguments: ["missing", "truncated", "not-wav", "alaw", "empty"])
    func badInputs(kind: String) throws {
        let dir = tempDir()
        let input = dir.appendingPathComponent("in.wav")
        let data = (0..<2000).flatMap { _ in [UInt8(1), UInt8(2)] }
        var expected = ""
        switch kind {
        case "missing": expected = "no such file"
        case "truncated":
            try WAVBytes.file(tag: 1, rate: 16000, channels: 1, bits: 16, data: data, dataSizeOverride: 400_000).write(to: input)
            expected = "truncated"
        case "not-wav":
            try Data("hello, this is not audio at all, just text".utf8).write(to: input)
            expected = "not a WAV file"
        case "alaw":
            try WAVBytes.file(tag: 6, rate: 8000, channels: 1, bits: 8, data: data).write(to: input)
            expected = "unsupported WAV encoding (A-law"
        default:
            try Data().write(to: input)
            expected = "too short"
        }
        let graph = try writeGraph("""
            nodes:
              src: { type: file-source, path: "\(input.path)" }
              out: { type: wav-sink, path: "\(dir.appendingPathComponent("o.wav").path)" }
            links: [ "src -> out" ]
            """, in: dir)
        let r = try voicepipe(["run", graph])
        #expect(r.status == 1, "\(kind): status \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("node 'src'"), "\(kind): \(r.stderr)")
        #expect(r.stderr.contains(expected), "\(kind): \(r.stderr)")
    }

    @Test("a relative file found nowhere is named with where it was looked for")
    func missingRelativeFile() throws {
        let dir = tempDir()
        let graph = try writeGraph("""
            nodes:
              src: { type: file-source, path: "recordings/nowhere.wav" }
              out: { type: null-sink }
            links: [ "src -> out" ]
            """, in: dir)
        let r = try voicepipe(["run", graph])
        #expect(r.status == 1, "status \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("node 'src'"), "\(r.stderr)")
        #expect(r.stderr.contains("recordings/nowhere.wav: no such file (a relative path is looked up next to the graph file, then in the working directory, \(FileManager.default.currentDirectoryPath))"), "\(r.stderr)")
    }

    @Test("an invalid graph exits 2 and reports every problem with file:line:column")
    func invalidGraph() throws {
        let dir = tempDir()
        let graph = try writeGraph("""
            nodes:
              src: { type: tone-sourc }
              out: { type: wav-sink, path: x.wav, colour: red }
            links: [ "src -> out" ]
            """, in: dir)
        for verb in ["run", "validate"] {
            let r = try voicepipe([verb, graph])
            #expect(r.status == 2)
            #expect(r.stderr.contains("\(graph):2:16: node 'src': unknown node type 'tone-sourc'"), "\(r.stderr)")
            #expect(r.stderr.contains("\(graph):3:39: node 'out': unknown parameter 'colour'"), "\(r.stderr)")
        }
    }

    @Test("SIGINT stops the sources, finalizes the WAV header and exits 0 within 2 s")
    func sigintFinalizesWAV() throws {
        let dir = tempDir()
        let output = dir.appendingPathComponent("rec.wav").path
        let graph = try writeGraph("""
            nodes:
              mic: { type: tone-source, rate: 16000, realtime: true }
              out: { type: wav-sink, path: "\(output)" }
            links: [ "mic -> out" ]
            """, in: dir)
        let p = try Running(voicepipeBinary, ["run", graph])
        Thread.sleep(forTimeInterval: 1.0)
        let signalled = Date()
        p.signal(SIGINT)
        let r = p.wait(timeout: 10)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(Date().timeIntervalSince(signalled) < 2.0)
        let data = try Data(contentsOf: URL(fileURLWithPath: output))
        let riff = data[4..<8].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        let dataSize = data[40..<44].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        #expect(Int(dataSize) == data.count - 44)
        #expect(Int(riff) == data.count - 8)
        #expect(dataSize > 16000 * 2 / 2, "about a second of audio was recorded")
    }

    @Test("--stats prints the per-edge table; --set overrides and swaps types")
    func statsAndSet() throws {
        let dir = tempDir()
        let output = dir.appendingPathComponent("t.wav").path
        let graph = try writeGraph("""
            nodes:
              mic: { type: tone-source, duration_ms: 1000, realtime: true }
              out: { type: null-sink }
            links: [ "mic -> out" ]
            """, in: dir)
        let r = try voicepipe(["run", graph, "--stats", "--set", "mic.realtime=false", "--set", "out.type=wav-sink", "--set", "out.path=\(output)"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stderr.contains("mic.out -> out.in"))
        #expect(r.stderr.contains("        50          0"), "\(r.stderr)")
        #expect(r.seconds < 0.9, "realtime was overridden")
        #expect(try Data(contentsOf: URL(fileURLWithPath: output)).count == 44 + 32000)
    }

    @Test("nodes lists types; nodes TYPE --json describes ports and parameters")
    func nodes() throws {
        let r = try voicepipe(["nodes"])
        #expect(r.status == 0)
        for t in ["file-source", "tone-source", "wav-sink", "null-sink", "jsonl-sink", "app-source"] { #expect(r.stdout.contains(t)) }
        let j = try voicepipe(["nodes", "file-source", "--json"])
        let parsed = try JSONSerialization.jsonObject(with: Data(j.stdout.utf8)) as? [[String: Any]]
        let params = (parsed?.first?["parameters"] as? [[String: Any]])?.compactMap { $0["name"] as? String } ?? []
        #expect(params.contains("path") && params.contains("realtime") && params.contains("loop"))
        #expect(try voicepipe(["nodes", "no-such-type"]).status == 2)
    }

    @Test("graph draws dot and mermaid")
    func graph() throws {
        let dir = tempDir()
        let graph = try writeGraph("""
            nodes:
              mic: { type: tone-source }
              out: { type: null-sink }
            links: [ "mic -> out" ]
            """, in: dir)
        let dot = try voicepipe(["graph", graph])
        #expect(dot.stdout.contains("\"mic\" -> \"out\""))
        let mermaid = try voicepipe(["graph", graph, "--format", "mermaid"])
        #expect(mermaid.stdout.hasPrefix("flowchart LR") && mermaid.stdout.contains("mic --> out"))
    }

    @Test("every file in pipelines/ validates")
    func pipelinesValidate() throws {
        let dir = packageRoot.appendingPathComponent("pipelines")
        let files = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".yaml") }.sorted()
        #expect(!files.isEmpty)
        let r = try voicepipe(["validate"] + files.map { dir.appendingPathComponent($0).path })
        #expect(r.status == 0, "\(r.stderr)")
    }
}

@Suite("Custom node package")
struct CustomNodePackageTests {
    /// Examples/custom-node's sources are also compiled by this package (target
    /// `voicepipe-custom-example`), so the "own executable" route is checked without building the
    /// dependency tree a second time. VOICEPIPE_EXAMPLE_TEST=1 also builds the example as the
    /// separate package a user would have.
    @Test("a user's executable adds a node type and runs the same CLI with it")
    func customNode() throws {
        let example = packageRoot.appendingPathComponent("Examples/custom-node")
        var binary = packageRoot.appendingPathComponent(".build/debug/voicepipe-custom-example").path
        if ProcessInfo.processInfo.environment["VOICEPIPE_EXAMPLE_TEST"] == "1" {
            let build = try Running("/usr/bin/env", ["swift", "build", "--package-path", example.path], cwd: example).wait(timeout: 1200)
            #expect(build.status == 0, "\(build.stderr.suffix(3000))")
            binary = example.appendingPathComponent(".build/debug/voicepipe-custom").path
        }
        let dir = tempDir()
        let out = dir.appendingPathComponent("gain.wav").path
        let r = try Running(binary, ["run", example.appendingPathComponent("gain.yaml").path, "--quiet"],
                            environment: ["GAIN_DB": "6", "OUT": out]).wait(timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("\"event\":\"gain_done\""), "\(r.stdout)")
        // A -20 dBFS sine amplified by 6 dB peaks near 32767 * 10^(-14/20) = 6523.
        let data = try Data(contentsOf: URL(fileURLWithPath: out))
        let samples = data.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let peak = samples.map { abs(Int($0)) }.max() ?? 0
        #expect(abs(peak - 6523) < 40, "peak \(peak)")
        let nodes = try Running(binary, ["nodes", "gain"]).wait(timeout: 30)
        #expect(nodes.stdout.contains("gain in dB"))
        // The vendor command belongs to the stock binary, not to the reusable CLI.
        let avatar = try Running(binary, ["avatar", "sessions"]).wait(timeout: 30)
        #expect(avatar.status != 0)
    }
}

@Suite("README")
struct ReadmeTests {
    @Test("the README's node table matches the registry (scripts/update-readme-nodes.sh regenerates it)")
    func nodeTable() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        guard let begin = readme.range(of: "<!-- nodes:begin -->\n"), let end = readme.range(of: "<!-- nodes:end -->") else {
            Issue.record("README.md has no node table markers")
            return
        }
        let table = String(readme[begin.upperBound..<end.lowerBound])
        let r = try voicepipe(["nodes", "--markdown"])
        #expect(r.status == 0)
        #expect(table == r.stdout, "README node table is stale: run scripts/update-readme-nodes.sh")
    }

    @Test("the README shows the two quick-start commands and CI runs the same test command")
    func quickStart() throws {
        let readme = try String(contentsOf: packageRoot.appendingPathComponent("README.md"), encoding: .utf8)
        #expect(readme.contains("scripts/quickstart.sh"))
        #expect(readme.contains("scripts/test.sh"))
        let ci = try String(contentsOf: packageRoot.appendingPathComponent(".ci/run"), encoding: .utf8)
        #expect(ci.contains("scripts/test.sh"))
    }

    @Test("vad engine silero: a missing ONNX Runtime or model is named, exit 1 at start or 2 at validation")
    func sileroFilesMissing() throws {
        let dir = tempDir()
        let graph = try writeGraph("""
        version: 1
        name: silero
        nodes:
          src: { type: tone-source, duration_ms: 200, realtime: false }
          vad: { type: vad, engine: silero }
          out: { type: null-sink }
        links:
          - src -> vad -> out
        """, in: dir)
        var env = ProcessInfo.processInfo.environment
        env["VOICEPIPE_ONNXRUNTIME"] = "/nonexistent/libonnxruntime.so.1"
        let run = try voicepipe(["run", graph, "--quiet"], environment: env)
        #expect(run.status == 1)
        #expect(run.stderr.contains("/nonexistent/libonnxruntime.so.1") && run.stderr.contains("install-onnx.sh"), "\(run.stderr)")
        env["VOICEPIPE_SILERO_MODEL"] = "/nonexistent/silero.onnx"
        let bad = try writeGraph(try String(contentsOfFile: graph, encoding: .utf8)
            .replacingOccurrences(of: "engine: silero }", with: "engine: silero, model: /nonexistent/silero.onnx }"), in: dir, name: "m.yaml")
        let check = try voicepipe(["validate", bad], environment: env)
        #expect(check.status == 2)
        #expect(check.stderr.contains("/nonexistent/silero.onnx"), "\(check.stderr)")
    }
}
