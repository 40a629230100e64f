import Foundation
import Logging
import PipelineCore
import Synchronization
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

@Suite("chat")
struct ChatTests {
    // MARK: - The node against a local OpenAI-compatible server

    @Test func sentencesComeOutWhileTheAnswerStreams() async throws {
        let server = try await ChatTestServer.start([
            .stream(["Hello there", ". How ", "are you", "? I am"], holdThen: [" fine", "."]),
        ])
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "model": "test-model",
                                                                  "system": "Be brief."])
        try await h.run { h in
            h.send(.text("Hi"))
            #expect(await h.output("text").wait(for: 2))
            // Two sentences are out while the server still holds the rest of the answer.
            #expect(h.output("text").texts == ["Hello there.", "How are you?"])
            #expect(server.requests.count == 1)
            #expect(server.requests.first?.completedAt == nil)
            server.release()
            #expect(await h.output("text").wait(for: 3))
        }
        #expect(h.output("text").texts == ["Hello there.", "How are you?", "I am fine."])
        let r = try #require(server.requests.first)
        #expect(r.method == "POST")
        #expect(r.uri == "/v1/chat/completions")
        #expect(r.json["model"] as? String == "test-model")
        #expect(r.json["stream"] as? Bool == true)
        #expect(r.messages == [["system", "Be brief."], ["user", "Hi"]])
        #expect(r.header("Authorization") == nil)
        #expect(h.events.map(\.name) == ["response_start", "response_end"])
        let start = try #require(h.events(named: "response_start").first)
        #expect(start["text"] == .string("Hi"))
        let end = try #require(h.events(named: "response_end").first)
        #expect(end["text"] == .string("Hello there. How are you? I am fine."))
        #expect(end["sentences"] == .int(3))
        #expect(end["first_token_ms"]?.intValue != nil)
        #expect(end["total_ms"]?.intValue != nil)
    }

    @Test func historyIsBoundedAndSentInOrder() async throws {
        let server = try await ChatTestServer.start { i in .stream(["Answer \(i + 1)."]) }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "system": "Be brief.", "max_history": 2])
        // Four questions at once: each waits for the answer before it.
        h.send((1...4).map { Frame.text("Question \($0)") })
        try await h.run()
        #expect(h.output("text").texts == ["Answer 1.", "Answer 2.", "Answer 3.", "Answer 4."])
        let requests = server.requests
        try #require(requests.count == 4)
        #expect(requests[0].messages == [["system", "Be brief."], ["user", "Question 1"]])
        #expect(requests[1].messages == [["system", "Be brief."], ["user", "Question 1"], ["assistant", "Answer 1."], ["user", "Question 2"]])
        // Only the last two turns are kept.
        #expect(requests[3].messages == [["system", "Be brief."], ["user", "Question 2"], ["assistant", "Answer 2."],
                                         ["user", "Question 3"], ["assistant", "Answer 3."], ["user", "Question 4"]])
        // Each request began after the previous answer was complete.
        for i in 1..<4 {
            let before = try #require(requests[i - 1].completedAt)
            #expect(requests[i].headAt >= before)
        }
        #expect(h.events(named: "response_end").count == 4)
    }

    @Test func apiKeyIsSentAsBearerAndNeverLogged() async throws {
        let key = "sk-test-0123456789-secret"
        let server = try await ChatTestServer.start([.status(500, "overloaded"), .stream(["Done."])])
        defer { Task { await server.shutdown() } }
        let logs = ResponderLogLines()
        var registry = BuiltinNodes.registry()
        registry.register(ScriptedSource.descriptor(type: "texts", kinds: [.text], steps: [.frame(.text("Hello"))]))
        let recorders = FrameRecorders()
        registry.register(CollectingSink.descriptor(recorders: recorders))
        let yaml = """
            version: 1
            name: chat-key
            nodes:
              src: { type: texts }
              chat: { type: chat, url: "\(server.baseURL)", api_key: "\(key)", retry_backoff_ms: 10 }
              answers: { type: collect }
              events: { type: collect }
            links:
              - src -> chat -> answers
              - chat.events -> events
            """
        let graph = try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:]), registry: registry)
        var logger = Logger(label: "voicepipe-test") { _ in ResponderLogHandler(lines: logs) }
        logger.logLevel = .trace
        let pipeline = try Pipeline(graph: graph, logger: logger)
        let events = try await runPipeline(pipeline, timeout: .seconds(30))
        #expect(recorders["answers"].texts == ["Done."])
        try #require(server.requests.count == 2)
        for r in server.requests { #expect(r.header("Authorization") == "Bearer \(key)") }
        // The retry was logged (so logging was seen) and nothing anywhere holds the key.
        #expect(logs.all.contains { $0.contains("retry 1 of 2") })
        #expect(!logs.all.contains { $0.contains(key) })
        #expect(!events.map { $0.jsonLine() }.joined().contains(key))
        #expect(!recorders["events"].events.map { $0.jsonLine() }.joined().contains(key))
        #expect(ChatNode.descriptor.parameter("api_key")?.secret == true)
        #expect(pipeline.graph.nodes.first { $0.id == "chat" }.map { "\($0.configuration)" }?.contains(key) != true)
    }

    @Test func retriesAfter429ThenGivesUpAndGoesOn() async throws {
        let server = try await ChatTestServer.start { i in
            switch i {
            case 0: .status(429, "rate limited")
            case 1: .stream(["Fine."])
            case 2, 3: .status(503, "down for maintenance")
            default: .stream(["Still here."])
            }
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "reconnect_attempts": 1,
                                                                  "retry_backoff_ms": 500, "timeout_ms": 60000])
        try await h.run { h in
            h.send(.text("First"))
            // The retry waits for its back-off on the node's clock.
            #expect(await server.wait { $0.count == 1 && $0[0].completedAt != nil })
            #expect(await advanceResponderClock(h.clock, until: { server.requests.count >= 2 }))
            #expect(await h.output("text").wait(for: 1))
            h.send(.text("Second"))
            #expect(await server.wait { $0.count == 3 && $0[2].completedAt != nil })
            #expect(await advanceResponderClock(h.clock, until: { server.requests.count >= 4 }))
            #expect(await h.output("events").wait(for: 4))   // start, end, start, error
            h.send(.text("Third"))
            #expect(await h.output("text").wait(for: 2))
        }
        #expect(h.output("text").texts == ["Fine.", "Still here."])
        #expect(server.requests.count == 5)
        let errors = h.events(named: "error")
        try #require(errors.count == 1)
        #expect(errors[0]["code"] == .string("http_5xx"))
        #expect(errors[0]["status"] == .int(503))
        #expect(errors[0]["attempts"] == .int(2))
        #expect(errors[0]["text"] == .string("Second"))
        #expect(errors[0]["message"]?.stringValue?.contains("down for maintenance") == true)
        // The given-up turn is not in the history; the answered ones are.
        #expect(server.requests[4].messages == [["user", "First"], ["assistant", "Fine."], ["user", "Third"]])
        #expect(h.events.map(\.name) == ["response_start", "response_end", "response_start", "error", "response_start", "response_end"])
    }

    @Test func a429WithoutRetriesIsAnErrorEvent() async throws {
        let server = try await ChatTestServer.start([.status(429, "slow down")])
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "reconnect_attempts": 0])
        h.send(.text("Hi"))
        try await h.run()
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("http_429"))
        #expect(error["attempts"] == .int(1))
        #expect(server.requests.count == 1)
    }

    @Test func stalledServerTimesOutAndTheNodeGoesOn() async throws {
        let server = try await ChatTestServer.start { i in
            switch i {
            case 0: .stall                                             // no answer at all
            case 1: .stream(["Let me think"], holdThen: [])              // starts, then stalls
            default: .stream(["Back again."])
            }
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "timeout_ms": 5000])
        try await h.run { h in
            h.send(.text("One"))
            #expect(await server.wait { $0.count == 1 })
            await h.clock.advance(by: .seconds(5), waitingFor: 1)
            #expect(await h.output("events").wait(for: 2))
            h.send(.text("Two"))
            #expect(await server.wait { $0.count == 2 })
            // The answer has begun at the node: nothing the node emits tells when its first bytes came
            // (no sentence is complete yet), so this gives them time to arrive over the socket.
            try await Task.sleep(for: .milliseconds(300))
            await h.clock.advance(by: .seconds(5), waitingFor: 1)
            #expect(await h.output("events").wait(for: 4))
            h.send(.text("Three"))
            #expect(await h.output("text").wait(for: 1))
        }
        let errors = h.events(named: "error")
        try #require(errors.count == 2)
        #expect(errors.allSatisfy { $0["code"] == .string("timeout") })
        #expect(errors[0]["message"]?.stringValue?.contains("no answer") == true)
        #expect(errors[1]["message"]?.stringValue?.contains("stalled") == true)
        #expect(errors[0]["attempts"] == .int(1))   // a timeout is not retried
        // Both stalled requests were cancelled: the server saw their connections close.
        #expect(await server.wait { $0.count == 3 && $0[0].closedAt != nil && $0[1].closedAt != nil })
        #expect(server.requests[0].completedAt == nil && server.requests[1].completedAt == nil)
        #expect(h.output("text").texts == ["Back again."])
        #expect(server.requests[2].messages == [["user", "Three"]])
    }

    @Test func unreachableServerIsRetriedThenGivenUp() async throws {
        let dead = try await ChatTestServer.start([.stream([])])
        let url = dead.baseURL
        await dead.shutdown()
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(url), "reconnect_attempts": 2, "retry_backoff_ms": 0])
        h.send([.text("Anyone there?"), .text("Hello?")])
        try await h.run()
        let errors = h.events(named: "error")
        #expect(errors.count == 2)
        #expect(errors.allSatisfy { $0["code"] == .string("unreachable") && $0["attempts"] == .int(3) })
        #expect(errors.first?["message"]?.stringValue?.contains("127.0.0.1") == true)
        #expect(h.output("text").texts.isEmpty)
    }

    @Test func interruptCancelsTheRequestAndHistoryKeepsThePlayedPart() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? .stream(["The first sentence. ", "The second sentence. "], holdThen: ["Never heard. ", "Nor this."])
                   : .stream(["Okay."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL)])
        try await h.run { h in
            h.send(.text("Tell me a story"))
            #expect(await h.output("text").wait(for: 2))
            h.send(.event(Event("interrupted", fields: [("text", "The first sentence."), ("heard_ms", 900)])), to: "interrupt")
            #expect(await h.output("events").wait(for: 2))
            // The request was really cancelled: the server saw the connection close mid-answer.
            #expect(await server.wait { $0.first?.closedAt != nil })
            server.release()
            h.send(.text("Go on"))
            #expect(await h.output("text").wait(for: 3))
        }
        #expect(h.output("text").texts == ["The first sentence.", "The second sentence.", "Okay."])
        #expect(server.requests[0].completedAt == nil)
        let end = try #require(h.events(named: "response_end").first)
        #expect(end["interrupted"] == .bool(true))
        #expect(end["text"] == .string("The first sentence. The second sentence."))
        #expect(end["played"] == .string("The first sentence."))
        #expect(server.requests[1].messages == [["user", "Tell me a story"], ["assistant", "The first sentence."], ["user", "Go on"]])
    }

    @Test func anyEventInterruptsAndKeepsWhatWasPassedOn() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? .stream(["One. ", "Two. "], holdThen: ["Three."]) : .stream(["Sure."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL)])
        try await h.run { h in
            h.send(.text("Count"))
            #expect(await h.output("text").wait(for: 2))
            h.send(.event(Event("speech_start")), to: "interrupt")
            #expect(await server.wait { $0.first?.closedAt != nil })
            h.send(.text("Again"))
            #expect(await h.output("text").wait(for: 3))
        }
        #expect(server.requests[1].messages == [["user", "Count"], ["assistant", "One. Two."], ["user", "Again"]])
        #expect(h.events(named: "response_end").first?["interrupted"] == .bool(true))
    }

    @Test func playedTextAfterTheAnswerEndedReplacesItInTheHistory() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? .stream(["A long answer. ", "With a second sentence."]) : .stream(["Right."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL)])
        try await h.run { h in
            h.send(.text("Question"))
            #expect(await h.output("events").wait(for: 2))   // the answer streamed to its end
            // Playback is cut after the first sentence; an event without text changes nothing.
            h.send(.event(Event("speech_start")), to: "interrupt")
            h.send(.event(Event("interrupted", fields: [("text", "A long answer.")])), to: "interrupt")
            let chat = try #require(h.node as? ChatNode)
            #expect(await eventually { await chat.history.turns.last?.assistant == "A long answer." }, "the interrupt port was read")
            h.send(.text("Next"))
            #expect(await h.output("text").wait(for: 3))
        }
        #expect(server.requests[1].messages == [["user", "Question"], ["assistant", "A long answer."], ["user", "Next"]])
    }

    @Test func anErrorInsideTheStreamIsABadResponse() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? ChatTestServer.Reply(steps: [.chunk("Partial"), .raw(#"data: {"error":{"message":"model crashed"}}"# + "\n\n")])
                   : .stream(["Ok."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL)])
        h.send([.text("One"), .text("Two")])
        try await h.run()
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("bad_response"))
        #expect(error["message"]?.stringValue?.contains("model crashed") == true)
        #expect(server.requests.count == 2)   // not retried
        #expect(h.output("text").texts == ["Ok."])
    }

    @Test func validationRefusesABadURL() throws {
        #expect(throws: ConfigurationError.self) { try ChatNode.Configuration.decode(["url": "ftp://example.com"]) }
        #expect(throws: ConfigurationError.self) { try ChatNode.Configuration.decode([:]) }
        let c = try ChatNode.Configuration.decode(["url": "http://127.0.0.1:8080"])
        #expect(c.maxHistory == 10)
    }

    // MARK: - Pure parts

    @Test func endpointFromTheBaseURL() {
        #expect(ChatClient.endpoint(base: "http://h:8080") == "http://h:8080/v1/chat/completions")
        #expect(ChatClient.endpoint(base: "http://h:8080/") == "http://h:8080/v1/chat/completions")
        #expect(ChatClient.endpoint(base: "http://h:11434/v1") == "http://h:11434/v1/chat/completions")
        #expect(ChatClient.endpoint(base: "https://h/openai/v1/chat/completions") == "https://h/openai/v1/chat/completions")
    }

    @Test func sseFraming() {
        func parse(_ pieces: [String]) -> [ChatStreamEvent] {
            var p = ChatStreamParser()
            return pieces.flatMap { p.push(Array($0.utf8)) } + p.finish()
        }
        let a = #"{"choices":[{"delta":{"content":"Hel"}}]}"#
        let b = #"{"choices":[{"delta":{"content":"lo"},"finish_reason":"stop"}]}"#
        let expected: [ChatStreamEvent] = [.delta("Hel"), .delta("lo"), .finished(reason: "stop"), .done]
        // With and without the space after `data:`, comments, LF, CRLF and CR line ends.
        #expect(parse(["data: \(a)\n\n: keep-alive\n\ndata:\(b)\n\ndata: [DONE]\n\n"]) == expected)
        #expect(parse(["data: \(a)\r\n\r\n:ping\r\ndata: \(b)\r\n\r\ndata: [DONE]\r\n\r\n"]) == expected)
        #expect(parse(["data: \(a)\r\rdata: \(b)\r\rdata: [DONE]\r\r"]) == expected)
        // Split anywhere: between CR and LF, inside a multi-byte character.
        let text = "data: {\"choices\":[{\"delta\":{\"content\":\"日本\"}}]}\r\n\r\ndata: [DONE]\r\n\r\n"
        let bytes = Array(text.utf8)
        for cut in 1..<bytes.count {
            var p = ChatStreamParser()
            let events = p.push(bytes[..<cut]) + p.push(bytes[cut...]) + p.finish()
            #expect(events == [.delta("日本"), .done], "cut at \(cut)")
        }
        // One byte at a time.
        var p = ChatStreamParser()
        let one = bytes.flatMap { p.push([$0]) } + p.finish()
        #expect(one == [.delta("日本"), .done])
    }

    @Test func sseMultiLineDataAndOddServers() {
        func parse(_ s: String) -> [ChatStreamEvent] {
            var p = ChatStreamParser()
            return p.push(Array(s.utf8)) + p.finish()
        }
        // One JSON object over two data lines (joined with a line feed).
        #expect(parse("data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"x\"}}]}\n\n") == [.delta("x")])
        // One data line per chunk, no blank lines between them.
        #expect(parse("data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]}\ndata: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\ndata: [DONE]\n")
                == [.delta("a"), .delta("b"), .done])
        // The last event without its blank line, and without a final line end.
        #expect(parse("data: {\"choices\":[{\"delta\":{\"content\":\"z\"}}]}") == [.delta("z")])
        // Role-only and usage chunks carry nothing; other fields are ignored.
        #expect(parse("id: 1\nretry: 10\ndata: {\"choices\":[{\"delta\":{\"role\":\"assistant\"}}]}\n\ndata: {\"choices\":[],\"usage\":{}}\n\n") == [])
        // Errors: a JSON error body, an `event: error`, data that is not JSON.
        #expect(parse("data: {\"error\":{\"message\":\"boom\",\"type\":\"server_error\"}}\n\n") == [.failed("boom (server_error)")])
        #expect(parse("data: {\"error\":\"plain\"}\n\n") == [.failed("plain")])
        #expect(parse("event: error\ndata: {\"message\":\"bad\"}\n\n") == [.failed("{\"message\":\"bad\"}")])
        #expect(parse("data: <html>\n\n") == [.malformed("<html>")])
        // A whole (non-streamed) completion.
        #expect(ChatStreamParser.interpret(#"{"choices":[{"message":{"role":"assistant","content":"Whole."},"finish_reason":"stop"}]}"#)
                == [.delta("Whole."), .finished(reason: "stop")])
        #expect(ChatStreamParser.errorMessage(body: Array(#"{"error":{"message":"invalid key"}}"#.utf8)) == "invalid key")
        #expect(ChatStreamParser.errorMessage(body: Array(#"{"object":"error","message":"no such model"}"#.utf8)) == "no such model")
        #expect(ChatStreamParser.errorMessage(body: Array("Bad\nGateway\u{1B}[2J".utf8)) == "Bad Gateway\\u{1B}[2J")
    }

    @Test func sentences() {
        #expect(ResponderSentences.split("Hello there. How are you? I'm fine!") == ["Hello there.", "How are you?", "I'm fine!"])
        #expect(ResponderSentences.split("It costs 3.50 dollars. See example.com now") == ["It costs 3.50 dollars.", "See example.com now"])
        #expect(ResponderSentences.split("Mr. Smith met Dr. Jones, e.g. at 5. Then J. R. left.") == ["Mr. Smith met Dr. Jones, e.g. at 5.", "Then J. R. left."])
        #expect(ResponderSentences.split("你好。今天天气很好！你呢？好") == ["你好。", "今天天气很好！", "你呢？", "好"])
        #expect(ResponderSentences.split("Steps:\n1. Open it.\n2. Close it.") == ["Steps:", "1. Open it.", "2. Close it."])
        #expect(ResponderSentences.split("He said \"Stop!\" Then he left... Really?! Yes.") == ["He said \"Stop!\"", "Then he left...", "Really?!", "Yes."])
        #expect(ResponderSentences.split("**Done.** Next") == ["**Done.**", "Next"])
        #expect(ResponderSentences.split("  \n\n ") == [])
        #expect(ResponderSentences.split("I live in the U.S. now. (Mr. Lee too.) ... — Bye") == ["I live in the U.S. now.", "(Mr. Lee too.)", "— Bye"])
        // Streamed in pieces, even one character at a time, the sentences are the same.
        let text = "First one. Second, with 2.5 units! Third? 第四句。Last"
        var s = ResponderSentences()
        var out = text.flatMap { s.push(String($0)) }
        if let rest = s.finish() { out.append(rest) }
        #expect(out == ResponderSentences.split(text))
        #expect(out == ["First one.", "Second, with 2.5 units!", "Third?", "第四句。", "Last"])
        // A sentence is out as soon as what follows its mark shows it ended.
        var t = ResponderSentences()
        #expect(t.push("Hi.") == [])
        #expect(t.push(" The") == ["Hi."])
        #expect(t.push("re。") == [])
        #expect(t.push("x") == ["There。"])
        #expect(t.finish() == "x")
        #expect(t.finish() == nil)
    }

    @Test func historyKeepsTurnsAndAlternatesRoles() {
        var h = ChatHistory(maxTurns: 2)
        h.record(user: "q1", assistant: "a1")
        h.record(user: "q2", assistant: "")        // nothing of the answer was heard
        h.record(user: "q3", assistant: "a3")
        #expect(h.turns.count == 2)
        #expect(h.messages(system: "s", user: "q4") == [.system("s"), .user("q2\nq3"), .assistant("a3"), .user("q4")])
        h.replaceLastAnswer(with: " a3 cut ")
        #expect(h.messages(system: "", user: "q4").dropLast().last == .assistant("a3 cut"))
        var none = ChatHistory(maxTurns: 0)
        none.record(user: "q", assistant: "a")
        #expect(none.messages(system: "", user: "x") == [.user("x")])
    }

    @Test func retryPolicy() {
        let p = ResponderRetryPolicy(retries: 3, initialDelay: .milliseconds(500))
        let busy = ResponderFailure(.http429, "busy")
        #expect(p.action(after: busy, attempt: 1, delivered: false) == .retry(after: .milliseconds(500)))
        #expect(p.action(after: busy, attempt: 2, delivered: false) == .retry(after: .seconds(1)))
        #expect(p.action(after: busy, attempt: 3, delivered: false) == .retry(after: .seconds(2)))
        #expect(p.action(after: busy, attempt: 4, delivered: false) == .giveUp)
        #expect(p.action(after: busy, attempt: 1, delivered: true) == .giveUp)   // it would repeat what was said
        #expect(p.action(after: ResponderFailure(.timeout, ""), attempt: 1, delivered: false) == .giveUp)
        #expect(p.action(after: ResponderFailure(.badResponse, ""), attempt: 1, delivered: false) == .giveUp)
        #expect(p.action(after: ResponderFailure(.unreachable, ""), attempt: 1, delivered: false) == .retry(after: .milliseconds(500)))
        var later = busy
        later.retryAfter = .seconds(3)
        #expect(p.action(after: later, attempt: 1, delivered: false) == .retry(after: .seconds(3)))
        later.retryAfter = .seconds(60)
        #expect(p.action(after: later, attempt: 1, delivered: false) == .retry(after: .seconds(8)))
    }
}

