import Foundation
import Logging
import PipelineCore
import Testing
@testable import BoundedTransport
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes
@testable import TencentASR
import VoicepipeTesting

@Suite("Tencent ASR: signature, request and state machines")
struct TencentASRUnitTests {
    /// The signed text of the published algorithm, for a fixed request.
    static let vectorText = "asr.cloud.tencent.com/asr/v2/1259228442?engine_model_type=16k_zh&expired=1592380492&needvad=1"
        + "&nonce=1592294092&secretid=AKIDtestsecretid0000000000000000&timestamp=1592294092&voice_format=1"
        + "&voice_id=c64385ee-3e5c-4fc5-bbfd-7c71addb35b0"

    @Test func signatureMatchesAHandComputedVector() throws {
        let config = TencentASRConfiguration(appID: "1259228442", secretID: TencentTestKeys.secretID, secretKey: TencentTestKeys.secretKey)
        let request = config.request(voiceID: "c64385ee-3e5c-4fc5-bbfd-7c71addb35b0", timestamp: 1592294092, nonce: 1592294092)
        #expect(request.signedText == Self.vectorText)
        // Computed once with: printf '%s' "$TEXT" | openssl dgst -sha1 -hmac "$KEY" -binary | base64
        let fixed = "nCIyYcZadzjNwxpNQEhUahfDkTU="
        #expect(TencentSignature.sign(request.signedText, secretKey: TencentTestKeys.secretKey) == fixed)
        #expect(request.url.hasSuffix("&signature=" + TencentSignature.percentEncode(fixed)))
        #expect(request.url.contains("%2B") || !fixed.contains("+"))
    }

