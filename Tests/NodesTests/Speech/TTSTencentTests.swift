import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import PipelineCore
import Synchronization
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// A local server of Tencent Cloud's real-time speech synthesis over WebSocket
/// (`TextToStreamAudioWS`), for tests.
///
/// Like the service it takes the request from the URL: it recomputes the signature from the
/// decoded query and the `Host` header — HMAC-SHA1 with the secret key over
/// `GET<host without port><path>?<every parameter but Signature, sorted, values decoded>`, base64 —
/// and answers a wrong one with a text message of a non-zero `code` and closes. Otherwise it
/// answers `{"code": 0, ...}`, then "synthesizes" the `Text`: a 440 Hz tone of 50 ms per character at
/// `SampleRate`, sent as binary messages of 100 ms, a text message with `result.subtitles` when
/// `EnableSubtitle` is true, and `{"final": 1}`. It can also answer an error code, or drop the
/// connection, after some audio, or stay silent.
final class TencentTTSServer: Sendable {
    struct Behavior: Sendable {
        var secretKey: String
        /// The code a wrong signature is answered with. (10003 is the code a third-party client
        /// reports for an authentication failure; the published text at hand gives no list.)
        var authFailureCode = 10003
        /// After this many audio messages: answer `errorCode` and close.
        var errorAfterMessages: Int?
        var errorCode = 10011
        /// After this many audio messages: close the TCP connection, no final message.
        var dropAfterMessages: Int?
        /// Answer the handshake, then nothing.
        var silent = false
    }

    struct Connection: Sendable {
        var hostHeader = ""
        var path = ""
        var query: [String: String] = [:]
        var signatureValid = false
        var audioBytes = 0
        var sent: [String] = []
    }

    let behavior: Behavior
    let port: Int
    private let channel: any Channel
    private let state = Mutex<[Connection]>([])

    private init(behavior: Behavior, port: Int, channel: any Channel) {
        self.behavior = behavior
        self.port = port
        self.channel = channel
    }

    var connections: [Connection] { state.withLock { $0 } }
    var endpoint: String { "ws://127.0.0.1:\(port)/stream_ws" }

    /// Starts a server on 127.0.0.1 (a free port), with TLS when `tls` is given.
    static func start(_ behavior: Behavior, tls: NIOSSLContext? = nil) async throws -> TencentTTSServer {
        let box = TencentTTSServerBox()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 1 << 20,
                        shouldUpgrade: { ch, _ in ch.eventLoop.makeSucceededFuture(HTTPHeaders()) },
                        upgradePipelineHandler: { ch, head in
                            ch.eventLoop.makeCompletedFuture {
                                try ch.pipeline.syncOperations.addHandler(TencentTTSConnectionHandler(server: box.server!, head: head))
                            }
                        })
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let server = TencentTTSServer(behavior: behavior, port: channel.localAddress!.port!, channel: channel)
        box.server = server
        return server
    }

    func shutdown() async { try? await channel.close() }

    fileprivate func register(_ c: Connection) -> Int { state.withLock { $0.append(c); return $0.count - 1 } }
    fileprivate func update(_ i: Int, _ body: (inout Connection) -> Void) { state.withLock { body(&$0[i]) } }

    /// The signature as the service computes it, from the raw query (percent-decoded values) and the bare host.
    static func signature(host: String, path: String, rawQuery: String, secretKey: String) -> (expected: String, given: String?) {
        var params: [(String, String)] = []
        var given: String?
        for pair in rawQuery.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let k = String(kv[0]).removingPercentEncoding ?? String(kv[0])
            let v = kv.count > 1 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
            if k == "Signature" { given = v } else { params.append((k, v)) }
        }
        params.sort { Array($0.0.utf8).lexicographicallyPrecedes(Array($1.0.utf8)) }
        let text = "GET" + host + path + "?" + params.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(text.utf8), using: SymmetricKey(data: Data(secretKey.utf8)))
        return (Data(mac).base64EncodedString(), given)
    }
}

