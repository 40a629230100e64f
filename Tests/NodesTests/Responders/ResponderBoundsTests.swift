import Foundation
import Logging
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// Servers that misbehave: answers without end, answers that trickle, and error bodies that echo the
/// request's credentials. Every answer is bounded, and no secret reaches an event or a log line.
@Suite("responder bounds and secrets")
struct ResponderBoundsTests {
    static func counter(_ h: NodeHarness, _ name: String) -> UInt64? {
        h.pipeline.nodeStats.first { $0.id == NodeHarness.nodeID }?.counters[name]
    }

    // MARK: - Answers without end

    @Test func chatAnswerThatNeverEndsIsCutAtMaxAnswerChars() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? ChatTestServer.Reply(steps: [.raw(ChatTestServer.roleChunk), .chunk("It began. "),
                                                  .forever(ChatTestServer.chunk("and on "), interval: .milliseconds(1))])
                   : .stream(["Next."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "max_answer_chars": 200])
        try await h.run { h in
            h.send(.text("Tell me everything"))
            #expect(await h.output("events").wait(for: 2))
            h.send(.text("And then?"))
            #expect(await h.output("events").wait(for: 4))
        }
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("answer_too_long"))
        #expect(error["limit"] == .string("max_answer_chars"))
        #expect(error["message"]?.stringValue?.contains("max_answer_chars (200 characters)") == true)
        // What came before the bound is said and kept: 200 characters, no more.
        let said = h.output("text").texts.dropLast().joined(separator: " ")
        #expect(said.hasPrefix("It began."))
        #expect(said.count >= 190 && said.count <= 205, "\(said.count) characters: \(said)")
        #expect(error["answered"]?.stringValue == said)
        #expect(h.output("text").texts.last == "Next.")
        // The request was closed; the next one carries the kept answer.
        #expect(await server.wait { $0.count == 2 && $0[0].closedAt != nil })
        #expect(server.requests[1].messages.dropLast().last == ["assistant", said])
        // max_tokens goes to the server: half of max_answer_chars.
        #expect(server.requests[0].json["max_tokens"] as? Int == 100)
        #expect(Self.counter(h, "answers_too_long") == 1)
    }

    @Test func chatAnswerOfEndlessEmptyDeltasEndsAtAnswerTimeout() async throws {
        let empty = #"data: {"choices":[{"index":0,"delta":{},"finish_reason":null}]}"# + "\n\n"
        let server = try await ChatTestServer.start { i in
            i == 0 ? ChatTestServer.Reply(steps: [.chunk("Hello there. And"), .forever(empty, interval: .milliseconds(2))])
                   : .stream(["Next."])
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(ChatNode.descriptor, parameters: ["url": .string(server.baseURL), "answer_timeout_ms": 3000,
                                                                  "timeout_ms": 2000, "max_tokens": 0])
        try await h.run { h in
            h.send(.text("Talk"))
            // Bytes keep coming, so the silence watchdog (2 s) never fires; the whole answer's deadline does.
            #expect(await server.wait { $0.count == 1 && $0[0].forever > 20 })
            #expect(await advanceResponderClock(h.clock, step: .milliseconds(50), timeout: .seconds(20)) { h.events(named: "error").count == 1 })
            h.send(.text("Again"))
            #expect(await h.output("text").wait(for: 3))
        }
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("answer_timeout"))
        #expect(error["limit"] == .string("answer_timeout_ms"))
        #expect(h.output("text").texts == ["Hello there.", "And", "Next."])
        #expect(error["answered"] == .string("Hello there. And"))
        #expect(await server.wait { $0.count == 2 && $0[0].closedAt != nil })
        #expect(server.requests[0].json["max_tokens"] == nil)   // 0: not sent
        #expect(Self.counter(h, "answer_timeouts") == 1)
    }

    @Test func webhookAnswerThatTricklesEndsAtAnswerTimeout() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], steps: [.forever("a", interval: .milliseconds(2))])
                   : ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], body: "Back.")
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.baseURL + "/hook"), "answer_timeout_ms": 3000,
                                                                     "timeout_ms": 2000])
        try await h.run { h in
            h.send(.text("slowly"))
            #expect(await server.wait { $0.count == 1 && $0[0].forever > 20 })
            #expect(await advanceResponderClock(h.clock, step: .milliseconds(50), timeout: .seconds(20)) { h.events(named: "error").count == 1 })
            h.send(.text("now"))
            #expect(await h.output("text").wait(for: 1))
        }
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("answer_timeout"))
        #expect(error["limit"] == .string("answer_timeout_ms"))
        #expect(await server.wait { $0.count == 2 && $0[0].closedAt != nil })
        #expect(h.output("text").texts == ["Back."])
        #expect(Self.counter(h, "answer_timeouts") == 1)
    }

    @Test func webhookAnswerOverMaxAnswerBytesIsRefused() async throws {
        let server = try await ChatTestServer.start { i in
            switch i {
            case 0: ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], body: String(repeating: "word ", count: 1000))
            case 1: ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], steps: [.forever("more ", interval: .milliseconds(1))])
            default: ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], body: "Short.")
            }
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.baseURL + "/hook"), "max_answer_bytes": 1000])
        h.send([.text("one"), .text("two"), .text("three")])
        try await h.run()
        let errors = h.events(named: "error")
        try #require(errors.count == 2)
        #expect(errors.allSatisfy { $0["code"] == .string("answer_too_long") && $0["limit"] == .string("max_answer_bytes") })
        #expect(errors[0]["message"]?.stringValue?.contains("max_answer_bytes (1000 bytes)") == true)
        #expect(h.output("text").texts == ["Short."])
        #expect(await server.wait { $0.count == 3 && $0[1].closedAt != nil })
        #expect(Self.counter(h, "answers_too_long") == 2)
    }

    // MARK: - Secrets in echoes

    /// Runs `node` (a chat or webhook node's YAML) on one text, with a logger that records every line.
    static func runEchoed(_ node: String) async throws -> (events: String, logs: [String]) {
        let logs = ResponderLogLines()
        var registry = BuiltinNodes.registry()
        registry.register(ScriptedSource.descriptor(type: "texts", kinds: [.text], steps: [.frame(.text("Hello"))]))
        let recorders = FrameRecorders()
        registry.register(CollectingSink.descriptor(recorders: recorders))
        let yaml = """
            version: 1
            name: echo
            nodes:
              src: { type: texts }
              peer: \(node)
              answers: { type: collect }
              events: { type: collect }
            links:
              - src -> peer -> answers
              - peer.events -> events
            """
        let graph = try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:]), registry: registry)
        var logger = Logger(label: "voicepipe-test") { _ in ResponderLogHandler(lines: logs) }
        logger.logLevel = .trace
        let pipeline = try Pipeline(graph: graph, logger: logger)
        let events = try await runPipeline(pipeline, timeout: .seconds(30))
        let lines = (events + recorders["events"].events).map { $0.jsonLine() }.joined(separator: "\n")
        return (lines, logs.all)
    }

    @Test("a chat server that echoes the key in its error puts it in no event and no log line",
          arguments: ["json", "text", "long", "stream"])
    func chatEchoedKeyIsScrubbed(body: String) async throws {
        let key = "sk-echo-0123456789abcdefghij"
        let reply: ChatTestServer.Reply = switch body {
        case "json": .status(401, "bad key: {{authorization}}")
        case "text": ChatTestServer.Reply(status: 401, headers: [("Content-Type", "text/plain")], body: "Unauthorized. You sent Authorization: {{authorization}}")
        // Cut short at 300 characters in the middle of the key.
        case "long": ChatTestServer.Reply(status: 403, headers: [("Content-Type", "text/plain")], body: String(repeating: "x", count: 283) + " {{authorization}} end")
        default: ChatTestServer.Reply(steps: [.raw(#"data: {"error":{"message":"refused {{authorization}}"}}"# + "\n\n")])
        }
        let server = try await ChatTestServer.start([reply, reply, reply])
        defer { Task { await server.shutdown() } }
        let (events, logs) = try await Self.runEchoed(#"{ type: chat, url: "\#(server.baseURL)", api_key: "\#(key)", reconnect_attempts: 0 }"#)
        #expect(server.requests.first?.header("Authorization") == "Bearer \(key)")
        #expect(events.contains("\"error\""), "\(events)")
        #expect(events.contains(SecretScrubber.replacement), "\(events)")
        #expect(!events.contains(key), "\(events)")
        #expect(!events.contains("sk-echo"), "\(events)")
        #expect(!logs.joined().contains("sk-echo"), "\(logs)")
    }

    @Test func aWebhookServerThatEchoesItsHeadersPutsThemInNoEventOrLogLine() async throws {
        let token = "hook-secret-9876543210"
        let server = try await ChatTestServer.start { i in
            i == 0 ? ChatTestServer.Reply(status: 500, headers: [("Content-Type", "text/plain")], body: "upstream said no to {{authorization}}")
                   : ChatTestServer.Reply(status: 401, headers: [("Content-Type", "application/json")], body: #"{"message":"denied {{authorization}}"}"#)
        }
        defer { Task { await server.shutdown() } }
        let (events, logs) = try await Self.runEchoed(#"{ type: webhook, url: "\#(server.baseURL)/hook", headers: { Authorization: "Bearer \#(token)" }, retry_backoff_ms: 1, reconnect_attempts: 1 }"#)
        #expect(server.requests.count == 2)
        #expect(server.requests.first?.header("Authorization") == "Bearer \(token)")
        #expect(logs.contains { $0.contains("retry 1 of 1") && $0.contains(SecretScrubber.replacement) }, "\(logs)")
        #expect(events.contains("denied"), "\(events)")
        #expect(!events.contains(token), "\(events)")
        #expect(!logs.joined().contains(token), "\(logs)")
    }

    @Test func theScrubberFindsTheFormsAnEchoTakes() {
        let s = SecretScrubber(config: NodeConfig(id: "n", type: "t", values: [
            "api_key": .string("sk-abc/def+ghi"),
            "headers": .map(["Authorization": .string("Basic dXNlcjpodW50ZXIyIQ==")]),
            "url": .string("https://bob:pa%40ss-word@example.com/x"),
            "model": .string("not-secret-model"),
        ]), parameters: [ParamSpec("api_key", .string, secret: true, doc: ""), ParamSpec("headers", .stringMap, secret: true, doc: ""),
                         ParamSpec("url", .string, doc: ""), ParamSpec("model", .string, doc: "")])
        #expect(s.scrub("key sk-abc/def+ghi!") == "key (secret)!")
        #expect(s.scrub(#"{"key":"sk-abc\/def+ghi"}"#) == #"{"key":"(secret)"}"#)
        #expect(s.scrub("q=sk%2Dabc%2Fdef%2Bghi") == "q=(secret)")
        #expect(s.scrub("got Basic dXNlcjpodW50ZXIyIQ==") == "got (secret)")
        #expect(s.scrub("got dXNlcjpodW50ZXIyIQ==") == "got (secret)")
        #expect(s.scrub("password hunter2!") == "password (secret)")
        #expect(s.scrub("url https://bob:pa@ss-word@example.com") == "url https://bob:(secret)@example.com")
        #expect(s.scrub("cut short sk-abc/d…") == "cut short (secret)…")
        #expect(s.scrub("model not-secret-model") == "model not-secret-model")
        // A secret URL parameter hides its password, not the address.
        let nats = SecretScrubber(config: NodeConfig(id: "n", type: "t", values: ["url": .string("nats://app:s3cretpw@10.0.0.9:4222")]),
                                  parameters: [ParamSpec("url", .string, secret: true, doc: "")])
        #expect(nats.scrub("nats://app:s3cretpw@10.0.0.9:4222 refused") == "nats://app:(secret)@10.0.0.9:4222 refused")
        #expect(nats.scrub("connecting to 10.0.0.9:4222") == "connecting to 10.0.0.9:4222")
        let event = s.scrub(Event("error", fields: [("message", "x sk-abc/def+ghi"), ("list", .array(["pa@ss-word"]))]))
        #expect(event.jsonLine().contains("sk-abc") == false && event.jsonLine().contains("pa@ss") == false)
    }
}
