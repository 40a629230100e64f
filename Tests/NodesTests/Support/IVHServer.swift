import Crypto
import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOSSL
import NIOWebSocket
import Synchronization
@testable import DigitalHuman

/// A local server that speaks the digital-human stream-service protocol, for tests: signed HTTPS
/// (or plain HTTP) JSON operations under `/v2/ivh/streammanager/streamservice/` and the WebSocket
/// command channel. It checks every signature itself (its own HMAC code, not the client's),
/// records what it receives and can push messages, fail operations and drop channels on request.
final class IVHServer: Sendable {
    /// Behaviour switches.
    struct Options: Sendable {
        var appkey = "test-appkey-0123456789"
        var accessToken = "test-token-abcdefghij"
        /// SessionStatus answered by newsession (3 = preparing; statsession turns it to 1 on the
        /// `readyAfterPolls`-th poll).
        var initialStatus = 1
        var readyAfterPolls = 1
        /// Header.Code answered by these operations instead of success.
        var failures: [String: Int] = [:]
        /// On SEND_TEXT, push input text, speak_start, speech text and speak_over.
        var echoSpeech = true
        /// Present this TLS context (HTTPS/WSS) instead of plain HTTP.
        var tls: NIOSSLContext? = nil
    }

    /// One HTTP request.
    struct Call: Sendable {
        var operation: String
        var body: String
        var accepted: Bool
        var code: Int
    }

    /// One command received on a channel.
    struct Command: Sendable {
        var connection: Int
        var command: String
        var sessionID: String
        var audioBytes: Int?
        var seq: Int?
        var isFinal: Bool?
        var text: String?
        var interrupt: Bool?
        var arrived: ContinuousClock.Instant
    }

    private struct State {
        var calls: [Call] = []
        var commands: [Command] = []
        var sessions: [String: (status: Int, polls: Int, started: Bool, closes: Int, userID: String)] = [:]
        var created: [String] = []
        var channels: [Int: (channel: any Channel, sessionID: String)] = [:]
        var connections = 0
        var rejectedChannels = 0
        var nextSession = 318552187863054171
        var speech = 0
    }

    let options: Options
    private let state = Mutex(State())
    private let serverChannel: Mutex<(any Channel)?> = Mutex(nil)
    private let boundPort = Atomic<Int>(0)

    init(_ options: Options = Options()) {
        self.options = options
    }

    /// The port bound by ``start()``.
    var port: Int { boundPort.load(ordering: .relaxed) }
    /// `http://127.0.0.1:PORT` or `https://localhost:PORT`.
    var baseURL: String { options.tls == nil ? "http://127.0.0.1:\(port)" : "https://localhost:\(port)" }

    // MARK: observations

    var calls: [Call] { state.withLock { $0.calls } }
    var commands: [Command] { state.withLock { $0.commands } }
    /// Session ids created, in order.
    var created: [String] { state.withLock { $0.created } }
    /// Successful closesession calls per session id.
    func closes(_ id: String) -> Int { state.withLock { $0.sessions[id]?.closes ?? 0 } }
    /// Whether startsession succeeded for `id`.
    func started(_ id: String) -> Bool { state.withLock { $0.sessions[id]?.started ?? false } }
    /// Command channels accepted so far.
    var connections: Int { state.withLock { $0.connections } }
    /// Channel upgrades refused (bad signature or unknown session).
    var rejectedChannels: Int { state.withLock { $0.rejectedChannels } }
    /// Channels open now.
    var openChannels: Int { state.withLock { $0.channels.count } }
    /// Sessions created and not closed.
    var openSessions: [String] { state.withLock { s in s.created.filter { (s.sessions[$0]?.closes ?? 0) == 0 } } }

    /// Calls of `operation` accepted.
    func accepted(_ operation: String) -> Int { calls.filter { $0.operation == operation && $0.accepted }.count }