private final class TencentTTSServerBox: @unchecked Sendable {
    // Set once before the first connection is accepted, then only read.
    var server: TencentTTSServer?
}

/// One connection of the test server; runs on its channel's event loop only.
private final class TencentTTSConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let server: TencentTTSServer
    let index: Int
    let valid: Bool
    let problem: String?
    let query: [String: String]
    let requestID = UUID().uuidString
    var messageNumber = 0
    var closed = false

    init(server: TencentTTSServer, head: HTTPRequestHead) {
        self.server = server
        let host = head.headers.first(name: "Host") ?? ""
        let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts[0]), rawQuery = parts.count > 1 ? String(parts[1]) : ""
        var query: [String: String] = [:]
        for pair in rawQuery.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            query[String(kv[0]).removingPercentEncoding ?? ""] = kv.count > 1 ? String(kv[1]).removingPercentEncoding ?? "" : ""
        }
        self.query = query
        let bareHost = String(host.split(separator: ":", maxSplits: 1).first ?? "")
        let check = TencentTTSServer.signature(host: bareHost, path: path, rawQuery: rawQuery, secretKey: server.behavior.secretKey)
        valid = check.given == check.expected
        let required = ["Action", "AppId", "SecretId", "Timestamp", "Expired", "SessionId", "Text", "VoiceType", "Codec", "SampleRate"]
        if let missing = required.first(where: { query[$0] == nil }) {
            problem = "missing parameter \(missing)"
        } else if query["Action"] != "TextToStreamAudioWS" {
            problem = "unknown Action"
        } else if query["Codec"] != "pcm" || !["8000", "16000"].contains(query["SampleRate"] ?? "") {
            problem = "unsupported Codec or SampleRate"
        } else if (Int(query["Expired"]!) ?? 0) <= (Int(query["Timestamp"]!) ?? 0) {
            problem = "Expired is not after Timestamp"
        } else {
            problem = nil
        }
        var c = TencentTTSServer.Connection()
        c.hostHeader = host
        c.path = path
        c.query = query
        c.signatureValid = valid
        index = server.register(c)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        if case .upgradeComplete = event as? HTTPServerUpgradeEvents { respond(context) }
        context.fireUserInboundEventTriggered(event)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        if frame.opcode == .connectionClose { close(context) }
    }

    private func respond(_ context: ChannelHandlerContext) {
        guard valid else { return fail(context, code: server.behavior.authFailureCode, message: "Authentication failed: signature mismatch") }
        if let problem { return fail(context, code: 10001, message: problem) }
        send(context, [:])
        if server.behavior.silent { return }
        let rate = Int(query["SampleRate"]!)!
        let total = (query["Text"] ?? "").count * rate / 20
        var samples: [Int16] = (0..<total).map { Int16(8000 * sin(2 * Double.pi * 440 * Double($0) / Double(rate))) }
        var sentMessages = 0
        while !samples.isEmpty {
            if let n = server.behavior.errorAfterMessages, sentMessages == n {
                return fail(context, code: server.behavior.errorCode, message: "synthesis failed as the test asked")
            }
            if let n = server.behavior.dropAfterMessages, sentMessages == n {
                closed = true
                context.close(promise: nil)
                return
            }
            let part = samples.prefix(rate / 10)
            samples.removeFirst(part.count)
            var buffer = context.channel.allocator.buffer(capacity: part.count * 2)
            for s in part { buffer.writeInteger(s, endianness: .little) }
            server.update(index) { $0.audioBytes += part.count * 2 }
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .binary, data: buffer)), promise: nil)
            sentMessages += 1
        }
        if query["EnableSubtitle"]?.lowercased() == "true" {
            send(context, ["result": ["subtitles": [["Text": query["Text"] ?? "", "BeginTime": 0, "EndTime": total * 1000 / rate,
                                                      "BeginIndex": 0, "EndIndex": (query["Text"] ?? "").count, "Phoneme": ""]]]])
        }
        send(context, ["final": 1])
        close(context)
    }

    private func send(_ context: ChannelHandlerContext, _ extra: [String: Any], code: Int = 0, message: String = "success") {
        messageNumber += 1
        var object: [String: Any] = ["code": code, "message": message, "session_id": query["SessionId"] ?? "", "request_id": requestID,
                                     "message_id": "\(requestID)_\(messageNumber)", "final": 0]
        object.merge(extra) { $1 }
        let text = String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        server.update(index) { $0.sent.append(text) }
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: context.channel.allocator.buffer(string: text))),
                              promise: nil)
    }

    private func fail(_ context: ChannelHandlerContext, code: Int, message: String) {
        send(context, [:], code: code, message: message)
        closed = true
        let channel = context.channel
        channel.eventLoop.scheduleTask(in: .milliseconds(100)) { channel.close(promise: nil) }
    }

    private func close(_ context: ChannelHandlerContext) {
        guard !closed else { return }
        closed = true
        var buffer = context.channel.allocator.buffer(capacity: 2)
        buffer.write(webSocketErrorCode: .normalClosure)
        let channel = context.channel
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer))).whenComplete { _ in
            channel.close(promise: nil)
        }
    }
}

