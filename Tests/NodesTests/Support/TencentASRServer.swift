import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization

/// A local server that speaks Tencent Cloud's real-time ASR WebSocket protocol (API v2), for tests.
///
/// Like the real service it accepts the WebSocket upgrade, then checks the request: it recomputes
/// the signature from the raw query and the `Host` header (HMAC-SHA1 with the secret key over
/// `<host><path>?<params but signature, sorted>`, base64) and answers `{"code":4002,...}` and
/// closes when it does not match, or `{"code":0,"message":"success",...}`. Audio is binary
/// messages; it checks they arrive no faster than real time (with a tolerance). Every
/// ``Behavior/utteranceMs`` of audio is one utterance: `slice_type` 0, partials (1) every
/// 200 ms, then 2. Texts name the first and last sample values of the utterance
/// (`"chunks 3-27"`), so tests that send numbered audio can tell what was recognized.
/// `{"type": "end"}` closes the open utterance and answers `final: 1`.
/// It can also answer an error code, or drop the connection mid-stream, on the first connection.
final class TencentASRServer: Sendable {
    /// How the server behaves.
    struct Behavior: Sendable {
        var secretKey: String
        var utteranceMs = 1000
        var partialEveryMs = 200
        /// Audio may run this far ahead of real time before it counts as a pacing violation.
        var paceToleranceMs = 150.0
        /// On the first accepted connection: close the TCP connection (no close frame) after this much audio.
        var dropAfterMs: Int?
        /// On every connection: close the TCP connection after this much audio (a server that
        /// accepts the handshake and then always fails).
        var dropEveryAfterMs: Int?
        /// On the first accepted connection: answer this code after ``errorAfterMs`` of audio, then close.
        var errorCode: Int?
        var errorAfterMs = 200
        /// As the service: a connection that receives no audio for this long is answered 4008
        /// and closed (15 s in the published protocol; shorter in tests).
        var noAudioTimeoutMs = 15_000
        /// A refused signature's message quotes the request's secretid (as a careless proxy might).
        var echoSecretID = false
    }

    /// What one connection did.
    struct Connection: Sendable {
        var hostHeader = ""
        var path = ""
        var query: [String: String] = [:]
        var signatureValid = false
        var voiceID = ""
        var audioSamples = 0
        var messages = 0
        var maxMessageBytes = 0
        var maxLeadMs = 0.0
        var paceViolations = 0
        var endReceived = false
        var sent: [String] = []
    }

    let behavior: Behavior
    let port: Int
    private let channel: any Channel
    private let state: Mutex<[Connection]>

    private init(behavior: Behavior, port: Int, channel: any Channel) {
        self.behavior = behavior
        self.port = port
        self.channel = channel
        self.state = Mutex([])
    }

    /// Every connection so far, in order.
    var connections: [Connection] { state.withLock { $0 } }

    /// Starts a server on 127.0.0.1 (a free port), with TLS when `tls` is given.
    static func start(_ behavior: Behavior, tls: NIOSSLContext? = nil) async throws -> TencentASRServer {
        let box = ServerBox()
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: 1 << 20,
                        shouldUpgrade: { ch, _ in ch.eventLoop.makeSucceededFuture(HTTPHeaders()) },
                        upgradePipelineHandler: { ch, head in
                            ch.eventLoop.makeCompletedFuture {
                                let handler = ConnectionHandler(server: box.server!, head: head)
                                try ch.pipeline.syncOperations.addHandler(handler)
                            }
                        })
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { _ in }))
                }
            }
        let channel = try await bootstrap.bind(host: "127.0.0.1", port: 0).get()
        let server = TencentASRServer(behavior: behavior, port: channel.localAddress!.port!, channel: channel)
        box.server = server
        return server
    }

    /// Stops listening.
    func shutdown() async {
        try? await channel.close()
    }

    fileprivate func register(_ c: Connection) -> Int {
        state.withLock { $0.append(c); return $0.count - 1 }
    }

    fileprivate func update(_ index: Int, _ body: (inout Connection) -> Void) {
        state.withLock { body(&$0[index]) }
    }

    /// The signature the server expects, recomputed independently from the request.
    static func expectedSignature(host: String, path: String, rawQuery: String, secretKey: String) -> (signature: String, given: String?) {
        var params: [(String, String)] = []
        var given: String?
        for pair in rawQuery.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            let k = String(kv[0]).removingPercentEncoding ?? String(kv[0])
            let v = kv.count > 1 ? (String(kv[1]).removingPercentEncoding ?? String(kv[1])) : ""
            if k == "signature" { given = v } else { params.append((k, v)) }
        }
        params.sort { $0.0 < $1.0 }
        let text = host + path + "?" + params.map { "\($0.0)=\($0.1)" }.joined(separator: "&")
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(text.utf8), using: SymmetricKey(data: Data(secretKey.utf8)))
        return (Data(mac).base64EncodedString(), given)
    }
}

