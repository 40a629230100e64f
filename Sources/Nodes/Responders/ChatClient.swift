import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import PipelineCore
import Synchronization

/// One message of a chat request.
struct ChatMessage: Sendable, Hashable, Codable {
    /// `system`, `user` or `assistant`.
    var role: String
    /// The text.
    var content: String

    static func system(_ text: String) -> ChatMessage { ChatMessage(role: "system", content: text) }
    static func user(_ text: String) -> ChatMessage { ChatMessage(role: "user", content: text) }
    static func assistant(_ text: String) -> ChatMessage { ChatMessage(role: "assistant", content: text) }
}

// MARK: - Server-sent events

/// What one server-sent event of a streamed chat completion means.
enum ChatStreamEvent: Sendable, Equatable {
    /// A piece of the answer (`choices[0].delta.content`).
    case delta(String)
    /// The model stopped (`choices[0].finish_reason`: `stop`, `length`, ...).
    case finished(reason: String)
    /// `data: [DONE]`: the stream is complete.
    case done
    /// The server reported an error inside the stream (`{"error": ...}` or `event: error`).
    case failed(String)
    /// A data payload that is neither JSON nor `[DONE]` (its start, for the message).
    case malformed(String)
}

/// Turns the bytes of a `text/event-stream` body into ``ChatStreamEvent``s: the SSE framing of the
/// WHATWG specification (lines ended by LF, CR or CRLF, also split across reads; `data:` with or
/// without a space; several `data:` lines of one event joined by a line feed; comments starting
/// with `:`; an event dispatched at a blank line), then the OpenAI chat-completion chunk inside.
/// Servers that send one `data:` line per chunk without blank lines between them are understood too.
/// Pure value: feed it bytes, read events.
///
/// ```swift
/// var p = ChatStreamParser()
/// p.push(Array("data: {\"choices\":[{\"delta\":{\"content\":\"Hi\"}}]}\n\ndata: [DONE]\n\n".utf8))
/// // [.delta("Hi"), .done]
/// ```
struct ChatStreamParser: Sendable {
    private var line: [UInt8] = []
    private var afterCR = false
    private var data: [String] = []
    private var eventType = ""

    init() {}

    /// Parses the next bytes of the body; returns the events they complete.
    mutating func push<Bytes: Sequence<UInt8>>(_ bytes: Bytes) -> [ChatStreamEvent] {
        var out: [ChatStreamEvent] = []
        for b in bytes {
            switch b {
            case 0x0A:
                if afterCR { afterCR = false; continue }
                endLine(into: &out)
            case 0x0D:
                endLine(into: &out)
                afterCR = true
            default:
                afterCR = false
                line.append(b)
            }
        }
        return out
    }

    /// The end of the body: a last line without its line end, and an event without its blank line,
    /// still count.
    mutating func finish() -> [ChatStreamEvent] {
        var out: [ChatStreamEvent] = []
        if !line.isEmpty { endLine(into: &out) }
        dispatch(into: &out)
        return out
    }

    private mutating func endLine(into out: inout [ChatStreamEvent]) {
        defer { line.removeAll(keepingCapacity: true) }
        if line.isEmpty { dispatch(into: &out); return }
        if line.first == UInt8(ascii: ":") { return }   // a comment (keep-alive)
        let text = String(decoding: line, as: UTF8.self)
        let field: Substring
        var value: Substring
        if let colon = text.firstIndex(of: ":") {
            field = text[..<colon]
            value = text[text.index(after: colon)...]
            if value.first == " " { value = value.dropFirst() }
        } else {
            field = text[...]
            value = ""
        }
        switch field {
        case "data": data.append(String(value))
        case "event": eventType = String(value)
        default: break   // id, retry, unknown fields
        }
    }

    private mutating func dispatch(into out: inout [ChatStreamEvent]) {
        defer { data = []; eventType = "" }
        guard !data.isEmpty else { return }
        let joined = data.joined(separator: "\n")
        var events = Self.interpret(joined)
        // One `data:` line per chunk with no blank line between them: each line on its own.
        if data.count > 1, events.contains(where: { if case .malformed = $0 { true } else { false } }) {
            let each = data.flatMap(Self.interpret)
            if !each.contains(where: { if case .malformed = $0 { true } else { false } }) { events = each }
        }
        if eventType == "error" {
            let message = events.compactMap { if case .failed(let m) = $0 { m } else { nil } }.first
            events = [.failed(message ?? Self.snippet(joined))]
        }
        out += events
    }

