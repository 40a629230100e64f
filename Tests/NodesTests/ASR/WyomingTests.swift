import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes
import Wyoming

@Suite("Wyoming protocol")
struct WyomingProtocolTests {
    struct AudioData: Decodable { var rate: Int; var width: Int; var channels: Int }

    @Test func eventsSurviveAnySplitOfTheStream() throws {
        let events = [
            WyomingEvent(type: "transcribe", data: ["language": "en"]),
            WyomingEvent(type: "audio-start", data: ["rate": 16000, "width": 2, "channels": 1]),
            WyomingEvent(type: "audio-chunk", data: ["rate": 16000, "width": 2, "channels": 1], payload: Array(0..<200).map { UInt8($0) }),
            WyomingEvent(type: "audio-stop"),
        ]
        let wire = events.flatMap { $0.encoded() }
        for step in [1, 2, 3, 7, 64, wire.count] {
            var d = WyomingDecoder()
            var got: [WyomingEvent] = []
            var i = 0
            while i < wire.count { got += try d.push(wire[i..<min(i + step, wire.count)]); i += step }
            #expect(got.map(\.type) == events.map(\.type), "step \(step)")
            #expect(got.map(\.payload) == events.map(\.payload))
            #expect(got[0].decode(WyomingText.self)?.language == "en")
            #expect(got[1].decode(AudioData.self)?.rate == 16000)
        }
    }