    @Test(.enabled(if: haveTool("openssl")))
    func signatureMatchesOpenSSL() throws {
        // An independent computation of HMAC-SHA1 + base64 over text with characters that need care.
        let text = "127.0.0.1:9001/asr/v2/1?a=1&b=x y&secretid=k/+="
        let key = "s3cr3t+/=key"
        let r = try shell("/bin/sh", ["-c", "printf '%s' \"$0\" | openssl dgst -sha1 -hmac \"$1\" -binary | base64", text, key])
        #expect(r.status == 0)
        let expected = String(decoding: r.output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        #expect(!expected.isEmpty)
        #expect(TencentSignature.sign(text, secretKey: key) == expected)
    }

    @Test func requestCarriesEveryParameterAndRedactsSecrets() throws {
        var config = TencentASRConfiguration(appID: "1300000000", secretID: "AKIDsecretvalue", secretKey: "KEYsecretvalue",
                                             endpoint: TencentEndpoint("ws://127.0.0.1:9001")!, engineModelType: "8k_zh",
                                             extraParameters: ["vad_silence_time": "800", "hotword_id": "abc def"])
        config.extraParameters["needvad"] = "0"
        let request = config.request(voiceID: "v-1", timestamp: 1000, nonce: 42)
        #expect(request.hostHeader == "127.0.0.1:9001")
        #expect(request.url.hasPrefix("ws://127.0.0.1:9001/asr/v2/1300000000?engine_model_type=8k_zh&expired=87400&hotword_id=abc%20def&needvad=0&nonce=42&secretid=AKIDsecretvalue&timestamp=1000"))
        #expect(request.url.contains("&vad_silence_time=800&voice_format=1&voice_id=v-1&signature="))
        #expect(request.signedText.hasPrefix("127.0.0.1/asr/v2/1300000000?engine_model_type=8k_zh&"))
        #expect(request.signedText.contains("hotword_id=abc def"))
        #expect(!request.redactedURL.contains("AKIDsecretvalue"))
        #expect(!request.redactedURL.contains(TencentSignature.percentEncode(TencentSignature.sign(request.signedText, secretKey: "KEYsecretvalue"))))
        #expect(request.redactedURL.contains("secretid=%2A%2A%2A") && request.redactedURL.hasSuffix("signature=***"))
        // The server's independent check accepts it.
        let query = String(request.url.split(separator: "?", maxSplits: 1)[1])
        #expect(request.signedText.hasPrefix("127.0.0.1/asr/v2/"), "the port is not signed: \(request.signedText)")
        let check = TencentASRServer.expectedSignature(host: "127.0.0.1", path: request.path, rawQuery: query, secretKey: "KEYsecretvalue")
        #expect(check.given == check.signature)
    }

    @Test func endpointsParse() {
        #expect(TencentEndpoint("wss://asr.cloud.tencent.com") == .default)
        #expect(TencentEndpoint("ws://127.0.0.1:9001")?.hostHeader == "127.0.0.1:9001")
        #expect(TencentEndpoint("https://example.com/prefix/")?.pathPrefix == "/prefix")
        #expect(TencentEndpoint("https://example.com/prefix/")?.scheme == "wss")
        #expect(TencentEndpoint("ftp://x") == nil)
        #expect(TencentEndpoint("ws://host:99999") == nil)
        #expect(TencentEndpoint("ws://") == nil)
    }

    @Test func credentialsComeFromParametersOrEnvironmentAndAreNeverInErrors() throws {
        let config = NodeConfig(id: "asr", type: "asr", values: ["engine": .string("tencent"), "secret_key": .string("FROMYAML")])
        let env = ["TENCENTCLOUD_APPID": "125", "TENCENTCLOUD_SECRET_ID": "AKIDenv", "TENCENTCLOUD_SECRET_KEY": "ENVKEY"]
        let c = try TencentASRConfiguration(config: config, environment: env)
        #expect(c.appID == "125" && c.secretID == "AKIDenv" && c.secretKey == "FROMYAML")
        #expect(c.endpoint == .default && c.engineModelType == "16k_zh")
        do {
            _ = try TencentASRConfiguration(config: config, environment: [:])
            Issue.record("missing credentials accepted")
        } catch let e as NodeError {
            #expect(e.code == "missing_credentials")
            #expect(e.message.contains("app_id") && e.message.contains("secret_id") && !e.message.contains("secret_key"))
            #expect(!e.message.contains("FROMYAML"))
        }
        let bad = NodeConfig(id: "asr", type: "asr", values: ["endpoint": .string("tcp://x"), "engine_model_type": .string("zh"),
                                                             "params": .map(["voice_id": .string("x")])])
        #expect(TencentASRConfiguration.check(bad).count == 3)
    }

    @Test func messagesParse() throws {
        let m = try TencentServerMessage.parse(#"{"code":0,"message":"success","voice_id":"v","message_id":"v_1","result":{"slice_type":1,"index":2,"start_time":100,"end_time":900,"voice_text_str":"你好","word_size":0,"word_list":[]}}"#)
        #expect(m.result == TencentResult(sliceType: 1, index: 2, startTime: 100, endTime: 900, text: "你好"))
        #expect(!m.isFinal)
        #expect(try TencentServerMessage.parse(#"{"code":0,"message":"success","final":"1"}"#).isFinal)
        #expect(try TencentServerMessage.parse(#"{"code":4008,"message":"timeout"}"#).code == 4008)
        #expect(TencentServerMessage.isFatal(code: 4002) && !TencentServerMessage.isFatal(code: 4008))
    }

    @Test func backoffDoublesUpToTheLimitThenGivesUp() {
        var s = TencentReconnectState(policy: TencentReconnectPolicy(initialDelay: .milliseconds(100), maxDelay: .milliseconds(500), maxAttempts: 4))
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(100), attempt: 1))
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(200), attempt: 2))
        s.connected()   // an accepted handshake proves nothing yet
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(400), attempt: 3))
        s.progressed()  // a recognized utterance does
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(100), attempt: 1))
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(200), attempt: 2))
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(400), attempt: 3))
        #expect(s.connectionLost() == .reconnect(after: .milliseconds(500), attempt: 4))
        #expect(s.connectionLost() == .giveUp(attempts: 4))
    }

    @Test func reconnectionsAreBoundedOverAWindowEvenWithProgress() {
        var s = TencentReconnectState(policy: TencentReconnectPolicy(initialDelay: .milliseconds(10), maxDelay: .milliseconds(10), maxAttempts: 3))
        let limit = s.policy.maxPerWindow
        var given = 0
        for i in 0..<(limit + 5) {
            s.progressed()
            if case .giveUp = s.connectionLost(at: .seconds(i)) { given = i; break }
        }
        #expect(given == limit, "gave up at reconnection \(given), limit \(limit) per \(s.policy.window)")
        // Spread out beyond the window, the same number is fine.
        var t = TencentReconnectState(policy: s.policy)
        for i in 0..<(limit * 3) {
            t.progressed()
            if case .giveUp = t.connectionLost(at: .seconds(i * 30)) { Issue.record("gave up at \(i)"); break }
            if case .giveUp = t.connectionLost(at: .seconds(i * 30 + 1)) { Issue.record("gave up at \(i)"); break }
        }
    }

    /// What a hostile or broken server may put in a message: never taken for success, never a trap.
    @Test("malformed server messages are refused", arguments: [
        #"{"code":1e30,"message":"x"}"#, #"{"code":4002.5,"message":"x"}"#, #"{"code":"zero","message":"x"}"#, #"{"code":[],"message":"x"}"#,
        #"{"code":0,"result":{"slice_type":2,"index":0,"start_time":9223372036854775807,"end_time":1}}"#,
        #"{"code":0,"result":{"slice_type":2,"index":0,"start_time":0,"end_time":-5}}"#,
        #"{"code":0,"result":{"slice_type":2,"index":0,"start_time":0,"end_time":1e300}}"#,
        #"{"code":0,"result":{"slice_type":7,"index":0,"start_time":0,"end_time":1}}"#,
        #"{"code":0,"final":2.5}"#, "not json", "[]",
    ])
    func malformedMessages(text: String) {
        #expect(throws: (any Error).self) { try TencentServerMessage.parse(text) }
    }

    @Test func digitalHumanNumbersNeverTrap() {
        #expect(IVHJSON.int(1e30) == nil)
        #expect(IVHJSON.int(-Double.infinity) == nil)
        #expect(IVHJSON.int(Double.nan) == nil)
        #expect(IVHJSON.int(4.5) == nil)
        #expect(IVHJSON.int(110014.0) == 110014)
        #expect(IVHJSON.int("12") == 12)
        #expect(IVHPush.decode(#"{"Header":{"Code":1e30,"Message":"m"},"Payload":{"Type":1e300,"SpeechId":-1e200}}"#) != nil)
    }

    // Once, in a whole run, this waited for ever after its third reconnection (not reproduced in 30 runs alone);
    // the limit turns such a wait into a failure that names the test.
    @Test(.timeLimit(.minutes(1))) func aServerThatAcceptsThenAlwaysFailsIsGivenUpOn() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 2000, dropEveryAfterMs: 100))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        await #expect(throws: NodeError.self) {
            try await runTencentSession(.local(port: server.port, maxAttempts: 3), inputs: NumberedAudio.inputs(chunks: 40, realtime: false), log: log)
        }
        #expect(server.connections.count == 4, "the first connection and three attempts, not one per accepted handshake")
    }

    @Test func aListenerThatNeverAnswersTheHandshakeTimesOutAndCancelsPromptly() async throws {
        let listener = SilentListener()
        let port = listener.port
        let started = ContinuousClock.now
        await #expect(throws: BoundedWebSocket.HandshakeTimeout.self) {
            try await BoundedWebSocket.connect(url: "ws://127.0.0.1:\(port)/", configuration: .init(), tlsConfiguration: nil,
                                               handshakeTimeout: .milliseconds(500), logger: Logger(label: "test")) { _, _, _ in }
        }
        #expect(ContinuousClock.now - started < .seconds(10))
        // Cancelled before the upgrade: returns instead of waiting for ever.
        let idle = SilentListener()
        let idlePort = idle.port
        let task = Task {
            try await BoundedWebSocket.connect(url: "ws://127.0.0.1:\(idlePort)/", configuration: .init(), tlsConfiguration: nil,
                                               handshakeTimeout: .seconds(600), logger: Logger(label: "test")) { _, _, _ in }
        }
        // The connection is made (it waits in the listener's backlog), the upgrade is not answered.
        #expect(await eventually { idle.hasPendingConnection })
        task.cancel()
        let result = await task.result
        #expect((try? result.get()) == nil, "a cancelled connection attempt ends with an error")
    }

    @Test func backlogHoldsReplaysAndDropsTheOldestWhenFull() {
        var b = TencentAudioBacklog(capacity: 1000)
        for k in 0..<4 { b.append(.init(samples: [Int16](repeating: Int16(k), count: 200), mediaStart: Int64(k * 200))) }
        #expect(b.next()?.mediaStart == 0)
        #expect(b.next()?.connectionStart == 200)
        #expect(b.unconfirmedSamples == 400 && b.pendingSamples == 400)
        b.confirm(through: 200)                      // the server finished chunk 0
        #expect(b.unconfirmedSamples == 200)
        #expect(b.mediaPosition(connection: 250) == 250)
        // Dropped: chunk 1 (sent, unconfirmed) goes back in front of 2 and 3.
        #expect(b.connectionLost() == 0)
        #expect(b.pendingSamples == 600 && b.connectionPosition == 0)
        let replay = b.next()
        #expect(replay?.mediaStart == 200 && replay?.connectionStart == 0)
        #expect(b.mediaPosition(connection: 100) == 300)
        // Overflow: 600 pending+unconfirmed + 700 new > 1000: the oldest pending audio goes, the
        // unconfirmed chunk is forgotten first (it was sent already).
        let dropped = b.append(.init(samples: [Int16](repeating: 9, count: 700), mediaStart: 800))
        #expect(dropped == 100)
        #expect(b.droppedSamples == 100)
        #expect(b.pendingSamples == 1000)
        #expect(b.next()?.mediaStart == 500)         // chunk 2 lost its first 100 samples
    }

    @Test func backlogMapsGapsInMediaTime() {
        var b = TencentAudioBacklog(capacity: 10_000)
        b.append(.init(samples: [Int16](repeating: 0, count: 100), mediaStart: 0))
        b.append(.init(samples: [Int16](repeating: 0, count: 100), mediaStart: 1000))
        _ = b.next(); _ = b.next()
        #expect(b.mediaPosition(connection: 50) == 50)
        #expect(b.mediaPosition(connection: 150) == 1050)
    }
}