    /// The meaning of one event's data: `[DONE]`, or a chat-completion chunk (streamed `delta`, or a
    /// whole `message`), or an error object.
    static func interpret(_ data: String) -> [ChatStreamEvent] {
        let trimmed = data.trimmingCharacters(in: .whitespacesAndNewlines)
        if trimmed == "[DONE]" { return [.done] }
        if trimmed.isEmpty { return [] }
        guard let object = try? JSONSerialization.jsonObject(with: Data(trimmed.utf8)) as? [String: Any] else {
            return [.malformed(snippet(trimmed))]
        }
        if let message = errorMessage(object) { return [.failed(message)] }
        var out: [ChatStreamEvent] = []
        if let choice = (object["choices"] as? [Any])?.first as? [String: Any] {
            let content = ((choice["delta"] as? [String: Any])?["content"] as? String)
                ?? ((choice["message"] as? [String: Any])?["content"] as? String)
                ?? (choice["text"] as? String)
            if let content, !content.isEmpty { out.append(.delta(content)) }
            if let reason = choice["finish_reason"] as? String { out.append(.finished(reason: reason)) }
        }
        return out
    }

    /// The message of an error answer: `{"error": {"message": ...}}`, `{"error": "..."}`,
    /// `{"message": ...}` or `{"detail": ...}`; else the start of the body as text.
    static func errorMessage(body: [UInt8]) -> String {
        if let object = try? JSONSerialization.jsonObject(with: Data(body)) as? [String: Any] {
            if let m = errorMessage(object) { return m }
            if let m = object["message"] as? String { return snippet(m) }
            if let m = object["detail"] as? String { return snippet(m) }
        }
        return snippet(String(decoding: body.prefix(2000), as: UTF8.self))
    }

    private static func errorMessage(_ object: [String: Any]) -> String? {
        guard let error = object["error"], !(error is NSNull) else { return nil }
        if let s = error as? String { return snippet(s) }
        if let e = error as? [String: Any] {
            let message = e["message"] as? String ?? "error"
            let type = (e["type"] as? String) ?? (e["code"] as? String)
            return snippet(type.map { "\(message) (\($0))" } ?? message)
        }
        return "error"
    }

    /// One line of at most 300 characters, safe for a terminal.
    static func snippet(_ text: String) -> String {
        let flat = text.split(whereSeparator: \.isNewline).joined(separator: " ").trimmingCharacters(in: .whitespaces)
        let cut = flat.count > 300 ? String(flat.prefix(300)) + "…" : flat
        return TerminalText.escape(cut, keepNewlines: false)
    }
}

// MARK: - Failures, retries, timeouts

/// A failed request of a responder node, reported as an `error` event with ``code``.
struct ResponderFailure: Error, Sendable, CustomStringConvertible {
    /// The `code` of the `error` event.
    enum Code: String, Sendable {
        /// The server said 429 Too Many Requests.
        case http429 = "http_429"
        /// The server failed (5xx).
        case http5xx = "http_5xx"
        /// No answer, or the answer stalled, for `timeout_ms`.
        case timeout
        /// No connection (refused, unknown host, lost before an answer).
        case unreachable
        /// An answer that is not what the protocol says (another status, bad JSON, an error in the stream).
        case badResponse = "bad_response"
        /// The answer passed its length bound (`max_answer_chars`, `max_answer_bytes`): the rest was not read.
        case answerTooLong = "answer_too_long"
        /// The answer took longer than `answer_timeout_ms` in all.
        case answerTimeout = "answer_timeout"

        /// A bound of the node's (not the server's failure): what came before it is kept.
        var isBound: Bool { self == .answerTooLong || self == .answerTimeout }
        /// The node's counter of the bound.
        var counter: String? {
            switch self {
            case .answerTooLong: "answers_too_long"
            case .answerTimeout: "answer_timeouts"
            default: nil
            }
        }

