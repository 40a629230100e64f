import AsyncHTTPClient
import Foundation
import NIOCore
import PipelineCore

/// `webhook`: POSTs each input text as JSON to a URL and passes on the text it answers.
///
/// The request body is `{"text": ..., "node": <id>, "turn": <n>, "ts": <seconds since start>}`
/// with `Content-Type: application/json` (plus `headers`, never logged). The answer is JSON
/// `{"text": ...}` (or a JSON string), or plain text; it goes out on `text` one frame per sentence.
/// An empty answer, or JSON without `text`, answers nothing. Texts are answered one at a time, in
/// order.
///
/// Events: `response_start` (`text`), `response_end` (`text` answered, `status`, `total_ms`,
/// `sentences`), `error` (`code` `http_429`, `http_5xx`, `timeout`, `unreachable` or
/// `bad_response`, `message`, `text`, `attempts`, `status`). 429, 5xx and an unreachable server are
/// tried again `reconnect_attempts` times with back-off; a server silent for `timeout_ms` fails
/// the turn; either way the node goes on with the next text. Any event on the optional `interrupt`
/// input cancels the request in flight and drops what was not passed on. Every answer is bounded: an
/// answer body over `max_answer_bytes`, or one not complete `answer_timeout_ms` after the request (a
/// server that trickles it), closes the request with an `error` `answer_too_long` or `answer_timeout`
/// (and `limit`, the parameter); both are counted.
///
/// ```yaml
/// hook: { type: webhook, url: "https://example.com/answer", headers: { Authorization: "Bearer ${HOOK_TOKEN}" } }
/// ```
public actor WebhookNode: Node {
    let url: String
    let headers: [String: String]
    let policy: ResponderRetryPolicy
    let timeout: Duration
    let maxAnswerBytes: Int
    let answerTimeout: Duration
    private var turns = 0
    /// The signal of the turn in flight, and whether it was interrupted.
    private var current: (signal: AsyncStream<Void>.Continuation, interrupted: Bool)?

    init(configuration c: Configuration) {
        url = c.url
        headers = c.headers ?? [:]
        policy = ResponderRetryPolicy(retries: c.reconnectAttempts, initialDelay: .milliseconds(c.retryBackoffMs))
        timeout = .milliseconds(c.timeoutMs)
        maxAnswerBytes = c.maxAnswerBytes
        answerTimeout = .milliseconds(c.answerTimeoutMs)
    }

    var displayURL: String { HTTPUploadNode.redact(url) }

    public func run(_ context: NodeContext) async throws {
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: ChatNode.httpConfiguration(timeout: timeout))
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                if context.connectedInputs.contains("interrupt") {
                    group.addTask {
                        for await frame in context.input("interrupt") where frame.event != nil { await self.interrupt() }
                    }
                }
                for await frame in context.input("in") {
                    guard let text = frame.text?.trimmingCharacters(in: .whitespacesAndNewlines), !text.isEmpty else { continue }
                    try await self.respond(text, pts: frame.pts, http: http, context: context)
                }
                group.cancelAll()
            }
        } catch {
            try? await http.shutdown()
            throw error
        }
        try await http.shutdown()
    }

    /// What one request brought back.
    struct Answer: Sendable {
        var status: Int
        var text: String?
    }

    private func respond(_ asked: String, pts: Int64, http: HTTPClient, context: NodeContext) async throws {
        let pacer = context.makePacer()
        let (signal, continuation) = AsyncStream<Void>.makeStream()
        current = (continuation, false)
        defer { current = nil }
        turns += 1
        try await context.emit(.responseStart, [("text", .string(asked))])
        let request = try makeRequest(asked, id: context.id, turn: turns, ts: context.elapsed)
        let (policy, timeout, clock, display) = (self.policy, self.timeout, context.clock, displayURL)
        let (maxAnswerBytes, answerTimeout) = (self.maxAnswerBytes, self.answerTimeout)
        let result: Result<Answer, ResponderFailure>? = await withTaskGroup(of: Result<Answer, ResponderFailure>??.self) { group in
            group.addTask {
                let box = AnswerBox()
                do {
                    try await ResponderAttempts.run(policy: policy, timeout: timeout, clock: clock, url: display,
                                                    retrying: { failure, attempt, delay in
                        context.count("retries")
                        context.logger.warning("webhook: \(failure.message); retry \(attempt) of \(policy.retries) in \(ResponderActivity.millis(delay)) ms")
                    }, { activity in
                        box.set(try await Self.post(request, http: http, activity: activity, url: display, maxAnswerBytes: maxAnswerBytes))
                    })
                    return box.value.map { .success($0) }
                } catch let failure as ResponderFailure {
                    return .failure(failure)
                } catch {
                    return nil
                }
            }
            group.addTask {
                for await _ in signal { return .some(nil) }   // interrupted
                return nil
            }
            group.addTask {
                // The whole answer's deadline (the watchdog bounds silence only: a trickle passes it).
                do { try await clock.sleep(for: answerTimeout) } catch { return nil }
                return .failure(ResponderFailure(.answerTimeout, "the answer from \(display) took longer than answer_timeout_ms (\(ResponderActivity.millis(answerTimeout)) ms); the request was closed"))
            }
            var first: Result<Answer, ResponderFailure>?
            while let r = await group.next() {
                if let r { first = r; break }
            }
            group.cancelAll()
            return first
        }
        continuation.finish()
        switch result {
        case .success(let answer)?:
            var sent: [String] = []
            for sentence in ResponderSentences.split(answer.text ?? "") {
                guard current?.interrupted == false else { break }
                sent.append(sentence)
                try await context.output("text").send(.text(sentence, pts: pts))
            }
            var fields: [(String, EventValue)] = [("text", .string(ASRNode.join(sent))), ("status", .int(Int64(answer.status))),
                                                  ("total_ms", .int(ResponderActivity.millis(pacer.elapsed))),
                                                  ("sentences", .int(Int64(sent.count)))]
            if current?.interrupted == true { fields.append(("interrupted", .bool(true))) }
            try await context.emit(.responseEnd, fields)
        case .failure(let failure)?:
            var event = Event.error(code: failure.code.rawValue, message: failure.message)
            event.fields += [("text", .string(asked)), ("attempts", .int(Int64(failure.attempts)))]
            if let status = failure.status { event.fields.append(("status", .int(Int64(status)))) }
            switch failure.code {
            case .answerTooLong: event.fields.append(("limit", .string("max_answer_bytes")))
            case .answerTimeout: event.fields.append(("limit", .string("answer_timeout_ms")))
            default: break
            }
            if let counter = failure.code.counter { context.count(counter) }
            context.count("failed_turns")
            try await context.emit(event)
        case nil:
            context.count("interruptions")
            try await context.emit(.responseEnd, [("text", ""), ("total_ms", .int(ResponderActivity.millis(pacer.elapsed))),
                                                    ("sentences", 0), ("interrupted", true)])
        }
    }

    private func interrupt() {
        guard current != nil else { return }
        current?.interrupted = true
        current?.signal.yield()
    }

    private func makeRequest(_ text: String, id: String, turn: Int, ts: Double) throws -> HTTPClientRequest {
        var request = HTTPClientRequest(url: url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "application/json, text/plain")
        for (k, v) in headers { request.headers.replaceOrAdd(name: k, value: v) }
        let body: [String: Any] = ["text": text, "node": id, "turn": turn, "ts": (ts * 1000).rounded() / 1000]
        request.body = .bytes(ByteBuffer(data: try JSONSerialization.data(withJSONObject: body, options: [.sortedKeys, .withoutEscapingSlashes])))
        return request
    }

    /// One attempt: sends the request and reads the answer.
    static func post(_ request: HTTPClientRequest, http: HTTPClient, activity: ResponderActivity, url: String,
                     maxAnswerBytes: Int = 1 << 20) async throws -> Answer {
        let response = try await http.execute(request, deadline: .distantFuture)
        activity.touch()
        guard (200..<300).contains(response.status.code) else {
            let body = try await ChatClient.collect(response.body, limit: 16 << 10, activity: activity)
            throw ResponderFailure.status(response.status, headers: response.headers, body: body, url: url)
        }
        let body = try await ChatClient.collectBounded(response.body, limit: maxAnswerBytes, parameter: "max_answer_bytes", url: url, activity: activity)
        let text = try answer(body: body, contentType: response.headers.first(name: "Content-Type") ?? "", url: url)
        return Answer(status: Int(response.status.code), text: text)
    }

    /// The text of an answer: JSON `{"text": ...}` or a JSON string, or plain text; nil for an
    /// empty answer or JSON without `text`.
    static func answer(body: [UInt8], contentType: String, url: String) throws -> String? {
        let raw = String(decoding: body, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        if raw.isEmpty { return nil }
        let saysJSON = contentType.lowercased().contains("json")
        if saysJSON || raw.first == "{" || raw.first == "\"" {
            if let value = try? JSONSerialization.jsonObject(with: Data(raw.utf8), options: [.fragmentsAllowed]) {
                if let s = value as? String { return s }
                if let object = value as? [String: Any] {
                    switch object["text"] {
                    case nil, is NSNull: return nil
                    case let s as String: return s
                    default: throw ResponderFailure(.badResponse, "\(url) answered JSON whose \"text\" is not a string")
                    }
                }
                throw ResponderFailure(.badResponse, "\(url) answered JSON that is neither an object with \"text\" nor a string")
            }
            if saysJSON {
                throw ResponderFailure(.badResponse, "\(url) answered Content-Type \(contentType) that is not JSON: \(ChatStreamParser.snippet(raw))")
            }
        }
        return raw
    }

    /// Configuration of `webhook`.
    public struct Configuration: NodeConfiguration {
        /// `http://` or `https://` URL to POST to.
        public var url: String
        /// Extra request headers (never logged).
        public var headers: [String: String]?
        /// Silence from the server that fails a request, in milliseconds.
        public var timeoutMs: Int
        /// Attempts after the first for 429, 5xx and an unreachable server.
        public var reconnectAttempts: Int
        /// Delay before the first retry, in milliseconds (doubles, up to 8 s).
        public var retryBackoffMs: Int
        /// Largest answer body, in bytes.
        public var maxAnswerBytes: Int
        /// Longest time for a whole answer, retries included, in milliseconds.
        public var answerTimeoutMs: Int

        /// The parameters of `webhook`.
        public static let parameters = [
            ParamSpec("url", .string, required: true, doc: "http:// or https:// URL each text is POSTed to as JSON {text, node, turn, ts}"),
            ParamSpec("headers", .stringMap, secret: true, doc: "extra request headers (e.g. Authorization); never logged"),
            ParamSpec("timeout_ms", .int(100...600_000), default: 10000, doc: "no answer this long: the request is cancelled (error timeout)"),
            ParamSpec("reconnect_attempts", .int(0...100), default: 2, doc: "retries after 429, 5xx or an unreachable server, before the text is given up"),
            ParamSpec("retry_backoff_ms", .int(0...60_000), default: 500, doc: "delay before the first retry (doubles, up to 8 s)"),
            ParamSpec("max_answer_bytes", .int(1...16_777_216), default: 1_048_576, doc: "largest answer body: past it the request is closed and an error answer_too_long says so"),
            ParamSpec("answer_timeout_ms", .int(100...3_600_000), default: 60_000, doc: "longest time for a whole answer, retries included (a server trickling its answer): past it the request is closed and an error answer_timeout says so"),
        ]

        /// The URL must be `http://` or `https://` with a host.
        public func problems() -> [String] { ResponderURL.problems(url) }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "webhook", summary: "POSTs each text as JSON to a URL and passes on the text it answers",
        family: "services",
        inputs: [PortSpec("in", [.text], doc: "each text (e.g. a final transcript) is one request"),
                 .interrupt("any event cancels the request in flight")],
        outputs: [PortSpec("text", [.text], doc: "the answer, one frame per sentence"), .events],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in WebhookNode(configuration: c) })
}

extension WebhookNode.Configuration: CustomReflectable {
    /// Every field with header values hidden, so printing a configuration never shows a token.
    public var customMirror: Mirror {
        Mirror(self, children: ["url": HTTPUploadNode.redact(url), "headers": (headers ?? [:]).mapValues { _ in "(secret)" },
                                "timeoutMs": timeoutMs, "reconnectAttempts": reconnectAttempts, "retryBackoffMs": retryBackoffMs,
                                "maxAnswerBytes": maxAnswerBytes, "answerTimeoutMs": answerTimeoutMs])
    }
}

/// The answer of the attempt that succeeded, handed out of the retry loop.
private final class AnswerBox: Sendable {
    private let stored = LockedValue<WebhookNode.Answer?>(nil)
    func set(_ a: WebhookNode.Answer) { stored.withLock { $0 = a } }
    var value: WebhookNode.Answer? { stored.withLock { $0 } }
}