    /// Polls `condition` every 10 ms until it holds or `timeout` passes; returns whether it held.
    func wait(timeout: Duration = .seconds(10), _ condition: @Sendable () -> Bool) async -> Bool {
        let end = ContinuousClock.now + timeout
        while ContinuousClock.now < end {
            if condition() { return true }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return condition()
    }

    // MARK: control

    /// Sends `json` to every open channel.
    func push(_ json: String) {
        let chans = state.withLock { Array($0.channels.values.map(\.channel)) }
        for c in chans { Self.sendText(json, on: c) }
    }

    /// Closes every open channel abruptly (no close frame), as a network failure would.
    func dropChannels() {
        let chans = state.withLock { s -> [any Channel] in let c = s.channels.values.map(\.channel); s.channels = [:]; return c }
        for c in chans { c.close(mode: .all, promise: nil) }
    }

    // MARK: lifecycle

    func start() async throws {
        let bootstrap = ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(ChannelOptions.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { [self] channel in
                channel.eventLoop.makeCompletedFuture {
                    try self.configure(channel)
                }
            }
        let ch = try await bootstrap.bind(host: "127.0.0.1", port: 0).get()
        boundPort.store(ch.localAddress?.port ?? 0, ordering: .relaxed)
        serverChannel.withLock { $0 = ch }
    }

    func stop() async {
        dropChannels()
        let ch = serverChannel.withLock { c -> (any Channel)? in let x = c; c = nil; return x }
        try? await ch?.close()
    }

    private func configure(_ channel: any Channel) throws {
        let sync = channel.pipeline.syncOperations
        if let tls = options.tls {
            try sync.addHandler(NIOSSLServerHandler(context: tls))
        }
        let upgrader = NIOWebSocketServerUpgrader(
            maxFrameSize: 1 << 22,
            shouldUpgrade: { [self] channel, head in
                let ok = self.acceptChannel(head) != nil
                if !ok { self.state.withLock { $0.rejectedChannels += 1 } }
                return channel.eventLoop.makeSucceededFuture(ok ? HTTPHeaders() : nil)
            },
            upgradePipelineHandler: { [self] channel, head in
                channel.eventLoop.makeCompletedFuture {
                    let session = self.acceptChannel(head) ?? ""
                    let id = self.state.withLock { s -> Int in
                        s.connections += 1
                        s.channels[s.connections] = (channel, session)
                        return s.connections
                    }
                    try channel.pipeline.syncOperations.addHandler(IVHWebSocketHandler(server: self, connection: id, sessionID: session))
                }
            })
        try sync.configureHTTPServerPipeline(withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
            context.pipeline.removeHandler(name: "ivh-http", promise: nil)
        }))
        try sync.addHandler(IVHHTTPHandler(server: self), name: "ivh-http")
    }

    // MARK: protocol

    /// Checks `appkey`, `timestamp` (±5 minutes) and `signature` of a raw query string.
    func verify(query: String, requireRequestID: Bool) -> Bool {
        var params: [String: String] = [:]
        for pair in query.split(separator: "&") {
            let kv = pair.split(separator: "=", maxSplits: 1).map(String.init)
            guard kv.count == 2 else { return false }
            // Form decoding: an unencoded "+" would turn into a space and break the signature.
            params[kv[0]] = kv[1].replacingOccurrences(of: "+", with: " ").removingPercentEncoding
        }
        guard let sig = params.removeValue(forKey: "signature"), params["appkey"] == options.appkey,
              let ts = params["timestamp"].flatMap(Int.init), abs(ts - Int(Date().timeIntervalSince1970)) <= 300 else { return false }
        if requireRequestID != (params["requestid"] != nil) { return false }
        let text = params.keys.sorted().map { "\($0)=\(params[$0]!)" }.joined(separator: "&")
        let mac = HMAC<SHA256>.authenticationCode(for: Data(text.utf8), using: SymmetricKey(data: Data(options.accessToken.utf8)))
        return Data(mac).base64EncodedString() == sig
    }

    private func acceptChannel(_ head: HTTPRequestHead) -> String? {
        let parts = head.uri.split(separator: "?", maxSplits: 1).map(String.init)
        guard parts.count == 2, parts[0] == "/v2/ws/ivh/streammanager/streamservice/commandchannel",
              verify(query: parts[1], requireRequestID: true) else { return nil }
        let rid = parts[1].split(separator: "&").first { $0.hasPrefix("requestid=") }.map { String($0.dropFirst(10)).removingPercentEncoding ?? "" }
        guard let rid, state.withLock({ $0.sessions[rid].map { $0.closes == 0 && $0.started } ?? false }) else { return nil }
        return rid
    }