        /// Worth another attempt (the server may answer next time).
        var retryable: Bool { self == .http429 || self == .http5xx || self == .unreachable }
    }

    var code: Code
    var message: String
    /// The HTTP status, when there was one.
    var status: Int?
    /// The server's `Retry-After`, when it gave one.
    var retryAfter: Duration?
    /// Attempts made, once the failure is final.
    var attempts = 1

    init(_ code: Code, _ message: String, status: Int? = nil, retryAfter: Duration? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.retryAfter = retryAfter
    }

    var description: String { "\(code.rawValue): \(message)" }

    /// The failure for a non-2xx answer.
    static func status(_ status: HTTPResponseStatus, headers: HTTPHeaders, body: [UInt8], url: String) -> ResponderFailure {
        let code: Code = switch status.code {
        case 429: .http429
        case 500...599: .http5xx
        default: .badResponse
        }
        let retryAfter = headers.first(name: "Retry-After").flatMap { Int($0.trimmingCharacters(in: .whitespaces)) }.map { Duration.seconds($0) }
        var message = "HTTP \(status.code) \(status.reasonPhrase) from \(url)"
        let detail = body.isEmpty ? "" : ChatStreamParser.errorMessage(body: body)
        if !detail.isEmpty { message += ": " + detail }
        return ResponderFailure(code, message, status: Int(status.code), retryAfter: retryAfter)
    }

    /// The failure for an error thrown by the HTTP client (or already a failure).
    static func from(_ error: any Error, url: String) -> ResponderFailure {
        if let f = error as? ResponderFailure { return f }
        return ResponderFailure(.unreachable, "\(url): \(TerminalText.escape(String(describing: error), keepNewlines: false))")
    }
}

/// How often and after how long a responder tries a request again after a retryable failure
/// (429, 5xx, no connection) that came before any of the answer was passed on. Delays double from
/// ``initialDelay`` up to ``maxDelay``; a server's `Retry-After` lengthens one, up to ``maxDelay``.
struct ResponderRetryPolicy: Sendable, Hashable {
    /// Attempts after the first.
    var retries: Int
    /// Delay before the first retry.
    var initialDelay: Duration
    /// Upper bound of a delay.
    var maxDelay: Duration = .seconds(8)

    /// What to do after `failure` on attempt `attempt` (1-based), given whether some of the answer
    /// was already passed on (then a retry would repeat it).
    enum Action: Sendable, Equatable {
        case retry(after: Duration)
        case giveUp
    }

    func action(after failure: ResponderFailure, attempt: Int, delivered: Bool) -> Action {
        guard failure.code.retryable, !delivered, attempt <= retries else { return .giveUp }
        var d = initialDelay
        for _ in 1..<max(attempt, 1) { d = min(d * 2, maxDelay) }
        if let after = failure.retryAfter { d = max(d, after) }
        return .retry(after: min(d, maxDelay))
    }
}

/// What happened during one attempt: when bytes last came (on the node's clock) and whether any of
/// the answer was passed on. The watchdog reads it.
final class ResponderActivity: Sendable {
    private let pacer: Pacer
    private let lastNanos = Atomic<Int64>(0)
    private let deliveredFlag = Atomic<Bool>(false)
    private let receivedFlag = Atomic<Bool>(false)

    init(pacer: Pacer) {
        self.pacer = pacer
    }

    /// Something came from the server.
    func touch() {
        receivedFlag.store(true, ordering: .relaxed)
        lastNanos.store(Self.nanos(pacer.elapsed), ordering: .relaxed)
    }

    /// Part of the answer was passed on: this attempt must not be repeated.
    func markDelivered() { deliveredFlag.store(true, ordering: .relaxed) }

    var delivered: Bool { deliveredFlag.load(ordering: .relaxed) }
    var received: Bool { receivedFlag.load(ordering: .relaxed) }

    /// Returns once nothing has come for `timeout` (throws when cancelled).
    func watch(_ timeout: Duration) async throws {
        var deadline = timeout
        while true {
            try await pacer.wait(until: deadline)
            let last = Duration.nanoseconds(lastNanos.load(ordering: .relaxed))
            if pacer.elapsed - last >= timeout { return }
            deadline = last + timeout
        }
    }