/// Advances `clock` in small steps (real time between them, for the node to get there) until
/// `condition` holds or `timeout` of real time passes.
func advanceResponderClock(_ clock: ManualClock, step: Duration = .milliseconds(100), timeout: Duration = .seconds(10),
             until condition: @Sendable () -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while !condition() {
        if ContinuousClock.now >= deadline { return false }
        if clock.sleepers > 0 { clock.advance(by: step) }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return true
}

/// Every log line (message and metadata) a logger wrote.
final class ResponderLogLines: Sendable {
    private let lines = Mutex<[String]>([])
    func append(_ line: String) { lines.withLock { $0.append(line) } }
    var all: [String] { lines.withLock { $0 } }
}

/// A log handler that records into ``ResponderLogLines``.
struct ResponderLogHandler: LogHandler {
    let lines: ResponderLogLines
    var metadata: Logger.Metadata = [:]
    var logLevel: Logger.Level = .trace

    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { metadata[key] }
        set { metadata[key] = newValue }
    }

    func log(event: LogEvent) {
        let all = metadata.merging(event.metadata ?? [:]) { $1 }
        let error = event.error.map { " error=\($0)" } ?? ""
        lines.append("\(event.level) \(event.message) \(all.map { "\($0.key)=\($0.value)" }.sorted().joined(separator: " "))\(error)")
    }
}