    /// Answers one HTTP request: (status, JSON body).
    func handle(method: HTTPMethod, uri: String, body: String) -> (HTTPResponseStatus, String) {
        let parts = uri.split(separator: "?", maxSplits: 1).map(String.init)
        let path = parts[0]
        let prefix = "/v2/ivh/streammanager/streamservice/"
        if path.hasPrefix("/v2/ws/") {
            return (.unauthorized, Self.reply(code: 100005, message: "signature verification failed", payload: [:]))
        }
        guard path.hasPrefix(prefix), method == .POST else { return (.notFound, Self.reply(code: 100001, message: "no such operation", payload: [:])) }
        let op = String(path.dropFirst(prefix.count))
        guard parts.count == 2, verify(query: parts[1], requireRequestID: false) else {
            record(op, body, false, 100005)
            return (.ok, Self.reply(code: 100005, message: "signature verification failed", payload: [:]))
        }
        let root = (try? JSONSerialization.jsonObject(with: Data(body.utf8))) as? [String: Any]
        guard let root, root["Header"] is [String: Any], let payload = root["Payload"] as? [String: Any] else {
            record(op, body, false, 100001)
            return (.ok, Self.reply(code: 100001, message: "request must be {Header, Payload}", payload: [:]))
        }
        if let code = options.failures[op] {
            record(op, body, false, code)
            return (.ok, Self.reply(code: code, message: "scripted failure", payload: [:]))
        }
        let sid = payload["SessionId"] as? String ?? ""
        var out: [String: Any] = [:]
        var code = 0
        state.withLock { s in
            switch op {
            case "newsession":
                guard let user = payload["UserId"] as? String, payload["DriverType"] is Int else { code = 100001; return }
                s.nextSession += 1
                let id = (payload["SessionId"] as? String).flatMap { $0.isEmpty ? nil : $0 } ?? "m\(s.nextSession)"
                s.sessions[id] = (options.initialStatus, 0, false, 0, user)
                s.created.append(id)
                out = ["SessionId": id, "SessionStatus": options.initialStatus,
                       "PlayStreamAddr": options.initialStatus == 1 ? "webrtc://liveplay.example/live/\(id)" : ""]
            case "statsession":
                guard var e = s.sessions[sid] else { code = 110006; return }
                e.polls += 1
                if e.status == 3 && e.polls >= options.readyAfterPolls { e.status = 1 }
                if e.closes > 0 { e.status = 2 }
                s.sessions[sid] = e
                out = ["SessionStatus": e.status, "PlayStreamAddr": e.status == 1 ? "webrtc://liveplay.example/live/\(sid)" : "",
                       "SpeakStatus": "speak_over", "IsSessionStarted": e.started]
            case "startsession":
                guard var e = s.sessions[sid], e.closes == 0 else { code = 110006; return }
                guard e.status == 1 else { code = 110014; return }
                e.started = true
                s.sessions[sid] = e
            case "closesession":
                guard var e = s.sessions[sid], e.closes == 0 else { code = 110006; return }
                e.closes += 1
                s.sessions[sid] = e
            case "listsessionofuin":
                out = ["Sessions": s.created.compactMap { id -> [String: Any]? in
                    guard let e = s.sessions[id], e.closes == 0 else { return nil }
                    return ["SessionId": id, "UserId": e.userID, "SessionStatus": e.status, "DriverType": 1, "IsSessionStarted": e.started,
                            "PlayStreamAddr": "webrtc://liveplay.example/live/\(id)"]
                }]
            case "command":
                guard let e = s.sessions[sid], e.closes == 0, e.started else { code = 110016; return }
            case "getconfig":
                out = ["Protocols": ["rtmp", "trtc", "webrtc"]]
            case "configsession":
                // The published rules: a running session; SpaceParam needs its three numbers in range.
                guard let e = s.sessions[sid], e.closes == 0, e.status == 1 else { code = 110006; return }
                if let space = payload["SpaceParam"] as? [String: Any] {
                    guard let x = space["ImagePosition"] as? Double, (-0.5...0.5).contains(x),
                          let y = space["ImagePositionVertical"] as? Double, (-0.5...0.25).contains(y),
                          space["ImageZoom"] is Double else { code = 100002; return }
                }
            default:
                code = 100001
            }
        }
        record(op, body, code == 0, code)
        return (.ok, Self.reply(code: code, message: code == 0 ? "" : "refused", payload: out))
    }