    static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    static func millis(_ d: Duration) -> Int64 {
        d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
    }
}

/// Runs a request with the responder's retry policy, each attempt under a watchdog: an attempt
/// that receives nothing for `timeout` is cancelled (its connection closed) and fails as
/// `timeout`. Throws the final ``ResponderFailure`` (with its attempt count), or
/// `CancellationError` when the calling task is cancelled (an interruption).
enum ResponderAttempts {
    static func run(policy: ResponderRetryPolicy, timeout: Duration, clock: any Clock<Duration>, url: String,
                    retrying: @Sendable (ResponderFailure, _ attempt: Int, _ delay: Duration) async -> Void,
                    _ body: @escaping @Sendable (ResponderActivity) async throws -> Void) async throws {
        var attempt = 0
        while true {
            attempt += 1
            let activity = ResponderActivity(pacer: Pacer(clock: clock))
            let result: Result<Void, any Error> = await withTaskGroup(of: Result<Void, any Error>?.self) { group in
                group.addTask {
                    do { try await body(activity); return .success(()) } catch { return .failure(error) }
                }
                group.addTask {
                    do {
                        try await activity.watch(timeout)
                        let what = activity.received ? "the answer stalled: nothing came" : "no answer"
                        return .failure(ResponderFailure(.timeout, "\(what) from \(url) for \(ResponderActivity.millis(timeout)) ms (timeout_ms)"))
                    } catch {
                        return nil
                    }
                }
                var first: Result<Void, any Error>?
                while let r = await group.next() {
                    if let r { first = r; break }
                }
                group.cancelAll()
                return first ?? .failure(CancellationError())
            }
            if Task.isCancelled { throw CancellationError() }
            let failure: ResponderFailure
            switch result {
            case .success: return
            case .failure(let error as CancellationError): throw error
            case .failure(let error): failure = ResponderFailure.from(error, url: url)
            }
            switch policy.action(after: failure, attempt: attempt, delivered: activity.delivered) {
            case .giveUp:
                var final = failure
                final.attempts = attempt
                throw final
            case .retry(let delay):
                await retrying(failure, attempt, delay)
                try await clock.sleep(for: delay)
            }
        }
    }
}

// MARK: - The chat client

/// A client of the OpenAI-compatible streaming chat API (llama.cpp's server, Ollama, vLLM, ...):
/// `POST {url}/v1/chat/completions` with `{"model", "messages", "stream": true}`, read as
/// server-sent events until `data: [DONE]`. One call is one attempt; ``ResponderAttempts`` adds
/// retries and the watchdog. The API key goes in the `Authorization` header only — never in a
/// message, an event or a log line.
struct ChatClient: Sendable {
    /// The full endpoint URL.
    var endpoint: String
    /// Model name; empty = not sent (servers with one model).
    var model: String
    /// Sent as `Authorization: Bearer`; empty = none.
    var apiKey: String
    var maxTokens: Int?
    var temperature: Double?
    /// Largest non-streamed answer read.
    static let bodyLimit = 4 << 20

    /// `{url}/v1/chat/completions`. A base URL that already ends in `/v1`, or a full
    /// `.../chat/completions` URL, is taken as meant.
    static func endpoint(base: String) -> String {
        var url = base
        while url.hasSuffix("/") { url.removeLast() }
        if url.hasSuffix("/chat/completions") { return url }
        if url.hasSuffix("/v1") { return url + "/chat/completions" }
        return url + "/v1/chat/completions"
    }

    /// The endpoint without user info or query, fit for events and logs.
    var displayURL: String { HTTPUploadNode.redact(endpoint) }

    /// The JSON body of a request.
    func body(_ messages: [ChatMessage]) throws -> [UInt8] {
        struct Body: Encodable {
            var model: String?
            var messages: [ChatMessage]
            var stream = true
            var maxTokens: Int?
            var temperature: Double?
            enum CodingKeys: String, CodingKey { case model, messages, stream, maxTokens = "max_tokens", temperature }
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.withoutEscapingSlashes]
        return Array(try encoder.encode(Body(model: model.isEmpty ? nil : model, messages: messages,
                                             maxTokens: maxTokens, temperature: temperature)))
    }

