import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix
import Synchronization

/// A local server of the OpenAI-compatible streaming chat API for tests, on 127.0.0.1: answers
/// `POST /v1/chat/completions` as the published protocol says — `text/event-stream`, one
/// `data: {chat.completion.chunk}` event per piece with `choices[0].delta.content`, then
/// `data: [DONE]` — or with the status a test asks for (429, 500, ...), or not at all (a stalled
/// server). A reply may stop at ``Step/hold`` until the test calls ``release()``; the server
/// records each request, whether its answer was sent to the end and when the client closed the
/// connection (a cancelled request).
final class ChatTestServer: Sendable {
    /// One step of a streamed answer.
    enum Step: Sendable {
        /// A chunk event carrying `content` as `choices[0].delta.content`.
        case chunk(String)
        /// Bytes written as they are (for SSE framing tests).
        case raw(String)
        /// `data: [DONE]`.
        case done
        /// Waits until ``ChatTestServer/release()`` (or until the client closes the connection).
        case hold
        /// Writes these bytes again and again, `interval` apart, until the client closes the connection
        /// (a server that never ends its answer, or trickles it).
        case forever(String, interval: Duration)
    }

    /// What the server answers to one request.
    struct Reply: Sendable {
        var status = 200
        var headers: [(String, String)] = [("Content-Type", "text/event-stream"), ("Cache-Control", "no-cache")]
        /// Written before the steps (error bodies).
        var body = ""
        var steps: [Step] = []
        /// Never answers (no status line): holds until the client goes.
        var silent = false

        /// A streamed answer of `pieces`, then a finish chunk and `[DONE]`.
        static func stream(_ pieces: [String]) -> Reply {
            Reply(steps: [.raw(ChatTestServer.roleChunk)] + pieces.map { .chunk($0) } + [.raw(ChatTestServer.finishChunk), .done])
        }

        /// A streamed answer that stops after `pieces` and holds, then sends `rest` and `[DONE]`.
        static func stream(_ pieces: [String], holdThen rest: [String]) -> Reply {
            Reply(steps: pieces.map { .chunk($0) } + [.hold] + rest.map { .chunk($0) } + [.done])
        }

        /// An error answer with an OpenAI-style error body.
        static func status(_ status: Int, _ message: String = "test failure", headers: [(String, String)] = []) -> Reply {
            Reply(status: status, headers: [("Content-Type", "application/json")] + headers,
                  body: #"{"error":{"message":"\#(message)","type":"test_error"}}"#)
        }

        /// A server that accepts the request and never answers.
        static let stall = Reply(silent: true)
    }

    /// One request as the server saw it.
    struct Request: Sendable {
        var method = ""
        var uri = ""
        var headers: [(String, String)] = []
        var body: [UInt8] = []
        var headAt: ContinuousClock.Instant
        /// The answer was written to its end.
        var completedAt: ContinuousClock.Instant?
        /// The client closed the connection (before or after the answer).
        var closedAt: ContinuousClock.Instant?
        /// Writes of a ``Step/forever`` step so far.
        var forever = 0

        func header(_ name: String) -> String? { headers.first { $0.0.lowercased() == name.lowercased() }?.1 }

        /// The request body as JSON.
        var json: [String: Any] { (try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any]) ?? [:] }

        /// `messages` as (role, content) pairs.
        var messages: [[String]] {
            ((json["messages"] as? [[String: Any]]) ?? []).map { [$0["role"] as? String ?? "", $0["content"] as? String ?? ""] }
        }
    }

    let port: Int
    private let reply: @Sendable (Int) -> Reply
    private let state = Mutex(State())
    private let channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>
    private let task = Mutex<Task<Void, Never>?>(nil)

    private struct State {
        var requests: [Request] = []
        var released = false
        var closedConnections: Set<Int> = []
    }

    private init(port: Int, channel: NIOAsyncChannel<NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, Never>,
                 reply: @escaping @Sendable (Int) -> Reply) {
        self.port = port
        self.channel = channel
        self.reply = reply
    }

    /// Starts a server whose answer to the n-th request (from 0) is `reply(n)`.
    static func start(_ reply: @escaping @Sendable (Int) -> Reply) async throws -> ChatTestServer {
        let channel = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .bind(host: "127.0.0.1", port: 0) { child in
                child.eventLoop.makeCompletedFuture {
                    try child.pipeline.syncOperations.configureHTTPServerPipeline()
                    return try NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>(wrappingChannelSynchronously: child)
                }
            }
        let server = ChatTestServer(port: channel.channel.localAddress!.port!, channel: channel, reply: reply)
        let t = Task<Void, Never> {
            _ = try? await channel.executeThenClose { inbound in
                try await withThrowingDiscardingTaskGroup { group in
                    var connection = 0
                    for try await child in inbound {
                        connection += 1
                        let id = connection
                        group.addTask { await server.serve(child, connection: id) }
                    }
                }
            }
        }
        server.task.withLock { $0 = t }
        return server
    }

    /// Starts a server that gives the replies in order (the last one repeats).
    static func start(_ replies: [Reply]) async throws -> ChatTestServer {
        try await start { i in replies[min(i, replies.count - 1)] }
    }

