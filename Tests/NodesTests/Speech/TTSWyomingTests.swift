import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// The Wyoming TTS test server (`Tests/Fixtures/wyoming_tts_server.py`, on the `wyoming` package
/// of `.deps/venv`) as a child process: it speaks with the `espeak-ng` or `flite` command and
/// streams the audio as `audio-chunk` events.
final class WyomingTTSTestServer: @unchecked Sendable {
    let process: Process
    let port: Int
    private let stderr: PipeReader

    /// Starts the server on a free port with `flags`; returns once it listens.
    init(_ flags: [String] = []) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try WyomingTestServer.python())
        p.arguments = [FileManager.default.currentDirectoryPath + "/Tests/Fixtures/wyoming_tts_server.py", "--uri", "tcp://127.0.0.1:0"] + flags
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        process = p
        stderr = PipeReader(err.fileHandleForReading)
        var line = Data()
        let handle = out.fileHandleForReading
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("PORT "), let n = Int(text.dropFirst(5).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            p.terminate()
            throw NodeError("wyoming_server", "the Wyoming TTS test server did not start: \(text) \(String(decoding: stderr.wait(), as: UTF8.self))")
        }
        port = n
    }

    var uri: String { "tcp://127.0.0.1:\(port)" }

    /// Stops the server and returns its log (one line per event).
    @discardableResult
    func stop() -> String {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        return String(decoding: stderr.wait(), as: UTF8.self)
    }

    deinit { if process.isRunning { process.terminate() } }
}

/// `tts` with `engine: wyoming` against a real Wyoming TTS server.
@Suite("TTS Wyoming", .serialized)
struct TTSWyomingTests {
    static func wyoming(_ server: WyomingTTSTestServer, _ extra: [String: ParamValue] = [:]) -> [String: ParamValue] {
        ["engine": "wyoming", "uri": .string(server.uri)].merging(extra) { $1 }
    }

    @Test("a Wyoming server's espeak-ng speech comes out as 16 kHz frames, with the voice asked for")
    func speaks() async throws {
        let server = try WyomingTTSTestServer()
        let h = try await TTSTests.speak([TTSTests.fox], Self.wyoming(server, ["voice": "en-us"]))
        let log = server.stop()
        // espeak-ng's 22050 Hz, converted; about 2.5 s for the sentence.
        try TTSTests.checkSpoken(h, text: TTSTests.fox, seconds: 1.5...5)
        #expect(log.contains("recv synthesize text='The quick brown fox jumps over the lazy dog.' voice={'name': 'en-us'}"), "\(log)")
        #expect(log.contains("send audio-chunk channels=1 rate=22050"), "\(log)")
    }

    @Test("each sentence is one synthesize; without voice the request names none")
    func sentences() async throws {
        let server = try WyomingTTSTestServer()
        let text = "Good morning. The kitchen lights are on."
        let h = try await TTSTests.speak([text], Self.wyoming(server))
        let log = server.stop()
        try TTSTests.checkSpoken(h, text: text, seconds: 2...7)
        let requests = log.split(separator: "\n").filter { $0.contains("recv synthesize") }
        #expect(requests.count == 2, "\(requests)")
        #expect(requests.first?.hasSuffix("recv synthesize text='Good morning.'") == true, "\(requests)")
        #expect(requests.last?.hasSuffix("recv synthesize text='The kitchen lights are on.'") == true, "\(requests)")
    }

    @Test("chunks are played as they arrive: the first frame leaves long before the server's last chunk")
    func streams() async throws {
        // 100 ms chunks, each sent 150 ms after the previous: the server is slower than real time.
        let server = try WyomingTTSTestServer(["--chunk-delay-ms", "150"])
        defer { server.stop() }
        let h = try NodeHarness(TTSNode.descriptor, parameters: Self.wyoming(server))
        let started = ContinuousClock.now
        try await h.run(timeout: .seconds(60)) { h in
            h.send(.text(TTSTests.fox), to: "text")
            h.finish("text")
        }
        let entries = h.output().entries
        let first = try #require(entries.first).arrival - started, last = try #require(entries.last).arrival - started
        // About 25 chunks at 150 ms: the last comes after some 3.5 s, the first after one chunk.
        #expect(last > .seconds(2.5), "\(last)")
        #expect(first < .seconds(1), "first frame after \(first): the sentence was held back until its end")
        #expect(h.events(named: "error").isEmpty)
    }

    @Test("what the server says, pocketsphinx recognizes: flite behind Wyoming -> asr")
    func roundTrip() async throws {
        let server = try WyomingTTSTestServer(["--engine", "flite"])
        defer { server.stop() }
        let sentences = [
            "The weather is nice today.",
            "Please turn on the lights in the kitchen.",
            "I would like a cup of coffee.",
            "We need more information about the project.",
        ]
        let yaml = """
        version: 1
        name: tts-wyoming-asr
        nodes:
          texts: { type: texts }
          tts: { type: tts, engine: wyoming, uri: "\(server.uri)", voice: slt }
          asr: { type: asr, engine: pocketsphinx }
        links:
          - texts -> tts -> asr
        """
        let events = try await runGraph(yaml, registry: TTSTests.registry(texts: sentences))
        #expect(events.named("error").isEmpty, "\(events.named("error"))")
        #expect(events.named("tts_end").count == sentences.count)
        #expect(events.finalTexts.count == sentences.count, "\(events.finalTexts)")
        let heard = events.finalTexts.joined(separator: " ")
        let wer = Speech.wordErrorRate(reference: sentences.joined(separator: " "), hypothesis: heard)
        #expect(wer <= 0.15, "WER \(wer): \(heard)")
    }

