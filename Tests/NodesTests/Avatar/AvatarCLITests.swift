import Foundation
import Testing
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes

/// Runs the built `voicepipe` binary against the local server.
@Suite("voicepipe run / voicepipe avatar against a local stream-service server")
struct AvatarCLITests {
    /// Starts the binary; stdout and stderr go to files.
    static func launch(_ args: [String], server: IVHServer) throws -> (Process, out: String, err: String) {
        let binary = IVHTest.binary
        guard FileManager.default.isExecutableFile(atPath: binary) else {
            throw TestCAError(message: "\(binary) not built; run swift build first")
        }
        let out = temporaryPath("stdout.txt"), err = temporaryPath("stderr.txt")
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: binary)
        p.arguments = args
        var env = ProcessInfo.processInfo.environment
        env["IVH_APPKEY"] = server.options.appkey
        env["IVH_ACCESS_TOKEN"] = server.options.accessToken
        p.environment = env
        p.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        p.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try p.run()
        return (p, out, err)
    }

    /// Waits for the process to exit (kills it after `timeout`); returns its status.
    static func finish(_ p: Process, timeout: Duration = .seconds(20)) async -> Int32 {
        let end = ContinuousClock.now + timeout
        while p.isRunning && ContinuousClock.now < end { try? await Task.sleep(for: .milliseconds(20)) }
        if p.isRunning { p.terminate(); p.waitUntilExit() }
        return p.terminationStatus
    }

    static func read(_ path: String) -> String { (try? String(contentsOfFile: path, encoding: .utf8)) ?? "" }

    @Test func sigintDuringASessionStillClosesIt() async throws {
        let server = IVHServer()
        try await server.start()
        let graph = temporaryPath("avatar-sigint.yaml")
        try """
        version: 1
        name: avatar-sigint
        nodes:
          tone: { type: tone-source, rate: 16000, channels: 1, frame_ms: 20, realtime: true }
          avatar: { type: avatar, base_url: "http://127.0.0.1:1", driver_type: voice, user_id: sigint-test }
          out: { type: jsonl-sink, path: "-" }
        links:
          - tone -> avatar
          - avatar.events -> out
        """.write(toFile: graph, atomically: true, encoding: .utf8)
        let (p, out, err) = try Self.launch(["run", graph, "--set", "avatar.base_url=\(server.baseURL)"], server: server)
        let audio: @Sendable () -> Int = { server.commands.filter { $0.command == "SEND_AUDIO" }.count }
        let running = await server.wait(timeout: .seconds(20)) { audio() >= 2 }
        #expect(running, "stderr: \(Self.read(err))")
        kill(p.processIdentifier, SIGINT)
        let status = await Self.finish(p)
        #expect(status == 0, "stderr: \(Self.read(err))")
        let id = try #require(server.created.first)
        #expect(server.created.count == 1)
        #expect(server.closes(id) == 1)
        #expect(server.openSessions.isEmpty)
        // The utterance was ended before closing.
        #expect(server.commands.last { $0.command == "SEND_AUDIO" }?.isFinal == true)
        let lines = Self.read(out)
        #expect(lines.contains("\"event\":\"avatar_session\""))
        #expect(lines.contains("\"state\":\"closed\""))
        #expect(!lines.contains(server.options.accessToken) && !Self.read(err).contains(server.options.accessToken))
        await server.stop()
    }

    @Test func operatorCommandsListShowAndClose() async throws {
        let server = IVHServer()
        try await server.start()
        let client = try IVHClient(IVHConfiguration(baseURL: server.baseURL, appkey: server.options.appkey, accessToken: server.options.accessToken))
        let s = try await client.newSession(.init(userID: "kiosk", driverType: .text))
        try await client.startSession(s.id)
        try await client.shutdown()
        let base = ["--base-url", server.baseURL]

        var (p, out, err) = try Self.launch(["avatar", "sessions", "--json"] + base, server: server)
        #expect(await Self.finish(p) == 0, "stderr: \(Self.read(err))")
        let list = try #require(try JSONSerialization.jsonObject(with: Data(Self.read(out).utf8)) as? [[String: Any]])
        #expect(list.map { $0["session_id"] as? String } == [s.id])
        #expect(list.first?["user_id"] as? String == "kiosk")

        (p, out, err) = try Self.launch(["avatar", "status", s.id] + base, server: server)
        #expect(await Self.finish(p) == 0, "stderr: \(Self.read(err))")
        #expect(Self.read(out).contains("running"))

        (p, out, err) = try Self.launch(["avatar", "layout", s.id, "--space", #"{"ImagePosition": 0.2, "ImagePositionVertical": -0.1, "ImageZoom": 1.5}"#] + base, server: server)
        #expect(await Self.finish(p) == 0, "stderr: \(Self.read(err))")
        #expect(server.calls.contains { $0.operation == "configsession" && $0.accepted })

        (p, out, err) = try Self.launch(["avatar", "config"] + base, server: server)
        #expect(await Self.finish(p) == 0, "stderr: \(Self.read(err))")
        #expect(Self.read(out).contains("Protocols"))

        (p, out, err) = try Self.launch(["avatar", "close", s.id] + base, server: server)
        #expect(await Self.finish(p) == 0, "stderr: \(Self.read(err))")
        #expect(server.closes(s.id) == 1)

        // Closing it again: exit 1 with the code's documented meaning.
        (p, out, err) = try Self.launch(["avatar", "close", s.id] + base, server: server)
        #expect(await Self.finish(p) == 1)
        #expect(Self.read(err).contains("110006"))
        #expect(Self.read(err).contains("no such session"))

        // A wrong token: exit 1, unauthorized.
        (p, out, err) = try Self.launch(["avatar", "sessions", "--access-token", "wrong"] + base, server: server)
        #expect(await Self.finish(p) == 1)
        #expect(Self.read(err).contains("100005"))
        await server.stop()
    }
}