@Suite("Tencent ASR against a local server")
struct TencentASRServerTests {
    @Test func recognizesPacedAudioWithPartialsAndFinals() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 400))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        // 30 chunks (1.2 s) handed over at once: the client must pace them itself.
        try await runTencentSession(.local(port: server.port), inputs: NumberedAudio.inputs(chunks: 30, realtime: false), log: log)
        let lines = await log.lines
        let finals = await log.finals
        let c = server.connections
        #expect(c.count == 1)
        #expect(c.first?.signatureValid == true)
        #expect(c.first?.query["voice_format"] == "1" && c.first?.query["engine_model_type"] == "16k_zh")
        #expect(c.first?.endReceived == true)
        #expect(c.first?.audioSamples == 30 * 640)
        #expect(c.first?.maxMessageBytes == 1280)
        #expect(c.first?.paceViolations == 0, "audio ran \(c.first?.maxLeadMs ?? 0) ms ahead of real time")
        #expect(finals.map(\.text) == ["chunks 0-9", "chunks 10-19", "chunks 20-29"])
        #expect(finals.map(\.seq) == [0, 1, 2])
        #expect(finals.map(\.startMs) == [0, 400, 800])
        #expect(lines.contains { $0.hasPrefix("partial 0 chunks 0-") })
        // Well formed: start, partials, final, end per utterance.
        let kinds = lines.map { String($0.prefix(while: { $0 != " " })) }
        #expect(kinds.first == "start" && kinds.last == "end")
        #expect(kinds.filter { $0 == "start" }.count == 3 && kinds.filter { $0 == "end" }.count == 3)
        #expect(!kinds.contains("error"))
    }

    /// The service answers 4008 to a connection without audio for 15 s (1.5 s in this scaled
    /// copy of the protocol): a pause between utterances ends the connection cleanly instead, and
    /// the next audio opens a new one, without an error and without losing speech.
    @Test(arguments: [true, false])
    func aLongPauseEndsTheConnectionCleanlyInsteadOfTimingOut(idleEnd: Bool) async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 200, noAudioTimeoutMs: 1500))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        let counters = TestCounters()
        var config = TencentASRConfiguration.local(port: server.port)
        config.idleEnd = idleEnd ? .milliseconds(600) : .zero
        try await runTencentSession(config, inputs: NumberedAudio.inputs(chunks: 20, realtime: true, pause: (after: 10, ms: 2500)),
                                    log: log, counters: counters)
        let errors = await log.errors
        let c = server.connections
        if idleEnd {
            #expect(errors.isEmpty, "\(errors)")
            #expect(c.count == 2 && c.allSatisfy(\.endReceived), "\(c.map(\.endReceived))")
            #expect(counters["idle_ends"] == 1)
            #expect(NumberedAudio.covers(await log.finals, chunks: 20))
        } else {
            // Without it the service's timeout fires: what the client must avoid.
            #expect(errors.contains { $0.code == "server_error_4008" }, "\(errors)")
        }
    }

    @Test func wordTimingsReachTheTranscript() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 400))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        var config = TencentASRConfiguration.local(port: server.port)
        config.extraParameters["word_info"] = "1"
        try await runTencentSession(config, inputs: NumberedAudio.inputs(chunks: 20, realtime: false), log: log)
        let finals = await log.finals
        #expect(!finals.isEmpty)
        for f in finals where !f.text.isEmpty {
            #expect(f.words.map(\.word) == f.text.split(separator: " ").map(String.init), "\(f.words)")
            #expect(f.words.allSatisfy { $0.stable && $0.startMs >= f.startMs && $0.endMs <= f.endMs + 1 && $0.startMs <= $0.endMs }, "\(f)")
        }
        #expect(server.connections.first?.query["word_info"] == "1")
    }

    @Test func serviceOptionsAreCheckedParameters() throws {
        func problems(_ yaml: String) -> String {
            do {
                _ = try GraphValidator.validate(GraphLoader.parse("""
                    version: 1
                    nodes:
                      src: { type: tone-source, duration_ms: 100 }
                      asr: { type: asr, engine: tencent, \(yaml) }
                    links: [ "src -> asr" ]
                    """), registry: BuiltinNodes.registry())
                return ""
            } catch { return "\(error)" }
        }
        #expect(problems("filter_dirty: 2, filter_modal: 1, filter_punc: 1, convert_num_mode: 3, word_info: 2, vad_silence_time: 800, noise_threshold: -0.5, needvad: 1, hotword_list: \"腾讯云|10,ASR|100\", max_speak_time: 60000") == "")
        #expect(problems("filter_dirty: 3").contains("filter_dirty"))
        #expect(problems("vad_silence_time: 100").contains("vad_silence_time"))
        #expect(problems("noise_threshold: 2").contains("noise_threshold"))
        #expect(problems("convert_num_mode: 2").contains("convert_num_mode"))
        #expect(problems("hotword_list: \"a|12\"").contains("hotword_list"))
        #expect(problems("needvad: 0, vad_silence_time: 500").contains("needvad"))
        #expect(problems("word_info: 1, params: { word_info: 2 }").contains("give it once"))
        let c = try TencentASRConfiguration(parameters: ParameterDecoder.decode(TencentASREngine.Configuration.self, from: [
            "filter_punc": .int(1), "hotword_id": .string("h1"), "noise_threshold": .double(0.25), "convert_num_mode": .string("0"),
            "app_id": .string("1"), "secret_id": .string("s"), "secret_key": .string("k"), "idle_end_ms": .int(3000),
            "handshake_timeout_ms": .int(2500), "final_timeout_ms": .int(9000),
        ]), environment: [:])
        let query = c.request(voiceID: "v", timestamp: 1, nonce: 1).url
        #expect(query.contains("filter_punc=1") && query.contains("hotword_id=h1") && query.contains("noise_threshold=0.25") && query.contains("convert_num_mode=0"))
        #expect(c.idleEnd == .milliseconds(3000) && c.handshakeTimeout == .milliseconds(2500) && c.finalTimeout == .milliseconds(9000))
    }

    @Test func errorsThatARetryCannotFixAreFatal() {
        for code in [4001, 4002, 4003, 4004, 4005, 4007, 4010, 6001] { #expect(TencentServerMessage.isFatal(code: code), "\(code)") }
        for code in [4000, 4006, 4008, 4009, 5000, 5001, 5002] { #expect(!TencentServerMessage.isFatal(code: code), "\(code)") }
    }

    @Test func aBadSignatureIsRejectedWithTheDocumentedCode() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        await #expect(throws: NodeError.self) {
            try await runTencentSession(.local(port: server.port, secretKey: "wrong-key"), inputs: NumberedAudio.inputs(chunks: 5, realtime: false), log: log)
        }
        let errors = await log.errors
        #expect(errors.map(\.code) == ["server_error_4002"])
        #expect(errors.first?.message.contains("authentication") == true)
        #expect(errors.allSatisfy { !$0.message.contains(TencentTestKeys.secretID) && !$0.message.contains("wrong-key") })
        #expect(server.connections.count == 1 && server.connections[0].signatureValid == false)
        #expect(server.connections[0].sent.first?.contains("\"code\":4002") == true)
    }

    @Test func aServerErrorCodeIsReportedAndTheStreamGoesOn() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 400, errorCode: 5001, errorAfterMs: 200))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        try await runTencentSession(.local(port: server.port), inputs: NumberedAudio.inputs(chunks: 20, realtime: false), log: log)
        let errors = await log.errors
        #expect(errors.first?.code == "server_error_5001")
        #expect(errors.contains { $0.code == "reconnecting" })
        let c = server.connections
        #expect(c.count == 2)
        #expect(c[0].voiceID != c[1].voiceID)
        #expect(NumberedAudio.covers(await log.finals, chunks: 20))
    }

    @Test func aDroppedConnectionReconnectsWithANewVoiceIDAndLosesNoSpeech() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 400, dropAfterMs: 600))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        let counters = TestCounters()
        // Captured in real time, so audio keeps arriving while the client reconnects.
        try await runTencentSession(.local(port: server.port), inputs: NumberedAudio.inputs(chunks: 30, realtime: true), log: log, counters: counters)
        let c = server.connections
        #expect(c.count == 2)
        #expect(c.allSatisfy { $0.signatureValid })
        #expect(Set(c.map(\.voiceID)).count == 2)
        #expect(c[1].endReceived)
        #expect(c.allSatisfy { $0.paceViolations == 0 })
        #expect(counters["reconnects"] == 1)
        #expect(counters["dropped_audio_ms"] == 0)
        let errors = await log.errors
        #expect(errors.map(\.code) == ["reconnecting"])
        let finals = await log.finals
        #expect(NumberedAudio.covers(finals, chunks: 30), "finals: \(finals.map(\.text))")
        // The utterance cut by the drop is closed (empty) and recognized again from its start.
        #expect(finals.contains { $0.text.isEmpty })
        #expect(finals.contains { $0.text.hasPrefix("chunks 10-") })
    }

    @Test func wssWithAPrivateCA() async throws {
        try #require(haveTool("openssl"))
        let ca = try TestCA.make()
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 200), tls: try TestCA.serverContext(ca))
        defer { Task { await server.shutdown() } }
        let log = ASRResultLog()
        try await runTencentSession(.local(port: server.port, scheme: "wss", host: "localhost", caFile: ca.caPath),
                                    inputs: NumberedAudio.inputs(chunks: 10, realtime: false), log: log)
        #expect(await log.finals.map(\.text) == ["chunks 0-4", "chunks 5-9"])
        #expect(server.connections.first?.hostHeader == "localhost:\(server.port)")
        #expect(server.connections.first?.signatureValid == true)

        // Without the CA the certificate is not trusted: the client retries, then gives up.
        let untrusted = ASRResultLog()
        await #expect(throws: NodeError.self) {
            try await runTencentSession(.local(port: server.port, scheme: "wss", host: "localhost", maxAttempts: 1),
                                        inputs: NumberedAudio.inputs(chunks: 3, realtime: false), log: untrusted)
        }
        #expect(await untrusted.errors.first?.message.contains("TLS") == true)
        #expect(server.connections.count == 1)
    }
}

