import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A local HTTP/1.1 server for tests that records each request as it arrives: when its head,
/// its first body part and its end came (monotonic time), its headers and its body. Answers each
/// request with the next status of ``statuses`` (the last one repeats) and a short body.
final class HTTPTestServer: Sendable {
    /// One request as the server saw it.
    struct Request: Sendable {
        var method = ""
        var uri = ""
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var bodyParts = 0
        var headAt: ContinuousClock.Instant
        var firstBodyAt: ContinuousClock.Instant?
        var endAt: ContinuousClock.Instant?
        var status = 0

        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }
    }

    let port: Int
    private let channel: any Channel
    private let state: Mutex<State>

    struct State {
        var statuses: [Int]
        var requests: [Request] = []
    }

    /// A fixed answer (content type and body) instead of the default JSON one.
    let answer: (contentType: String, body: [UInt8])?

    private init(port: Int, channel: any Channel, statuses: [Int], answer: (contentType: String, body: [UInt8])?) {
        self.port = port
        self.channel = channel
        self.state = Mutex(State(statuses: statuses))
        self.answer = answer
    }

    /// Starts a server on 127.0.0.1 (a free port).
    static func start(statuses: [Int] = [200], answer: (contentType: String, body: [UInt8])? = nil) async throws -> HTTPTestServer {
        let box = HTTPServerBox()
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(RecordingHandler(server: box.server!))
                }
            }
            .bind(host: "127.0.0.1", port: 0).get()
        let server = HTTPTestServer(port: channel.localAddress!.port!, channel: channel, statuses: statuses, answer: answer)
        box.server = server
        return server
    }

    /// `http://127.0.0.1:<port><path>`.
    func url(_ path: String = "/upload") -> String { "http://127.0.0.1:\(port)\(path)" }

    /// Every request so far (complete or not).
    var requests: [Request] { state.withLock { $0.requests } }

    /// Changes the answers from now on.
    func setStatuses(_ statuses: [Int]) { state.withLock { $0.statuses = statuses } }

    /// Stops listening.
    func shutdown() async { try? await channel.close() }

    fileprivate func begin(_ head: HTTPRequestHead) -> Int {
        state.withLock { s in
            var r = Request(headAt: .now)
            r.method = head.method.rawValue
            r.uri = head.uri
            r.headers = head.headers.map { ($0.name, $0.value) }
            s.requests.append(r)
            return s.requests.count - 1
        }
    }

    fileprivate func body(_ index: Int, _ bytes: ByteBuffer) {
        state.withLock { s in
            if s.requests[index].firstBodyAt == nil { s.requests[index].firstBodyAt = .now }
            s.requests[index].bodyParts += 1
            s.requests[index].body += Array(bytes.readableBytesView)
        }
    }

    fileprivate func end(_ index: Int) -> Int {
        state.withLock { s in
            let status = s.statuses.isEmpty ? 200 : s.statuses.removeFirst()
            if s.statuses.isEmpty { s.statuses = [status] }
            s.requests[index].endAt = .now
            s.requests[index].status = status
            return status
        }
    }
}

private final class HTTPServerBox: @unchecked Sendable {
    // Written once before the first connection can be accepted, then only read.
    var server: HTTPTestServer?
}

/// Records requests; runs on its channel's event loop only.
private final class RecordingHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let server: HTTPTestServer
    var index = -1

    init(server: HTTPTestServer) { self.server = server }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let head):
            index = server.begin(head)
        case .body(let bytes):
            server.body(index, bytes)
        case .end:
            let status = server.end(index)
            let text = status < 300 ? #"{"ok":true,"request":\#(index)}"# : #"{"ok":false,"error":"test failure"}"#
            let body = server.answer?.body ?? Array(text.utf8)
            var headers = HTTPHeaders()
            headers.add(name: "Content-Type", value: server.answer?.contentType ?? "application/json")
            headers.add(name: "Content-Length", value: String(body.count))
            context.write(wrapOutboundOut(.head(HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: status), headers: headers))), promise: nil)
            context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(bytes: body)))), promise: nil)
            context.writeAndFlush(wrapOutboundOut(.end(nil)), promise: nil)
        }
    }
}