    @Test func inlineDataIsMergedWithTheDataBlock() throws {
        var d = WyomingDecoder()
        let header = #"{"type":"transcript","data":{"text":"inline","language":"en"},"data_length":16}"#
        let got = try d.push(Array((header + "\n" + #"{"text":"block"}"#).utf8))
        #expect(got.count == 1)
        #expect(got[0].decode(WyomingText.self) == (try? JSONDecoder().decode(WyomingText.self, from: Data(#"{"text":"block","language":"en"}"#.utf8))))
        // A field of the wrong type is nil without losing the others.
        var d2 = WyomingDecoder()
        let odd = try d2.push(Array(#"{"type":"transcript","data":{"text":42,"language":"en"}}"#.utf8) + [10])
        #expect(odd[0].decode(WyomingText.self)?.text == nil && odd[0].decode(WyomingText.self)?.language == "en")
        // A header with nothing else, and null fields, are fine.
        #expect(try d.push(Array(#"{"type":"transcript-stop","data":null,"payload_length":null}"#.utf8) + [10]).map(\.type) == ["transcript-stop"])
    }

    @Test(arguments: [
        #"not json"#, #"{"data":{}}"#, #"{"type":"x","data_length":-1}"#, #"{"type":"x","payload_length":1e30}"#,
        #"{"type":"x","payload_length":99999999999}"#, #"{"type":"x","data":[1]}"#, #"{"type":"x","data_length":"3"}"#,
    ])
    func malformedHeadersAreErrors(header: String) {
        var d = WyomingDecoder()
        #expect(throws: WyomingProtocolError.self) { _ = try d.push(Array((header + "\n").utf8)) }
    }

    @Test func anEndlessHeaderLineIsRefused() {
        var d = WyomingDecoder()
        #expect(throws: WyomingProtocolError.self) {
            for _ in 0..<100 { _ = try d.push([UInt8](repeating: UInt8(ascii: "a"), count: 1000)) }
        }
    }

    @Test func addresses() throws {
        #expect(try WyomingAddress.parse("tcp://127.0.0.1:10300").get() == .tcp(host: "127.0.0.1", port: 10300))
        #expect(try WyomingAddress.parse("tcp://[::1]:10300").get() == .tcp(host: "::1", port: 10300))
        #expect(try WyomingAddress.parse("unix:///run/whisper.sock").get() == .unix(path: "/run/whisper.sock"))
        for bad in ["http://x:1", "tcp://host", "tcp://:80", "tcp://h:0", "tcp://h:70000", "tcp://[::1]10300", "unix://"] {
            #expect((try? WyomingAddress.parse(bad).get()) == nil, "\(bad)")
        }
    }
}

@Suite("Wyoming ASR engine", .serialized)
struct WyomingEngineTests {
    /// file-source -> vad -> asr (engine wyoming).
    static func graph(_ wav: String, asr: String) -> String {
        """
        version: 1
        name: wyoming-test
        nodes:
          src: { type: file-source, path: "\(wav)" }
          vad: { type: vad, stop_ms: 400, pre_roll_ms: 200 }
          asr: { type: asr, engine: wyoming, \(asr) }
        links:
          - src -> vad -> asr
        """
    }

    /// Two tones between silences: the server names each tone, so the audio path is checked.
    static func tones() throws -> String {
        try toneWAV([(0, 0.5), (440, 1.0), (0, 1.0), (1000, 0.8), (0, 1.0)])
    }

    static func samples(_ text: String) -> Int? {
        text.split(separator: " ").first { $0.hasPrefix("samples=") }.flatMap { Int($0.dropFirst(8)) }
    }

    @Test func recognizesEachUtteranceFromTheAudioSent() async throws {
        let server = try WyomingTestServer()
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\", language: en"))
        let log = server.stop()
        #expect(events.named("error").isEmpty, "\(events.named("error"))")
        let finals = events.named("transcript").filter { $0["final"]?.boolValue == true }
        #expect(finals.compactMap { $0["text"]?.stringValue }.map { $0.split(separator: " ").dropFirst().joined(separator: " ") }
                == ["rate=16000 tone=440", "rate=16000 tone=1000"], "\(finals)")
        // Every sample of each utterance reached the server: what it counted is the utterance's length.
        for f in finals {
            let text = try #require(f["text"]?.stringValue)
            let n = try #require(Self.samples(text))
            let end = try #require(f["end_ms"]?.intValue), start = try #require(f["start_ms"]?.intValue)
            let span = end - start
            #expect(abs(n - Int(span) * 16) <= 16, "\(text) for \(span) ms")
        }
        // One connection for both utterances, language sent with transcribe.
        #expect(log.components(separatedBy: "recv transcribe").count - 1 == 2, "\(log)")
        #expect(log.contains("recv transcribe language='en'"), "\(log)")
    }

    @Test func streamingServersGivePartialResultsBeforeTheFinal() async throws {
        let server = try WyomingTestServer(["--streaming", "--chunk-every", "10"])
        defer { server.stop() }
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\""))
        let transcripts = events.named("transcript")
        let partials = transcripts.filter { $0["final"]?.boolValue == false }
        #expect(partials.count >= 4, "\(transcripts)")
        // Partials of the first utterance come before its final, and grow.
        let firstFinal = try #require(transcripts.firstIndex { $0["final"]?.boolValue == true })
        let early = transcripts[..<firstFinal].compactMap { $0["text"]?.stringValue }
        #expect(!early.isEmpty)
        #expect(events.finalTexts.count == 2 && events.finalTexts.allSatisfy { $0.contains("tone=") })
    }

    @Test func aServerGoneMidUtteranceGetsTheWholeUtteranceAgain() async throws {
        // The server drops the connection after the 10th chunk of every utterance: the live stream
        // (20 ms chunks) breaks, the resend after reconnecting (chunks of up to a second) gets through.
        let server = try WyomingTestServer(["--fail-after-chunks", "10"])
        defer { server.stop() }
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\""))
        let codes = events.named("error").compactMap { $0["code"]?.stringValue }
        #expect(codes.contains("wyoming_disconnected") || codes.contains("wyoming_unreachable"), "\(codes)")
        #expect(!codes.contains("wyoming_failed"))
        #expect(events.finalTexts.map { $0.split(separator: " ").last.map(String.init) ?? "" } == ["tone=440", "tone=1000"])
        // The resent utterance is the whole utterance, not its tail.
        for f in events.named("transcript").filter({ $0["final"]?.boolValue == true }) {
            let text = try #require(f["text"]?.stringValue)
            let n = try #require(Self.samples(text))
            let end = try #require(f["end_ms"]?.intValue), start = try #require(f["start_ms"]?.intValue)
            let span = end - start
            #expect(abs(n - Int(span) * 16) <= 16)
        }
        // Errors name the utterance.
        #expect(events.named("error").allSatisfy { $0["voice_id"]?.stringValue != nil })
    }

    @Test func aServerKilledAndRestartedMidUtteranceLosesNothing() async throws {
        // Audio paced at 1x: the server is killed 1 s in (inside the first tone) and comes back on the
        // same port 0.6 s later; the engine reports it, reconnects and resends the utterance.
        let first = try WyomingTestServer()
        let port = first.port
        let graph = Self.graph(try Self.tones(), asr: "uri: \"tcp://127.0.0.1:\(port)\"")
            .replacingOccurrences(of: "type: file-source,", with: "type: file-source, realtime: true,")
        let pipeline = try Pipeline(yaml: graph, registry: BuiltinNodes.registry())
        let run = Task { try await runPipeline(pipeline) }
        try await Task.sleep(for: .milliseconds(1000))
        first.kill()
        try await Task.sleep(for: .milliseconds(600))
        let second = try WyomingTestServer(port: port)
        defer { second.stop() }
        let events = try await run.value
        let codes = events.named("error").compactMap { $0["code"]?.stringValue }
        #expect(codes.contains("wyoming_disconnected"), "\(codes)")
        #expect(!codes.contains("wyoming_failed"))
        #expect(events.finalTexts.map { $0.split(separator: " ").last.map(String.init) ?? "" } == ["tone=440", "tone=1000"], "\(events.finalTexts)")
    }

    @Test func aRefusedConnectionIsReportedRetriedAndGivenUpWithoutStoppingThePipeline() async throws {
        let port = try RTPTest.freePort()   // nothing listens there
        let started = ContinuousClock.now
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"tcp://127.0.0.1:\(port)\", reconnect_attempts: 2"))
        let codes = events.named("error").compactMap { $0["code"]?.stringValue }
        // Per utterance: two retries announced, then given up; the utterance still ends with a final.
        #expect(codes.filter { $0 == "wyoming_unreachable" }.count == 4, "\(codes)")
        #expect(codes.filter { $0 == "wyoming_failed" }.count == 2)
        #expect(events.finalTexts == ["", ""])
        #expect(events.named("utterance_end").count == 2)
        #expect(ContinuousClock.now - started < .seconds(20))
        let message = try #require(events.named("error").first?["message"]?.stringValue)
        #expect(message.contains("127.0.0.1:\(port)"), "\(message)")
    }

    @Test func aServerThatNeverAnswersTimesOutPerUtterance() async throws {
        // The server answers 3 s after the audio; the node waits at most final_timeout_ms.
        let server = try WyomingTestServer(["--delay-ms", "3000"])
        defer { server.stop() }
        let started = ContinuousClock.now
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\", final_timeout_ms: 400"))
        let codes = events.named("error").compactMap { $0["code"]?.stringValue }
        #expect(codes == ["final_timeout", "final_timeout"], "\(codes)")
        #expect(events.finalTexts == ["", ""])
        #expect(events.named("utterance_end").count == 2)
        #expect(ContinuousClock.now - started < .seconds(4), "the node waited for the late answers")
    }

    @Test func aServerErrorEndsTheUtteranceWithoutRetrying() async throws {
        let server = try WyomingTestServer(["--error-on-transcribe"])
        defer { server.stop() }
        let events = try await runGraph(Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\""))
        let errors = events.named("error")
        #expect(errors.count == 2 && errors.allSatisfy { $0["code"]?.stringValue == "server_error" }, "\(errors)")
        #expect(errors.first?["message"]?.stringValue?.contains("transcribe-rejected") == true)
        #expect(events.finalTexts == ["", ""])
    }

    @Test func aServerThatClosesAfterEachTranscriptGetsANewConnection() async throws {
        let server = try WyomingTestServer(["--close-after-transcript"])
        defer { server.stop() }
        let graph = Self.graph(try Self.tones(), asr: "uri: \"\(server.uri)\"")
        let pipeline = try Pipeline(yaml: graph, registry: BuiltinNodes.registry())
        let events = try await runPipeline(pipeline)
        #expect(events.named("error").isEmpty, "\(events.named("error"))")
        #expect(events.finalTexts.count == 2 && events.finalTexts.allSatisfy { $0.contains("tone=") })
        #expect(pipeline.nodeStats.first { $0.id == "asr" }?.counters["connections"] == 2)
    }

    @Test func validationNamesAMissingOrBadURI() throws {
        for (asr, expected) in [("language: en", "needs uri"), ("uri: \"http://x:1\"", "tcp://HOST:PORT")] {
            let yaml = Self.graph("/dev/null", asr: asr)
            do {
                _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
                Issue.record("\(asr) was accepted")
            } catch {
                #expect("\(error)".contains(expected), "\(error)")
            }
        }
    }
}