@Suite("Tencent ASR through the asr node")
struct TencentASRNodeTests {
    @Test func theAsrNodeReportsTencentResultsAsEvents() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 400))
        defer { Task { await server.shutdown() } }
        let events = try await runGraph("""
            version: 1
            name: tencent
            nodes:
              tone: { type: tone-source, duration_ms: 1000, realtime: false }
              asr:
                type: asr
                engine: tencent
                app_id: "${TENCENTCLOUD_APPID}"
                secret_id: "${TENCENTCLOUD_SECRET_ID}"
                secret_key: "${TENCENTCLOUD_SECRET_KEY}"
                endpoint: "ws://127.0.0.1:\(server.port)"
                params: { vad_silence_time: 600 }
            links:
              - tone -> asr
            """, environment: ["TENCENTCLOUD_APPID": "1259228442", "TENCENTCLOUD_SECRET_ID": TencentTestKeys.secretID,
                              "TENCENTCLOUD_SECRET_KEY": TencentTestKeys.secretKey])
        let c = server.connections
        #expect(c.count == 1 && c.first?.signatureValid == true)
        #expect(c.first?.query["vad_silence_time"] == "600")
        #expect(c.first?.paceViolations == 0)
        let finals = events.filter { $0.name == "transcript" && $0["final"] == .bool(true) }
        #expect(finals.count == 3)
        #expect(finals.map { $0["seq"] } == [.int(0), .int(1), .int(2)])
        #expect(finals.map { $0["start_ms"] } == [.int(0), .int(400), .int(800)])
        #expect(events.filter { $0.name == "utterance_start" }.count == 3)
        #expect(events.filter { $0.name == "utterance_end" }.count == 3)
        #expect(events.contains { $0.name == "finished" })
        #expect(!events.contains { $0.name == "error" })
        let lines = events.map { $0.jsonLine() }.joined()
        #expect(!lines.contains(TencentTestKeys.secretID) && !lines.contains(TencentTestKeys.secretKey))
    }

    @Test(.enabled(if: haveTool("flite") && haveTool("sox")))
    func theShippedPipelineRunsAgainstALocalEndpoint() async throws {
        let speech = try Speech.wav(["hello world"], voice: "slt", leadS: 0.3, gapS: 0.8)
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, utteranceMs: 300))
        defer { Task { await server.shutdown() } }
        let url = URL(fileURLWithPath: #filePath).deletingLastPathComponent().appendingPathComponent("../../../pipelines/recognizer-tencent.yaml").standardized
        let yaml = try String(contentsOf: url, encoding: .utf8)
        let env = ["TENCENTCLOUD_APPID": "1259228442", "TENCENTCLOUD_SECRET_ID": TencentTestKeys.secretID,
                   "TENCENTCLOUD_SECRET_KEY": TencentTestKeys.secretKey, "TENCENT_ENDPOINT": "ws://127.0.0.1:\(server.port)",
                   "SOURCE": "file-source"]
        let events = try await runGraph(yaml, overrides: [try Override(parsing: "mic.path=\(speech)"), try Override(parsing: "mic.realtime=true"),
                                                          try Override(parsing: "out.path=\(temporaryPath("events.jsonl"))")],
                                        environment: env)
        #expect(server.connections.first?.signatureValid == true)
        #expect(server.connections.first?.endReceived == true)
        #expect(events.contains { $0.name == "transcript" && $0["final"] == .bool(true) })
        #expect(events.contains { $0.name == "finished" })
    }
}