    // MARK: Errors

    /// The one error event of a run, its code and message.
    static func onlyError(_ h: NodeHarness, sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> (code: String, message: String) {
        let errors = h.events(named: "error")
        #expect(errors.count == 1, "\(errors)", sourceLocation: sourceLocation)
        let e = try #require(errors.first, sourceLocation: sourceLocation)
        return (e["code"]?.stringValue ?? "", e["message"]?.stringValue ?? "")
    }

    @Test("an unreachable server is an error event naming the uri, and the node goes on")
    func unreachable() async throws {
        // A port nothing listens on: bound, then closed.
        let server = try WyomingTTSTestServer()
        let uri = server.uri
        server.stop()
        let h = try await TTSTests.speak(["Hello there.", "Anyone home?"], ["engine": "wyoming", "uri": .string(uri)])
        let errors = h.events(named: "error")
        #expect(errors.count == 2, "\(errors)")
        #expect(errors.allSatisfy { $0["code"]?.stringValue == "wyoming_unreachable" })
        #expect(errors.allSatisfy { ($0["message"]?.stringValue ?? "").contains("cannot connect to the Wyoming server \(uri)") }, "\(errors)")
        #expect(h.output().audio.isEmpty)
        #expect(h.events(named: "tts_end").count == 2)
    }

    @Test("an error event of the server is reported with its text and code")
    func serverError() async throws {
        let server = try WyomingTTSTestServer(["--error-on-synthesize"])
        let h = try await TTSTests.speak(["Say nothing."], Self.wyoming(server))
        server.stop()
        let (code, message) = try Self.onlyError(h)
        #expect(code == "server_error")
        #expect(message.contains(server.uri) && message.contains("refusing to say 'Say nothing.'") && message.contains("(synthesis-refused)"), "\(message)")
        #expect(h.output().audio.isEmpty)
    }

    @Test("a server closing the connection mid-sentence: the audio so far is played, the error says how much")
    func closedMidSentence() async throws {
        let server = try WyomingTTSTestServer(["--close-after-chunks", "5"])
        let h = try await TTSTests.speak([TTSTests.fox], Self.wyoming(server))
        server.stop()
        let (code, message) = try Self.onlyError(h)
        #expect(code == "wyoming_disconnected")
        #expect(message.contains("\(server.uri) closed the connection in the middle of \"The quick brown fox") && message.contains("after 500 ms of audio"),
                "\(message)")
        // Five 100 ms chunks reached the output: 500 ms at 16 kHz (the converter may hold a few samples).
        let seconds = Double(h.output().samples.count) / 16000
        #expect(seconds > 0.45 && seconds < 0.55, "\(seconds) s")
    }

    @Test("a server that never answers times out after timeout_ms")
    func silent() async throws {
        let server = try WyomingTTSTestServer(["--silent"])
        defer { server.stop() }
        let started = ContinuousClock.now
        let h = try await TTSTests.speak(["Hello?"], Self.wyoming(server, ["timeout_ms": 500]))
        let elapsed = ContinuousClock.now - started
        let (code, message) = try Self.onlyError(h)
        #expect(code == "wyoming_timeout")
        #expect(message.contains("\(server.uri) sent nothing for 0.5 seconds"), "\(message)")
        #expect(elapsed < .seconds(5), "\(elapsed)")
    }

    @Test("audio that is not 16-bit is refused, naming its width", arguments: [(1, "8-bit"), (4, "32-bit")])
    func width(case c: (Int, String)) async throws {
        let server = try WyomingTTSTestServer(["--width", "\(c.0)"])
        let h = try await TTSTests.speak(["Hello there."], Self.wyoming(server))
        server.stop()
        let (code, message) = try Self.onlyError(h)
        #expect(code == "wyoming_audio_format")
        #expect(message.contains("sent \(c.1) audio (width \(c.0)); only 16-bit PCM (width 2)"), "\(message)")
        #expect(h.output().audio.isEmpty)
    }

    // MARK: Validation

    @Test("uri is required and must be tcp://HOST:PORT")
    func validation() throws {
        #expect {
            _ = try TTSNode.descriptor.configuration(["engine": "wyoming"])
        } throws: { "\($0)".contains("engine wyoming needs uri: tcp://HOST:PORT") }
        for bad in ["http://127.0.0.1:10200", "tcp://127.0.0.1", "tcp://:10200", "unix:///tmp/tts.sock", "tcp://host:99999"] {
            #expect(throws: (any Error).self, "\(bad)") { _ = try TTSNode.descriptor.configuration(["engine": "wyoming", "uri": .string(bad)]) }
        }
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["engine": "wyoming", "uri": "tcp://[::1]:10200", "voice": "en_US-lessac-medium"]) }
        // The flite voice check does not apply to a Wyoming server's voices.
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["engine": "wyoming", "uri": "tcp://tts.local:10200", "voice": "anything"]) }
    }
}
