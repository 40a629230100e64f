import Foundation
import Testing

/// `voicepipe serve`'s Wyoming route on the satellite template (pipelines/serve-satellite.yaml),
/// driven by a client written with the `wyoming` package.
@Suite("voicepipe serve: Wyoming satellite", .serialized, .timeLimit(.minutes(3)))
struct ServeSatelliteTests {
    static var venvPython: String { packageRoot.appendingPathComponent(".deps/venv/bin/python3").path }

    /// `parts` spoken by flite, with the silences (ms) between them, as a 16 kHz WAV.
    static func speech(_ dir: URL, _ name: String, _ parts: [(text: String, pauseMs: Int)]) throws -> String {
        var pieces: [String] = []
        for (i, p) in parts.enumerated() {
            let raw = dir.appendingPathComponent("\(name)-\(i)-raw.wav").path, out = dir.appendingPathComponent("\(name)-\(i).wav").path
            _ = try ServeTests.voicepipeLike("/usr/bin/flite", ["-voice", "slt", "-t", p.text, "-o", raw])
            _ = try ServeTests.voicepipeLike("/usr/bin/sox", [raw, "-r", "16000", out, "pad", "0", String(Double(p.pauseMs) / 1000)])
            pieces.append(out)
        }
        let out = dir.appendingPathComponent("\(name).wav").path
        _ = try ServeTests.voicepipeLike("/usr/bin/sox", pieces + [out, "pad", "1", "0"])
        return out
    }

    @Test("a satellite's audio reaches the recognizer only after the wake word; the client gets detection, then the request's transcript",
          .enabled(if: FileManager.default.isExecutableFile(atPath: venvPython)))
    func satellite() throws {
        let dir = tempDir()
        let wyomingPort = ServeTests.freePort()
        let template = packageRoot.appendingPathComponent("pipelines/serve-satellite.yaml").path
        let (server, _) = try ServeTests.start(extra: """
              - name: satellite
                protocol: wyoming
                port: \(wyomingPort)
                graph: \(template)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let woken = try Self.speech(dir, "woken", [("hey jarvis", 500), ("please open the garage door", 2500)])
        let unwoken = try Self.speech(dir, "unwoken", [("please open the garage door", 2500)])
        let r = try ServeTests.voicepipeLike(Self.venvPython, [packageRoot.appendingPathComponent("Tests/Fixtures/wyoming_satellite_client.py").path,
                                                               "127.0.0.1", "\(wyomingPort)", woken, unwoken])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first == "info {\"wake\": [\"hey_jarvis\"]}", "\(r.stdout)")
        // The first session: the word, then the request; the second: no word, so nothing is heard.
        let transcripts = lines.enumerated().filter { $0.element.hasPrefix("transcript") }
        #expect(transcripts.count == 2, "\(r.stdout)")
        guard transcripts.count == 2 else { return }
        let first = lines[1..<transcripts[0].offset], second = lines[(transcripts[0].offset + 1)..<transcripts[1].offset]
        #expect(Array(first) == ["detection hey_jarvis"], "\(r.stdout)")
        #expect(transcripts[0].element.contains("garage"), "\(r.stdout)")
        #expect(!transcripts[0].element.contains("jarvis"), "\(r.stdout)")
        #expect(second.isEmpty && transcripts[1].element == "transcript ", "\(r.stdout)")
    }
}