    /// Sends one request and passes each piece of the answer to `onDelta` as it streams. Throws
    /// ``ResponderFailure`` (or what the HTTP client throws, for ``ResponderFailure/from(_:url:)``).
    func stream(_ messages: [ChatMessage], http: HTTPClient, activity: ResponderActivity,
                onDelta: @Sendable (String) async throws -> Void) async throws {
        var request = HTTPClientRequest(url: endpoint)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json")
        request.headers.add(name: "Accept", value: "text/event-stream")
        if !apiKey.isEmpty { request.headers.add(name: "Authorization", value: "Bearer \(apiKey)") }
        request.body = .bytes(ByteBuffer(bytes: try body(messages)))
        let response = try await http.execute(request, deadline: .distantFuture)
        activity.touch()
        guard (200..<300).contains(response.status.code) else {
            let body = try await Self.collect(response.body, limit: 16 << 10, activity: activity)
            throw ResponderFailure.status(response.status, headers: response.headers, body: body, url: displayURL)
        }
        let type = response.headers.first(name: "Content-Type")?.lowercased() ?? ""
        if type.contains("json") {
            // A server that ignored `stream: true` answers with one JSON object.
            let body = try await Self.collect(response.body, limit: Self.bodyLimit, activity: activity)
            var answered = false
            _ = try await handle(ChatStreamParser.interpret(String(decoding: body, as: UTF8.self)), answered: &answered,
                                 activity: activity, onDelta: onDelta)
            if !answered {
                throw ResponderFailure(.badResponse, "\(displayURL) answered JSON without choices: \(ChatStreamParser.snippet(String(decoding: body.prefix(300), as: UTF8.self)))")
            }
            return
        }
        var parser = ChatStreamParser()
        var answered = false
        for try await part in response.body {
            activity.touch()
            let events = parser.push(part.readableBytesView)
            if try await handle(events, answered: &answered, activity: activity, onDelta: onDelta) { return }
        }
        // The body ended without `[DONE]`: an answer that came (or a finish reason) still counts.
        let done = try await handle(parser.finish(), answered: &answered, activity: activity, onDelta: onDelta)
        if !done && !answered {
            throw ResponderFailure(.badResponse, "\(displayURL) ended the stream without an answer or [DONE]")
        }
    }

    /// Handles events; returns true at `[DONE]`. `answered` becomes true at a piece of the answer or
    /// a finish reason.
    private func handle(_ events: [ChatStreamEvent], answered: inout Bool, activity: ResponderActivity,
                        onDelta: @Sendable (String) async throws -> Void) async throws -> Bool {
        for e in events {
            switch e {
            case .delta(let text):
                answered = true
                activity.markDelivered()
                try await onDelta(text)
            case .finished:
                answered = true
            case .done:
                return true
            case .failed(let message):
                throw ResponderFailure(.badResponse, "\(displayURL) reported an error in the stream: \(message)")
            case .malformed(let start):
                throw ResponderFailure(.badResponse, "\(displayURL) sent data that is not JSON: \(start)")
            }
        }
        return false
    }

    /// Reads a whole body of at most `limit` bytes; past it, stops reading (the request is closed) and
    /// throws `answer_too_long` naming `parameter`.
    static func collectBounded(_ body: HTTPClientResponse.Body, limit: Int, parameter: String, url: String,
                               activity: ResponderActivity) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await part in body {
            activity.touch()
            guard out.count + part.readableBytes <= limit else {
                throw ResponderFailure(.answerTooLong, "the answer from \(url) passed \(parameter) (\(limit) bytes); the rest was not read and the request was closed")
            }
            out += part.readableBytesView
        }
        return out
    }

    /// Reads a body up to `limit` bytes (an error body: its start is enough).
    static func collect(_ body: HTTPClientResponse.Body, limit: Int, activity: ResponderActivity) async throws -> [UInt8] {
        var out: [UInt8] = []
        for try await part in body {
            activity.touch()
            let room = limit - out.count
            if room <= 0 { break }
            out += part.readableBytesView.prefix(room)
        }
        return out
    }
}