/// Lets the child channel initializer reach the server once it exists.
private final class ServerBox: @unchecked Sendable {
    // Written once before the first connection can be accepted, then only read.
    var server: TencentASRServer?
}

/// One WebSocket connection of the test server. Runs on its channel's event loop only.
private final class ConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame

    let server: TencentASRServer
    let index: Int
    let voiceID: String
    let valid: Bool
    let rate: Int
    let isFirstAccepted: Bool
    var firstAudio: NIODeadline?
    var samples = 0
    var utterance: (index: Int, start: Int, first: Int16, lastPartial: Int)?
    var nextIndex = 0
    var last: Int16 = 0
    var messageNumber = 0
    var closed = false
    var wordInfo = 0
    var idleTimer: Scheduled<Void>?

    init(server: TencentASRServer, head: HTTPRequestHead) {
        self.server = server
        let host = head.headers.first(name: "Host") ?? ""
        let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts[0])
        let rawQuery = parts.count > 1 ? String(parts[1]) : ""
        var query: [String: String] = [:]
        for pair in rawQuery.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            query[String(kv[0]).removingPercentEncoding ?? ""] = kv.count > 1 ? String(kv[1]).removingPercentEncoding ?? "" : ""
        }
        // The service signs over the bare host name: a port in the Host header is not part of it.
        let bareHost = host.hasPrefix("[") ? String(host[...(host.firstIndex(of: "]") ?? host.index(before: host.endIndex))])
            : String(host.split(separator: ":", maxSplits: 1).first ?? "")
        let check = TencentASRServer.expectedSignature(host: bareHost, path: path, rawQuery: rawQuery, secretKey: server.behavior.secretKey)
        let required = ["secretid", "timestamp", "expired", "nonce", "voice_id", "engine_model_type"]
        valid = check.given == check.signature && required.allSatisfy { query[$0] != nil }
        voiceID = query["voice_id"] ?? ""
        wordInfo = Int(query["word_info"] ?? "0") ?? 0
        rate = (query["engine_model_type"] ?? "16k").hasPrefix("8k") ? 8000 : 16000
        var c = TencentASRServer.Connection()
        c.hostHeader = host
        c.path = path
        c.query = query
        c.signatureValid = valid
        c.voiceID = voiceID
        let previous = server.connections
        isFirstAccepted = valid && !previous.contains { $0.signatureValid }
        index = server.register(c)
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        // Answer once the upgrade is complete (the 101 response is out and the HTTP handlers are gone).
        if case .upgradeComplete = event as? HTTPServerUpgradeEvents { greet(context) }
        context.fireUserInboundEventTriggered(event)
    }

    /// (Re)arms the service's no-audio timeout (code 4008).
    private func armIdleTimer(_ context: ChannelHandlerContext) {
        idleTimer?.cancel()
        let loop = context.eventLoop.assumeIsolated()
        idleTimer = loop.scheduleTask(in: .milliseconds(Int64(server.behavior.noAudioTimeoutMs))) { [self] in
            guard !self.closed else { return }
            self.fail(context, code: 4008, message: "no audio for \(self.server.behavior.noAudioTimeoutMs) ms")
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleTimer?.cancel()
        context.fireChannelInactive()
    }

    private func greet(_ context: ChannelHandlerContext) {
        if valid {
            armIdleTimer(context)
            send(context, ["code": 0, "message": "success", "voice_id": voiceID])
        } else {
            let echo = server.behavior.echoSecretID ? " for secretid \(server.connections[index].query["secretid"] ?? "")" : ""
            fail(context, code: 4002, message: "signature verification failed\(echo)")
        }
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        guard !closed else { return }
        switch frame.opcode {
        case .binary:
            audio(context, frame.unmaskedData)
        case .text:
            var d = frame.unmaskedData
            let text = d.readString(length: d.readableBytes) ?? ""
            let json = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
            if json?["type"] as? String == "end" {
                server.update(index) { $0.endReceived = true }
                endUtterance(context)
                send(context, ["code": 0, "message": "success", "voice_id": voiceID, "message_id": "\(voiceID)_\(messageNumber)", "final": 1])
                close(context)
            } else {
                fail(context, code: 4010, message: "unknown text message")
            }
        case .connectionClose:
            close(context)
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        default:
            break
        }
    }

    private func audio(_ context: ChannelHandlerContext, _ data: ByteBuffer) {
        armIdleTimer(context)
        let now = NIODeadline.now()
        if firstAudio == nil { firstAudio = now }
        let before = Double(samples) * 1000 / Double(rate)
        let elapsed = Double((now - firstAudio!).nanoseconds) / 1e6
        let lead = before - elapsed
        let tolerance = server.behavior.paceToleranceMs
        var values: [Int16] = []
        var d = data
        while let v = d.readInteger(endianness: .little, as: Int16.self) { values.append(v) }
        server.update(index) {
            $0.messages += 1
            $0.maxMessageBytes = max($0.maxMessageBytes, data.readableBytes)
            $0.maxLeadMs = max($0.maxLeadMs, lead)
            if lead > tolerance { $0.paceViolations += 1 }
            $0.audioSamples += values.count
        }
        guard let firstValue = values.first else { return }
        if utterance == nil {
            utterance = (nextIndex, samples, firstValue, samples)
            nextIndex += 1
            result(context, slice: 0, text: "")
        }
        samples += values.count
        last = values.last!
        let ms = samples * 1000 / rate
        if let drop = (isFirstAccepted ? server.behavior.dropAfterMs : nil) ?? server.behavior.dropEveryAfterMs, ms >= drop {
            closed = true
            context.close(promise: nil)   // no close frame: a dropped connection
            return
        }
        if isFirstAccepted, let code = server.behavior.errorCode, ms >= server.behavior.errorAfterMs {
            fail(context, code: code, message: "error \(code) requested by the test")
            return
        }
        let u = utterance!
        if (samples - u.start) * 1000 / rate >= server.behavior.utteranceMs {
            endUtterance(context)
        } else if (samples - u.lastPartial) * 1000 / rate >= server.behavior.partialEveryMs {
            utterance!.lastPartial = samples
            result(context, slice: 1, text: "chunks \(u.first)-\(last)")
        }
    }

    private func endUtterance(_ context: ChannelHandlerContext) {
        guard let u = utterance else { return }
        result(context, slice: 2, text: "chunks \(u.first)-\(last)")
        utterance = nil
    }

    private func result(_ context: ChannelHandlerContext, slice: Int, text: String) {
        guard let u = utterance else { return }
        messageNumber += 1
        send(context, [
            "code": 0, "message": "success", "voice_id": voiceID, "message_id": "\(voiceID)_\(messageNumber)",
            "result": ["slice_type": slice, "index": u.index, "start_time": u.start * 1000 / rate, "end_time": samples * 1000 / rate,
                       "voice_text_str": text, "word_size": words(text, slice: slice).count, "word_list": words(text, slice: slice)] as [String: Any],
        ])
    }

    /// With `word_info` 1 or 2: each space-separated word, its times in ms from the sentence's
    /// start (the sentence's duration split evenly), stable once the sentence is final.
    private func words(_ text: String, slice: Int) -> [[String: Any]] {
        guard wordInfo > 0, let u = utterance else { return [] }
        let parts = text.split(separator: " ")
        guard !parts.isEmpty else { return [] }
        let duration = (samples - u.start) * 1000 / rate
        let step = duration / parts.count
        return parts.enumerated().map { i, w in
            ["word": String(w), "start_time": i * step, "end_time": (i + 1) * step, "stable_flag": slice == 2 ? 1 : 0] as [String: Any]
        }
    }

    private func fail(_ context: ChannelHandlerContext, code: Int, message: String) {
        send(context, ["code": code, "message": message, "voice_id": voiceID])
        closed = true
        let channel = context.channel
        channel.eventLoop.scheduleTask(in: .milliseconds(100)) { channel.close(promise: nil) }
    }

    private func send(_ context: ChannelHandlerContext, _ object: [String: Any]) {
        let data = try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys])
        let text = String(decoding: data, as: UTF8.self)
        server.update(index) { $0.sent.append(text) }
        let buffer = context.channel.allocator.buffer(string: text)
        context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .text, data: buffer)), promise: nil)
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