    private func record(_ op: String, _ body: String, _ accepted: Bool, _ code: Int) {
        state.withLock { $0.calls.append(Call(operation: op, body: body, accepted: accepted, code: code)) }
    }

    static func reply(code: Int, message: String, payload: [String: Any]) -> String {
        let root: [String: Any] = ["Header": ["Code": code, "Message": message, "RequestID": "test"], "Payload": payload]
        let d = (try? JSONSerialization.data(withJSONObject: root, options: [.sortedKeys])) ?? Data()
        return String(decoding: d, as: UTF8.self)
    }

    /// Handles one text message from channel `connection`.
    func received(_ text: String, connection: Int, sessionID: String) -> [String] {
        let root = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any]
        let p = root?["Payload"] as? [String: Any] ?? [:]
        let data = p["Data"] as? [String: Any] ?? [:]
        let cmd = p["Command"] as? String ?? "?"
        var bytes: Int?
        if cmd == "SEND_AUDIO" { bytes = (data["Audio"] as? String).flatMap { Data(base64Encoded: $0) }?.count ?? -1 }
        let c = Command(connection: connection, command: cmd, sessionID: p["SessionId"] as? String ?? "", audioBytes: bytes,
                        seq: data["Seq"] as? Int, isFinal: data["IsFinal"] as? Bool, text: data["Text"] as? String,
                        interrupt: data["Interrupt"] as? Bool, arrived: .now)
        let speech = state.withLock { s -> Int in s.commands.append(c); s.speech += 1; return s.speech }
        guard cmd == "SEND_TEXT", options.echoSpeech, let t = c.text, !t.isEmpty else { return [] }
        func msg(_ payload: [String: Any]) -> String {
            var p = payload
            p["SessionId"] = sessionID
            return Self.reply(code: 0, message: "", payload: p)
        }
        return [msg(["Type": 1, "Text": t]), msg(["Type": 3, "SpeakStatus": "speak_start", "SpeechId": speech]),
                msg(["Type": 2, "Text": "echo: \(t)", "TextDisplay": "echo: \(t)", "SpeechId": speech]),
                msg(["Type": 3, "SpeakStatus": "speak_over", "SpeechId": speech])]
    }

    func channelClosed(_ connection: Int) {
        state.withLock { _ = $0.channels.removeValue(forKey: connection) }
    }

    static func sendText(_ text: String, on channel: any Channel) {
        var buffer = channel.allocator.buffer(capacity: text.utf8.count)
        buffer.writeString(text)
        channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, data: buffer), promise: nil)
    }
}

/// HTTP side of ``IVHServer``.
final class IVHHTTPHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let server: IVHServer
    var head: HTTPRequestHead?
    var body = ""

    init(server: IVHServer) { self.server = server }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h; body = ""
        case .body(var b): body += b.readString(length: b.readableBytes) ?? ""
        case .end:
            guard let h = head else { return }
            let (status, text) = server.handle(method: h.method, uri: h.uri, body: body)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: "application/json")
            headers.add(name: "Content-Length", value: String(text.utf8.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: h.version, status: status, headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: text)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
            head = nil
        }
    }
}

/// WebSocket side of ``IVHServer``.
final class IVHWebSocketHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let server: IVHServer
    let connection: Int
    let sessionID: String
    var partial = ""

    init(server: IVHServer, connection: Int, sessionID: String) {
        self.server = server
        self.connection = connection
        self.sessionID = sessionID
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .continuation:
            var d = frame.unmaskedData
            partial += d.readString(length: d.readableBytes) ?? ""
            guard frame.fin else { return }
            let text = partial
            partial = ""
            for reply in server.received(text, connection: connection, sessionID: sessionID) {
                IVHServer.sendText(reply, on: context.channel)
            }
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        case .connectionClose:
            var d = context.channel.allocator.buffer(capacity: 2)
            d.write(webSocketErrorCode: .normalClosure)
            let channel = context.channel
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .connectionClose, data: d))).whenComplete { _ in
                channel.close(promise: nil)
            }
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        server.channelClosed(connection)
        context.fireChannelInactive()
    }
}