    /// The base URL (`http://127.0.0.1:<port>`): the `chat` node adds `/v1/chat/completions`.
    var baseURL: String { "http://127.0.0.1:\(port)" }

    /// Every request so far.
    var requests: [Request] { state.withLock { $0.requests } }

    /// Lets every held answer (and later holds) go on.
    func release() { state.withLock { $0.released = true } }

    /// Stops listening and drops every connection.
    func shutdown() async {
        let t = task.withLock { $0 }
        t?.cancel()
        try? await channel.channel.close()
        await t?.value
    }

    /// Waits (real time, up to `timeout`) until `condition` holds for the requests.
    @discardableResult
    func wait(timeout: Duration = .seconds(10), until condition: ([Request]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition(requests) {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }

    private func serve(_ child: NIOAsyncChannel<HTTPServerRequestPart, HTTPServerResponsePart>, connection: Int) async {
        let onThisConnection = Mutex<[Int]>([])
        child.channel.closeFuture.whenComplete { _ in
            let now = ContinuousClock.now
            let indices = onThisConnection.withLock { $0 }
            self.state.withLock { s in
                s.closedConnections.insert(connection)
                for i in indices where s.requests[i].closedAt == nil { s.requests[i].closedAt = now }
            }
        }
        try? await child.executeThenClose { inbound, outbound in
            var index = -1
            for try await part in inbound {
                switch part {
                case .head(let head):
                    index = state.withLock { s in
                        var r = Request(headAt: .now)
                        r.method = head.method.rawValue
                        r.uri = head.uri
                        r.headers = head.headers.map { ($0.name, $0.value) }
                        s.requests.append(r)
                        return s.requests.count - 1
                    }
                    let i = index
                    onThisConnection.withLock { $0.append(i) }
                case .body(let bytes):
                    let i = index
                    state.withLock { $0.requests[i].body += Array(bytes.readableBytesView) }
                case .end:
                    try await answer(reply(index), index: index, connection: connection, outbound: outbound)
                }
            }
        }
    }

    private func answer(_ reply: Reply, index: Int, connection: Int,
                        outbound: NIOAsyncChannelOutboundWriter<HTTPServerResponsePart>) async throws {
        if reply.silent {
            try await hold(connection: connection, forever: true)
            return
        }
        // `{{authorization}}` in a body stands for the request's Authorization header (a server that
        // echoes it, as some proxies and mock servers do).
        let authorization = state.withLock { $0.requests[index].header("Authorization") } ?? ""
        func echo(_ s: String) -> String { s.replacingOccurrences(of: "{{authorization}}", with: authorization) }
        var reply = reply
        reply.body = echo(reply.body)
        var headers = HTTPHeaders()
        for (k, v) in reply.headers { headers.add(name: k, value: v) }
        if reply.steps.isEmpty { headers.add(name: "Content-Length", value: String(reply.body.utf8.count)) }
        try await outbound.write(.head(HTTPResponseHead(version: .http1_1, status: HTTPResponseStatus(statusCode: reply.status), headers: headers)))
        if !reply.body.isEmpty { try await outbound.write(.body(.byteBuffer(ByteBuffer(string: reply.body)))) }
        for step in reply.steps {
            switch step {
            case .chunk(let content): try await outbound.write(.body(.byteBuffer(ByteBuffer(string: Self.chunk(content)))))
            case .raw(let text): try await outbound.write(.body(.byteBuffer(ByteBuffer(string: echo(text)))))
            case .done: try await outbound.write(.body(.byteBuffer(ByteBuffer(string: "data: [DONE]\n\n"))))
            case .hold: try await hold(connection: connection, forever: false)
            case .forever(let text, let interval):
                while !state.withLock({ $0.closedConnections.contains(connection) }) {
                    state.withLock { $0.requests[index].forever += 1 }
                    try await outbound.write(.body(.byteBuffer(ByteBuffer(string: text))))
                    try await Task.sleep(for: interval)
                }
                throw Closed()
            }
        }
        try await outbound.write(.end(nil))
        state.withLock { $0.requests[index].completedAt = .now }
    }

    private struct Closed: Error {}

    /// Waits for ``release()`` (unless `forever`) or the client's close.
    private func hold(connection: Int, forever: Bool) async throws {
        while true {
            let (released, closed) = state.withLock { ($0.released, $0.closedConnections.contains(connection)) }
            if closed { throw Closed() }
            if released && !forever { return }
            try await Task.sleep(for: .milliseconds(2))
        }
    }

    /// `data: {chat.completion.chunk with content}` and a blank line.
    static func chunk(_ content: String) -> String {
        let object: [String: Any] = [
            "id": "chatcmpl-test", "object": "chat.completion.chunk", "created": 0, "model": "test",
            "choices": [["index": 0, "delta": ["content": content], "finish_reason": NSNull()]],
        ]
        let json = String(decoding: try! JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]), as: UTF8.self)
        return "data: \(json)\n\n"
    }

    /// The first chunk of an OpenAI stream: the role, no content.
    static let roleChunk = #"data: {"id":"chatcmpl-test","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant"},"finish_reason":null}]}"# + "\n\n"
    /// The last chunk before `[DONE]`: an empty delta and the finish reason.
    static let finishChunk = #"data: {"id":"chatcmpl-test","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}"# + "\n\n"
}