/// `tts` with `engine: tencent` against the local server.
@Suite("TTS Tencent")
struct TTSTencentTests {
    static let key = "test-secret-key-Zx9"
    static let secretID = "AKIDtestsecretid0123"

    static func tencent(_ server: TencentTTSServer, key: String = TTSTencentTests.key, _ extra: [String: ParamValue] = [:]) -> [String: ParamValue] {
        ["engine": "tencent", "endpoint": .string(server.endpoint), "app_id": "1300000001", "secret_id": .string(secretID),
         "secret_key": .string(key)].merging(extra) { $1 }
    }

    /// The dominant frequency of `samples` at `rate`, from zero crossings.
    static func frequency(_ samples: [Int16], rate: Int) -> Double {
        var crossings = 0
        for (a, b) in zip(samples, samples.dropFirst()) where (a < 0) != (b < 0) { crossings += 1 }
        return Double(crossings) * Double(rate) / 2 / Double(samples.count)
    }

    @Test("a signed request: the server checks the signature, streams PCM, and the node frames it")
    func speaks() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key))
        let text = "你好，世界。"   // 6 characters: 300 ms of tone from the server
        let h = try await TTSTests.speak([text], Self.tencent(server, ["voice": "101001"]))
        await server.shutdown()
        #expect(h.events(named: "error").isEmpty, "\(h.events(named: "error"))")
        let c = try #require(server.connections.first)
        #expect(server.connections.count == 1)
        #expect(c.signatureValid)
        #expect(c.path == "/stream_ws")
        #expect(c.query["Action"] == "TextToStreamAudioWS" && c.query["AppId"] == "1300000001" && c.query["SecretId"] == Self.secretID)
        #expect(c.query["Text"] == text && c.query["VoiceType"] == "101001" && c.query["Codec"] == "pcm" && c.query["SampleRate"] == "16000")
        #expect(c.query["Speed"] == "0" && c.query["Volume"] == "0" && c.query["ModelType"] == "1")
        #expect(c.query["Signature"] != nil && c.query["secret_key"] == nil && !c.query.values.contains(Self.key))
        let samples = h.output().samples
        #expect(samples.count == 16000 * 300 / 1000, "\(samples.count)")   // 300 ms: a whole number of 20 ms frames
        #expect(abs(Self.frequency(samples, rate: 16000) - 440) < 10)
        #expect(h.events(named: "tts_end").first?["duration_ms"]?.intValue == 300)
    }

    @Test("an 8 kHz graph asks for 8 kHz; speed maps onto the service's scale")
    func rateAndSpeed() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key))
        let h = try await TTSTests.speak(["Hello there."], Self.tencent(server, ["rate": 8000, "speed": 1.5]))
        let h2 = try await TTSTests.speak(["Hi."], Self.tencent(server, ["speed": 0.7]))
        await server.shutdown()
        #expect(h.events(named: "error").isEmpty && h2.events(named: "error").isEmpty)
        #expect(server.connections.map { $0.query["SampleRate"] } == ["8000", "16000"])
        #expect(server.connections.map { $0.query["Speed"] } == ["2", "-1.5"])
        #expect(h.output().samples.count == 12 * 8000 / 20)
        #expect(TencentSynthesizer.serviceSpeed(1.0) == 0 && TencentSynthesizer.serviceSpeed(2.5) == 6 && TencentSynthesizer.serviceSpeed(4) == 6)
        #expect(TencentSynthesizer.serviceSpeed(0.25) == -2 && abs(TencentSynthesizer.serviceSpeed(1.1) - 0.5) < 1e-9)
    }

    @Test("a wrong secret key: the server's code and message arrive as an error event, the node goes on")
    func wrongKey() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key))
        let h = try await TTSTests.speak(["First.", "Second."], Self.tencent(server, key: "not-the-key-000"))
        await server.shutdown()
        let errors = h.events(named: "error")
        #expect(errors.count == 2, "\(errors)")
        #expect(errors.allSatisfy { $0["code"]?.stringValue == "server_error_10003" })
        let message = errors.first?["message"]?.stringValue ?? ""
        #expect(message.contains("Tencent TTS error 10003: Authentication failed: signature mismatch") && message.contains("request_id"), "\(message)")
        // Never a secret in a message.
        #expect(!errors.contains { e in ["not-the-key-000", Self.secretID].contains { (e["message"]?.stringValue ?? "").contains($0) } })
        #expect(server.connections.allSatisfy { !$0.signatureValid })
        #expect(h.output().audio.isEmpty)
    }

    @Test("code != 0 in the middle of the audio: what came is played, the error names the code")
    func errorMidStream() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key, errorAfterMessages: 2, errorCode: 10011))
        let h = try await TTSTests.speak(["This sentence is long enough for four messages."], Self.tencent(server))
        await server.shutdown()
        let errors = h.events(named: "error")
        #expect(errors.map { $0["code"]?.stringValue } == ["server_error_10011"], "\(errors)")
        #expect((errors.first?["message"]?.stringValue ?? "").contains("Tencent TTS error 10011: synthesis failed as the test asked"))
        #expect(h.output().samples.count == 2 * 1600, "two 100 ms messages: \(h.output().samples.count)")
    }

    @Test("a connection dropped before final: 1 is an error saying how much audio came")
    func dropped() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key, dropAfterMessages: 3))
        let h = try await TTSTests.speak(["This sentence is long enough for four messages."], Self.tencent(server))
        await server.shutdown()
        let errors = h.events(named: "error")
        #expect(errors.map { $0["code"]?.stringValue } == ["tencent_disconnected"], "\(errors)")
        #expect((errors.first?["message"]?.stringValue ?? "").contains("after 300 ms of audio"), "\(errors)")
    }

    @Test("a silent server times out after timeout_ms")
    func silent() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key, silent: true))
        let started = ContinuousClock.now
        let h = try await TTSTests.speak(["Hello?"], Self.tencent(server, ["timeout_ms": 500]))
        await server.shutdown()
        let errors = h.events(named: "error")
        #expect(errors.map { $0["code"]?.stringValue } == ["tencent_timeout"], "\(errors)")
        #expect(ContinuousClock.now - started < .seconds(6))
    }

    @Test("an unreachable endpoint is an error naming it, without the signed URL")
    func unreachable() async throws {
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key))
        await server.shutdown()
        let h = try await TTSTests.speak(["Hello."], Self.tencent(server, ["timeout_ms": 2000]))
        let errors = h.events(named: "error")
        #expect(errors.map { $0["code"]?.stringValue } == ["tencent_unreachable"], "\(errors)")
        let message = errors.first?["message"]?.stringValue ?? ""
        #expect(message.contains("ws://127.0.0.1:\(server.port)/stream_ws") && !message.contains("Signature") && !message.contains(Self.secretID), "\(message)")
    }

    @Test("wss with ca_file: a private CA is trusted; without it the TLS failure is the error")
    func tls() async throws {
        let ca = try TestCA.make()
        defer { try? FileManager.default.removeItem(atPath: ca.directory) }
        let server = try await TencentTTSServer.start(.init(secretKey: Self.key), tls: try TestCA.serverContext(ca))
        let endpoint = "wss://localhost:\(server.port)/stream_ws"
        let trusted = try await TTSTests.speak(["Hi."], Self.tencent(server, ["endpoint": .string(endpoint), "ca_file": .string(ca.caPath)]))
        let untrusted = try await TTSTests.speak(["Hi."], Self.tencent(server, ["endpoint": .string(endpoint), "timeout_ms": 3000]))
        await server.shutdown()
        #expect(trusted.events(named: "error").isEmpty, "\(trusted.events(named: "error"))")
        #expect(trusted.output().samples.count == 8 * 320)   // 150 ms of tone, padded to whole 20 ms frames
        #expect(server.connections.first?.signatureValid == true && server.connections.first?.hostHeader == "localhost:\(server.port)")
        let errors = untrusted.events(named: "error")
        #expect(errors.map { $0["code"]?.stringValue } == ["tencent_unreachable"], "\(errors)")
        #expect((errors.first?["message"]?.stringValue ?? "").contains("TLS"), "\(errors)")
    }

    @Test("credentials fall back to the environment; what is missing is named when the node starts")
    func credentials() throws {
        var c = try TTSNode.descriptor.configuration(["engine": "tencent"]) as! TTSNode.Configuration
        #expect {
            _ = try TencentSynthesizer.Settings(c)
        } throws: { "\($0)".contains("engine tencent needs app_id (or TENCENTCLOUD_APPID), secret_id (or TENCENTCLOUD_SECRET_ID), secret_key (or TENCENTCLOUD_SECRET_KEY)") }
        c.environment = ["TENCENTCLOUD_APPID": "1300000001", "TENCENTCLOUD_SECRET_ID": "AKIDenv", "TENCENTCLOUD_SECRET_KEY": "envkey"]
        let s = try TencentSynthesizer.Settings(c)
        #expect(s.appID == "1300000001" && s.secretID == "AKIDenv" && s.secretKey == "envkey")
        #expect(s.endpoint.host == "tts.cloud.tencent.com" && s.endpoint.scheme == "wss" && s.path == "/stream_ws")
        // The signed text of the published scheme, recomputed here.
        let r = s.request(text: "你好 world", sessionID: "sid", timestamp: 1_700_000_000)
        let expected = TencentTTSServer.signature(host: "tts.cloud.tencent.com", path: "/stream_ws",
                                                  rawQuery: String(r.url.split(separator: "?", maxSplits: 1)[1]), secretKey: "envkey")
        #expect(expected.given == expected.expected)
        #expect(r.url.hasPrefix("wss://tts.cloud.tencent.com/stream_ws?Action=TextToStreamAudioWS&AppId=1300000001&"))
        #expect(r.url.contains("Text=%E4%BD%A0%E5%A5%BD%20world") && r.url.contains("Expired=1700086400"))
    }

    @Test("voice must be a VoiceType number, the endpoint a ws(s) URL, app_id a number")
    func validation() throws {
        #expect { _ = try TTSNode.descriptor.configuration(["engine": "tencent", "voice": "slt"]) } throws: {
            "\($0)".contains("engine tencent takes voice as a VoiceType number")
        }
        #expect { _ = try TTSNode.descriptor.configuration(["engine": "tencent", "endpoint": "ftp://x"]) } throws: { "\($0)".contains("endpoint \"ftp://x\"") }
        #expect { _ = try TTSNode.descriptor.configuration(["engine": "tencent", "app_id": "abc"]) } throws: { "\($0)".contains("numeric AppId") }
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["engine": "tencent", "voice": "101001", "endpoint": "ws://127.0.0.1:9/stream_ws"]) }
        // Secrets are marked so: never printed.
        let secret = Set(TTSNode.Configuration.parameters.filter(\.secret).map(\.name))
        #expect(secret == ["secret_id", "secret_key"])
    }
}
