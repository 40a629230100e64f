import Foundation
import Testing

/// The talk page and the console in a real Chromium (Debian's chromium and chromium-driver, driven by
/// selenium from the project's Python environment through Tests/Fixtures/browser_check.py). Screenshots
/// are kept in .build/test-artifacts/browser.
@Suite("browser pages", .serialized, .timeLimit(.minutes(5)))
struct BrowserTests {
    static let script = packageRoot.appendingPathComponent("Tests/Fixtures/browser_check.py").path
    static let shots = packageRoot.appendingPathComponent(".build/test-artifacts/browser")
    static let sentences = packageRoot.appendingPathComponent("samples/sentences.wav").path

    /// What is missing to drive a browser, or nil when everything is there.
    static var missing: String? {
        var m: [String] = []
        for tool in ["/usr/bin/chromium", "/usr/bin/chromedriver"] where !FileManager.default.isExecutableFile(atPath: tool) { m.append(tool) }
        if !FileManager.default.isExecutableFile(atPath: projectPython) { m.append(projectPython) }
        else if (try? ServeTests.voicepipeLike(projectPython, ["-c", "import selenium"]).status) != 0 { m.append("selenium in \(projectPython)") }
        return m.isEmpty ? nil : m.joined(separator: ", ")
    }

    /// Runs the script; its JSON answer.
    static func drive(_ args: [String], timeout: Double = 200) throws -> [String: Any] {
        let r = try ServeTests.voicepipeLike(projectPython, [script] + args, timeout: timeout)
        guard r.status == 0, let line = r.stdout.split(separator: "\n").last,
              let object = try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else {
            throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "browser_check.py failed (\(r.status)): \(r.stderr.suffix(3000))"])
        }
        return object
    }

    /// Words of `heard` found in `expected`, as a fraction of `expected`'s words.
    static func overlap(_ heard: String, _ expected: String) -> Double {
        let e = expected.split(separator: " "), h = Set(heard.lowercased().split(separator: " "))
        return Double(e.filter { h.contains($0) }.count) / Double(e.count)
    }

    /// Skips with a known issue saying what is missing (never a silent pass).
    static func requireBrowser() -> Bool {
        guard let m = missing else { return true }
        withKnownIssue("no browser to drive: \(m) missing (scripts/install-deps.sh installs chromium and chromium-driver, scripts/install-python-deps.sh selenium)") {
            Issue.record("browser test not run")
        }
        return false
    }

    @Test("talk page: Chromium's fake microphone plays sentences.wav, the page shows the four final transcripts; the console shows the session with frames on its edges")
    func talkPageAndConsole() throws {
        guard Self.requireBrowser() else { return }
        let dir = tempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let (server, port) = try ServeTests.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let result = try Self.drive(["talk", "http://127.0.0.1:\(port)", "raw", Self.sentences, Self.shots.path])
        let finals = result["finals"] as? [String] ?? []
        let expected = ["the weather is nice today", "please turn on the lights in the kitchen",
                        "i would like a cup of coffee", "we need more information about the project"]
        #expect(finals.count >= 4, "finals: \(finals); page: \(result)")
        // The fake microphone loops the file: the first four finals are the four sentences, in order.
        for (heard, sentence) in zip(finals, expected) {
            #expect(Self.overlap(heard, sentence) >= 0.75, "heard '\(heard)' for '\(sentence)'")
        }
        #expect((result["error"] as? String ?? "x").isEmpty)
        let console = result["console"] as? [String: Any] ?? [:]
        #expect((console["sessions"] as? [String])?.count == 1, "\(console)")
        #expect(console["nodes"] as? [String] == ["mic", "vad", "slicer", "asr"], "\(console)")
        let sent = console["edge_sent"] as? [Int] ?? []
        #expect(sent.count == 3 && sent.allSatisfy { $0 > 0 }, "edge frame counts \(sent)")
        #expect((console["events"] as? [String])?.isEmpty == false, "recent events: \(console)")
        #expect(FileManager.default.fileExists(atPath: Self.shots.appendingPathComponent("talk-page.png").path))
        #expect(FileManager.default.fileExists(atPath: Self.shots.appendingPathComponent("console.png").path))
    }

    @Test("a console token: the right one opens the pages, a wrong or missing one is refused (401) in the browser")
    func tokenRefused() throws {
        guard Self.requireBrowser() else { return }
        let dir = tempDir()
        defer { try? FileManager.default.removeItem(at: dir) }
        let (server, port) = try ServeTests.start(extra: "console: { token: \"${CONSOLE_TEST_TOKEN:-t0ken-for-tests}\" }", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wrong = try Self.drive(["page", "http://127.0.0.1:\(port)/console?token=not-the-token", Self.shots.path, "console-wrong-token.png"])
        #expect((wrong["text"] as? String ?? "").contains("wrong token"), "\(wrong)")
        let right = try Self.drive(["page", "http://127.0.0.1:\(port)/console?token=t0ken-for-tests", Self.shots.path, "console-token.png"])
        #expect(right["title"] as? String == "voicepipe — console", "\(right)")
        #expect(try ServeTests.http(port, "/").status == 401)
        #expect(try ServeTests.http(port, "/console/stream?token=nope").status == 401)
        #expect(try ServeTests.http(port, "/talk/routes.json?token=t0ken-for-tests").body.contains("\"raw\""))
        // The page files carry no data: served to anyone.
        #expect(try ServeTests.http(port, "/static/talk.js").status == 200)
    }

    @Test("voicepipe run --console: the console shows the running graph with frames on its edges; beyond loopback it needs a token")
    func runConsole() throws {
        guard Self.requireBrowser() else { return }
        let port = ServeTests.freePort()
        // The file loops: speech keeps crossing the edges however long the browser takes to start and connect
        // (the level is measured only while the console watches; a file played once could be over by then).
        let run = try Running(voicepipeBinary, ["run", "--quiet", "--console", "127.0.0.1:\(port)", "--set", "mic.realtime=true",
                                                "--set", "mic.loop=true", "pipelines/recognizer-file.yaml"], environment: ["INPUT": Self.sentences])
        defer { run.signal(SIGINT); _ = run.wait(timeout: 20) }
        for _ in 0..<100 where (try? ServeTests.http(port, "/console/sessions.json").status) != 200 { usleep(100_000) }
        let result = try Self.drive(["console", "http://127.0.0.1:\(port)/console", Self.shots.path, "run-console.png"])
        #expect(result["sessions"] as? [String] == ["recognizer-file#0"], "\(result)")
        #expect(result["nodes"] as? [String] == ["mic", "volume", "vad", "slicer", "asr", "out"], "\(result)")
        let sent = result["edge_sent"] as? [Int] ?? []
        #expect(sent.count == 6 && sent.prefix(4).allSatisfy { $0 > 0 }, "edge frame counts \(sent)")
        // Watched, the audio edges measure their level: speech is in the file.
        #expect((result["edge_peak"] as? [Double] ?? []).contains { $0 > 0.01 }, "audio peaks \(result["edge_peak"] ?? "none")")
        let open = try voicepipe(["run", "--console", "0.0.0.0:\(port + 1)", "pipelines/recognizer-file.yaml"], environment: ["VOICEPIPE_CONSOLE_TOKEN": ""])
        #expect(open.status != 0 && open.stderr.contains("VOICEPIPE_CONSOLE_TOKEN"), "\(open.stderr)")
    }
}
