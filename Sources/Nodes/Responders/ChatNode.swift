import AsyncHTTPClient
import Foundation
import PipelineCore

/// `chat`: answers each text with a chat model, through the OpenAI-compatible streaming chat API
/// that llama.cpp's server, Ollama, vLLM and others serve (`POST {url}/v1/chat/completions`,
/// `stream: true`, server-sent events up to `[DONE]`).
///
/// Each input text is a user turn. The answer is passed on while it streams, one text frame per
/// complete sentence (the rest when it ends), so speech synthesis can start on the first sentence;
/// the request carries the `system` prompt and the last `max_history` turns. A text that comes while
/// an answer streams waits for it.
///
/// Any event on the optional `interrupt` input (a VAD's `speech_start`, a sink's `interrupted`)
/// cancels the request in flight — its connection is closed — and what was not yet passed on is
/// dropped. An `interrupted` event with `text` (what was actually played) makes that the answer
/// kept in the history, whether it comes while the answer streams or after.
///
/// Events: `response_start` (`text` asked), `response_end` (`text` answered — passed on, when cut
/// short —, `first_token_ms`, `total_ms`, `sentences`, and `interrupted`, `played` when cut short)
/// and `error` (`code` `http_429`, `http_5xx`, `timeout`, `unreachable` or `bad_response`,
/// `message`, `text` asked, `attempts`, `status`, `answered` when part of the answer was passed on).
/// Every answer is bounded: past `max_answer_chars` characters, or `answer_timeout_ms` after the
/// request, the request is closed, what came before is passed on and kept, and an `error` with code
/// `answer_too_long` or `answer_timeout` (and `limit`, the parameter) says so; both are counted.
/// `max_tokens` is sent to the server (by default half of `max_answer_chars`). 429, 5xx and an unreachable server are tried again `reconnect_attempts` times with
/// back-off (never once part of the answer was passed on); then the turn is given up and the node
/// goes on with the next text. `api_key` goes in the `Authorization` header only.
///
/// ```yaml
/// chat: { type: chat, url: "http://127.0.0.1:8080", model: llama3, system: "Answer in one or two sentences.",
///         api_key: "${OPENAI_API_KEY:-}" }
/// ```
public actor ChatNode: Node {
    /// One turn being answered.
    struct Turn {
        var asked: String
        var pts: Int64
        var sent: [String] = []
        var answer = ""
        /// Characters of `answer`.
        var answerChars = 0
        var firstToken: Duration?
        var interrupted = false
        /// What was played, from an `interrupted` event.
        var played: String?
        let signal: AsyncStream<Void>.Continuation
    }

    /// How a turn ended.
    enum Outcome: Sendable {
        case completed
        case interrupted
        case failed(ResponderFailure)
    }

    let client: ChatClient
    let system: String
    let policy: ResponderRetryPolicy
    let timeout: Duration
    /// Longest answer, in characters, and longest time for a whole answer (retries included).
    let maxAnswerChars: Int
    let answerTimeout: Duration
    private(set) var history: ChatHistory
    private var turn: Turn?
    private var splitter = ResponderSentences()

    init(configuration c: Configuration) {
        client = ChatClient(endpoint: ChatClient.endpoint(base: c.url), model: c.model, apiKey: c.apiKey ?? "",
                            maxTokens: Self.maxTokens(c), temperature: c.temperature)
        maxAnswerChars = c.maxAnswerChars
        answerTimeout = .milliseconds(c.answerTimeoutMs)
        system = c.system
        policy = ResponderRetryPolicy(retries: c.reconnectAttempts, initialDelay: .milliseconds(c.retryBackoffMs))
        timeout = .milliseconds(c.timeoutMs)
        history = ChatHistory(maxTurns: c.maxHistory)
    }

    public func run(_ context: NodeContext) async throws {
        let http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: Self.httpConfiguration(timeout: timeout))
        do {
            try await withThrowingTaskGroup(of: Void.self) { group in
                if context.connectedInputs.contains("interrupt") {
                    group.addTask {
                        for await frame in context.input("interrupt") {
                            if let event = frame.event { await self.interrupt(event, context: context) }
                        }
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

    /// `max_tokens` sent: as given (0: none), else half of `max_answer_chars` (a token is two characters
    /// or more), so that a well-behaved server stops at about the node's own bound.
    static func maxTokens(_ c: Configuration) -> Int? {
        guard let given = c.maxTokens else { return max(1, (c.maxAnswerChars + 1) / 2) }
        return given == 0 ? nil : given
    }

    static func httpConfiguration(timeout: Duration) -> HTTPClient.Configuration {
        var configuration = HTTPClient.Configuration()
        // The node's own watchdog bounds silence on the injected clock; the client only bounds connecting.
        configuration.timeout = .init(connect: .milliseconds(min(ResponderActivity.millis(timeout), 10_000)), read: nil)
        // A refused connection fails the attempt at once; the node's retry policy decides what follows.
        configuration.connectionPool.retryConnectionEstablishment = false
        return configuration
    }

    /// Answers one user turn.
    private func respond(_ asked: String, pts: Int64, http: HTTPClient, context: NodeContext) async throws {
        let pacer = context.makePacer()
        let (signal, continuation) = AsyncStream<Void>.makeStream()
        splitter.reset()
        turn = Turn(asked: asked, pts: pts, signal: continuation)
        try await context.emit(.responseStart, [("text", .string(asked))])
        let messages = history.messages(system: system, user: asked)
        let (client, policy, timeout, clock, answerTimeout) = (self.client, self.policy, self.timeout, context.clock, self.answerTimeout)
        var outcome: Outcome = await withTaskGroup(of: Outcome?.self) { group in
            group.addTask {
                do {
                    try await ResponderAttempts.run(policy: policy, timeout: timeout, clock: clock, url: client.displayURL,
                                                    retrying: { failure, attempt, delay in
                        context.count("retries")
                        context.logger.warning("chat: \(failure.message); retry \(attempt) of \(policy.retries) in \(ResponderActivity.millis(delay)) ms")
                    }, { activity in
                        try await client.stream(messages, http: http, activity: activity) { delta in
                            try await self.received(delta, at: pacer.elapsed, context: context)
                        }
                    })
                    return .completed
                } catch let failure as ResponderFailure {
                    return .failed(failure)
                } catch {
                    return nil   // cancelled: interrupted
                }
            }
            group.addTask {
                for await _ in signal { return .interrupted }
                return nil
            }
            group.addTask {
                // The whole answer's deadline (the watchdog above bounds silence only).
                do { try await clock.sleep(for: answerTimeout) } catch { return nil }
                return .failed(ResponderFailure(.answerTimeout, "the answer from \(client.displayURL) took longer than answer_timeout_ms (\(ResponderActivity.millis(answerTimeout)) ms); the request was closed"))
            }
            var outcome: Outcome = .interrupted
            while let r = await group.next() {
                if let r { outcome = r; break }
            }
            group.cancelAll()
            return outcome
        }
        continuation.finish()
        if case .completed = outcome, turn?.interrupted == true { outcome = .interrupted }
        if case .completed = outcome, let rest = splitter.finish() {
            try await send(rest, context: context)
            if turn?.interrupted == true { outcome = .interrupted }
        }
        // At a bound, what came before it is said and kept.
        if case .failed(let failure) = outcome, failure.code.isBound, let rest = splitter.finish() {
            try await send(rest, context: context)
        }
        guard let t = turn else { return }
        turn = nil
        splitter.reset()
        let total = pacer.elapsed
        let sentText = ASRNode.join(t.sent)
        var fields: [(String, EventValue)] = []
        switch outcome {
        case .completed:
            let answer = t.answer.trimmingCharacters(in: .whitespacesAndNewlines)
            history.record(user: t.asked, assistant: answer)
            fields = [("text", .string(answer))]
        case .interrupted:
            context.count("interruptions")
            history.record(user: t.asked, assistant: t.played ?? sentText)
            fields = [("text", .string(sentText)), ("interrupted", .bool(true))]
            if let played = t.played { fields.append(("played", .string(played))) }
        case .failed(let failure):
            // What was passed on before the failure is what the person hears: that is the answer kept.
            if !t.sent.isEmpty { history.record(user: t.asked, assistant: sentText) }
            var event = Event.error(code: failure.code.rawValue, message: failure.message)
            event.fields += [("text", .string(t.asked)), ("attempts", .int(Int64(failure.attempts)))]
            if let status = failure.status { event.fields.append(("status", .int(Int64(status)))) }
            if !t.sent.isEmpty { event.fields.append(("answered", .string(sentText))) }
            switch failure.code {
            case .answerTooLong: event.fields.append(("limit", .string("max_answer_chars")))
            case .answerTimeout: event.fields.append(("limit", .string("answer_timeout_ms")))
            default: break
            }
            if let counter = failure.code.counter { context.count(counter) }
            context.count("failed_turns")
            try await context.emit(event)
            return
        }
        fields += [("first_token_ms", t.firstToken.map { .int(ResponderActivity.millis($0)) } ?? .null),
                   ("total_ms", .int(ResponderActivity.millis(total))),
                   ("sentences", .int(Int64(t.sent.count)))]
        try await context.emit(.responseEnd, fields)
    }

    /// A piece of the answer came: passes on the sentences it completes.
    private func received(_ delta: String, at elapsed: Duration, context: NodeContext) async throws {
        guard turn != nil, turn?.interrupted == false else { return }
        if turn?.firstToken == nil { turn?.firstToken = elapsed }
        let room = maxAnswerChars - (turn?.answerChars ?? 0)
        var piece = delta
        let over = delta.count > room
        if over { piece = String(delta.prefix(max(0, room))) }
        turn?.answer += piece
        turn?.answerChars += piece.count
        for sentence in splitter.push(piece) {
            try await send(sentence, context: context)
        }
        if over {
            throw ResponderFailure(.answerTooLong, "the answer from \(client.displayURL) passed max_answer_chars (\(maxAnswerChars) characters); the rest was not read and the request was closed")
        }
    }

    private func send(_ sentence: String, context: NodeContext) async throws {
        guard let t = turn, !t.interrupted else { return }
        turn?.sent.append(sentence)
        try await context.output("text").send(.text(sentence, pts: t.pts))
    }

    /// An event on `interrupt`: cancels the answer in flight; an `interrupted` event's `text` is the
    /// part of the answer that was played, and the part the history keeps.
    private func interrupt(_ event: Event, context: NodeContext) {
        let played = event.name == .interrupted ? event["text"]?.stringValue : nil
        if turn != nil {
            turn?.interrupted = true
            if let played { turn?.played = played }
            turn?.signal.yield()
        } else if let played {
            history.replaceLastAnswer(with: played)
        }
    }

    /// Configuration of `chat`.
    public struct Configuration: NodeConfiguration {
        /// Base URL of the server; requests go to `{url}/v1/chat/completions`.
        public var url: String
        /// Model name (empty: not sent).
        public var model: String
        /// System prompt (empty: none).
        public var system: String
        /// Bearer token (never logged).
        public var apiKey: String?
        /// Turns (question and answer) kept and sent with each request.
        public var maxHistory: Int
        /// Silence from the server that fails a request, in milliseconds.
        public var timeoutMs: Int
        /// Attempts after the first for 429, 5xx and an unreachable server.
        public var reconnectAttempts: Int
        /// Delay before the first retry, in milliseconds (doubles, up to 8 s).
        public var retryBackoffMs: Int
        /// Longest answer, in tokens, sent to the server (absent: half of `maxAnswerChars`; 0: not sent).
        public var maxTokens: Int?
        /// Longest answer, in characters: the rest is not read.
        public var maxAnswerChars: Int
        /// Longest time for a whole answer, retries included, in milliseconds.
        public var answerTimeoutMs: Int
        /// Sampling temperature (not sent when absent).
        public var temperature: Double?

        /// The parameters of `chat`.
        public static let parameters = [
            ParamSpec("url", .string, required: true, doc: "base URL of an OpenAI-compatible server (llama.cpp, Ollama, vLLM, ...); requests go to {url}/v1/chat/completions"),
            ParamSpec("model", .string, default: "", doc: "model name (empty: not sent, for servers with one model)"),
            ParamSpec("system", .string, default: "", doc: "system prompt"),
            ParamSpec("api_key", .string, secret: true, doc: "sent as Authorization: Bearer; never logged"),
            ParamSpec("max_history", .int(0...1000), default: 10, doc: "turns (question and answer) kept and sent with each request"),
            ParamSpec("timeout_ms", .int(100...600_000), default: 20000, doc: "no first byte, or a stream stalled, this long: the request is cancelled (error timeout)"),
            ParamSpec("reconnect_attempts", .int(0...100), default: 2, doc: "retries after 429, 5xx or an unreachable server, before the turn is given up"),
            ParamSpec("retry_backoff_ms", .int(0...60_000), default: 500, doc: "delay before the first retry (doubles, up to 8 s; a longer Retry-After is honoured up to 8 s)"),
            ParamSpec("max_tokens", .int(0...1_000_000), doc: "longest answer in tokens, sent to the server (absent: half of max_answer_chars; 0: not sent)"),
            ParamSpec("max_answer_chars", .int(1...1_000_000), default: 4000, doc: "longest answer in characters: past it the request is closed, what came is kept, and an error answer_too_long says so"),
            ParamSpec("answer_timeout_ms", .int(100...3_600_000), default: 120_000, doc: "longest time for a whole answer, retries included: past it the request is closed, what came is kept, and an error answer_timeout says so"),
            ParamSpec("temperature", .double(0...2), doc: "sampling temperature (not sent when absent)"),
        ]

        /// The URL must be `http://` or `https://` with a host.
        public func problems() -> [String] {
            ResponderURL.problems(url)
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "chat", summary: "Answers text with a chat model (OpenAI-compatible streaming API), sentence by sentence",
        family: "services",
        inputs: [PortSpec("in", [.text], doc: "each text is a user turn"),
                 .interrupt("any event cancels the answer in flight; `interrupted` with `text` keeps only what was played in the history")],
        outputs: [PortSpec("text", [.text], doc: "the answer, one frame per sentence as it streams"), .events],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in ChatNode(configuration: c) })
}

extension ChatNode.Configuration: CustomReflectable {
    /// Every field but the API key, so printing a configuration never shows it.
    public var customMirror: Mirror {
        Mirror(self, children: ["url": HTTPUploadNode.redact(url), "model": model, "system": system,
                                "apiKey": apiKey == nil ? "none" : "(secret)", "maxHistory": maxHistory, "timeoutMs": timeoutMs,
                                "reconnectAttempts": reconnectAttempts, "retryBackoffMs": retryBackoffMs,
                                "maxTokens": maxTokens as Any, "temperature": temperature as Any,
                                "maxAnswerChars": maxAnswerChars, "answerTimeoutMs": answerTimeoutMs])
    }
}

/// The conversation sent with each request: the last ``maxTurns`` questions with their answers.
/// Pure value.
struct ChatHistory: Sendable, Hashable {
    struct Turn: Sendable, Hashable {
        var user: String
        /// Empty when nothing of the answer was heard.
        var assistant: String
    }

    let maxTurns: Int
    private(set) var turns: [Turn] = []

    init(maxTurns: Int) { self.maxTurns = maxTurns }

    /// Adds a turn, dropping the oldest beyond ``maxTurns``.
    mutating func record(user: String, assistant: String) {
        guard maxTurns > 0 else { return }
        turns.append(Turn(user: user, assistant: assistant.trimmingCharacters(in: .whitespacesAndNewlines)))
        if turns.count > maxTurns { turns.removeFirst(turns.count - maxTurns) }
    }

    /// The last answer becomes `text` (what was actually played of it).
    mutating func replaceLastAnswer(with text: String) {
        guard !turns.isEmpty else { return }
        turns[turns.count - 1].assistant = text.trimmingCharacters(in: .whitespacesAndNewlines)
    }

    /// The messages of a request: the system prompt, the history, then `user`. An answer nobody
    /// heard is left out, and messages of one role in a row are joined, so roles alternate (as many
    /// chat templates require).
    func messages(system: String, user: String) -> [ChatMessage] {
        var out: [ChatMessage] = []
        func add(_ m: ChatMessage) {
            guard !m.content.isEmpty else { return }
            if let last = out.last, last.role == m.role {
                out[out.count - 1].content += "\n" + m.content
            } else {
                out.append(m)
            }
        }
        if !system.isEmpty { out.append(.system(system)) }
        for t in turns {
            add(.user(t.user))
            add(.assistant(t.assistant))
        }
        add(.user(user))
        return out
    }
}

/// Checks of a responder's URL parameter.
enum ResponderURL {
    static func problems(_ url: String) -> [String] {
        let c = URLComponents(string: url)
        if !["http", "https"].contains(c?.scheme?.lowercased() ?? "") || (c?.host ?? "").isEmpty {
            return ["url \"\(HTTPUploadNode.redact(url))\": expected an http:// or https:// URL"]
        }
        return []
    }
}
