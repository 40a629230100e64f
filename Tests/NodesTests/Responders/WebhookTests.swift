import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

@Suite("webhook")
struct WebhookTests {
    @Test func roundTrip() async throws {
        let server = try await HTTPTestServer.start(answer: ("application/json", Array(#"{"text":"Sure. I will turn it on."}"#.utf8)))
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: [
            "url": .string(server.url("/hook?token=abc")), "headers": .map(["X-Token": "sekret-hook"]),
        ])
        h.send(.text("Turn on the light"))
        try await h.run()
        #expect(h.output("text").texts == ["Sure.", "I will turn it on."])
        let r = try #require(server.requests.first)
        #expect(r.method == "POST")
        #expect(r.uri == "/hook?token=abc")
        #expect(r.header("Content-Type") == "application/json")
        #expect(r.header("X-Token") == "sekret-hook")
        let json = try #require(try JSONSerialization.jsonObject(with: Data(r.body)) as? [String: Any])
        #expect(json["text"] as? String == "Turn on the light")
        #expect(json["node"] as? String == NodeHarness.nodeID)
        #expect(json["turn"] as? Int == 1)
        #expect(h.events.map(\.name) == ["response_start", "response_end"])
        let end = try #require(h.events(named: "response_end").first)
        #expect(end["text"] == .string("Sure. I will turn it on."))
        #expect(end["status"] == .int(200))
        #expect(end["sentences"] == .int(2))
        let lines = h.events.map { $0.jsonLine() }.joined()
        #expect(!lines.contains("sekret-hook"))
        let configuration = try WebhookNode.descriptor.configuration(["url": "http://h/x", "headers": .map(["X-Token": "sekret-hook"])])
        #expect(!"\(configuration)".contains("sekret-hook"))
        #expect(WebhookNode.descriptor.parameter("headers")?.secret == true)
    }

    @Test func plainTextAnswer() async throws {
        let server = try await HTTPTestServer.start(answer: ("text/plain; charset=utf-8", Array("Hello from the hook! 你好。".utf8)))
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.url("/hook"))])
        h.send([.text("one"), .text("two")])
        try await h.run()
        #expect(h.output("text").texts == ["Hello from the hook!", "你好。", "Hello from the hook!", "你好。"])
        #expect(server.requests.count == 2)
        let turns = server.requests.compactMap { (try? JSONSerialization.jsonObject(with: Data($0.body)) as? [String: Any])?["turn"] as? Int }
        #expect(turns == [1, 2])
    }

    @Test func jsonWithoutTextAnswersNothing() async throws {
        let server = try await HTTPTestServer.start()   // answers {"ok":true,...}
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.url("/hook"))])
        h.send(.text("just telling you"))
        try await h.run()
        #expect(h.output("text").texts.isEmpty)
        #expect(h.events(named: "response_end").first?["sentences"] == .int(0))
        #expect(h.events(named: "error").isEmpty)
    }

    @Test func retries429ThenSucceeds() async throws {
        let server = try await HTTPTestServer.start(statuses: [429, 200], answer: ("application/json", Array(#"{"text":"Got it."}"#.utf8)))
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.url("/hook")), "retry_backoff_ms": 200])
        try await h.run { h in
            h.send(.text("hello"))
            #expect(await server.waitFor { $0.count == 1 && $0[0].endAt != nil })
            #expect(await advanceResponderClock(h.clock, until: { server.requests.count >= 2 }))
            #expect(await h.output("text").wait(for: 1))
        }
        #expect(server.requests.map(\.status) == [429, 200])
        #expect(h.output("text").texts == ["Got it."])
        #expect(h.events(named: "error").isEmpty)
    }

    @Test func serverErrorsAreGivenUpAndTheNodeGoesOn() async throws {
        let server = try await HTTPTestServer.start(statuses: [500], answer: ("application/json", Array(#"{"text":"Back."}"#.utf8)))
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.url("/hook")), "reconnect_attempts": 1,
                                                                     "retry_backoff_ms": 0])
        try await h.run { h in
            h.send(.text("first"))
            #expect(await h.output("events").wait(for: 2))   // response_start, error
            server.setStatuses([200])
            h.send(.text("second"))
            #expect(await h.output("text").wait(for: 1))
        }
        let error = try #require(h.events(named: "error").first)
        #expect(error["code"] == .string("http_5xx"))
        #expect(error["attempts"] == .int(2))
        #expect(error["status"] == .int(500))
        #expect(error["text"] == .string("first"))
        #expect(server.requests.count == 3)
        #expect(h.output("text").texts == ["Back."])
    }

    @Test func silentServerTimesOutAndIsCancelled() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? .stall : ChatTestServer.Reply(headers: [("Content-Type", "application/json")], body: #"{"text":"Here."}"#)
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.baseURL + "/hook"), "timeout_ms": 3000])
        try await h.run { h in
            h.send(.text("are you there"))
            #expect(await server.wait { $0.count == 1 })
            await h.clock.advance(by: .seconds(3), waitingFor: 1)
            #expect(await h.output("events").wait(for: 2))
            h.send(.text("now?"))
            #expect(await h.output("text").wait(for: 1))
        }
        #expect(h.events(named: "error").first?["code"] == .string("timeout"))
        #expect(await server.wait { $0.first?.closedAt != nil })
        #expect(h.output("text").texts == ["Here."])
    }

    @Test func interruptCancelsThePendingRequest() async throws {
        let server = try await ChatTestServer.start { i in
            i == 0 ? .stall : ChatTestServer.Reply(headers: [("Content-Type", "text/plain")], body: "Okay.")
        }
        defer { Task { await server.shutdown() } }
        let h = try NodeHarness(WebhookNode.descriptor, parameters: ["url": .string(server.baseURL + "/hook")])
        try await h.run { h in
            h.send(.text("long question"))
            #expect(await server.wait { $0.count == 1 })
            h.send(.event(Event("speech_start")), to: "interrupt")
            #expect(await server.wait { $0.first?.closedAt != nil })
            h.send(.text("short one"))
            #expect(await h.output("text").wait(for: 1))
        }
        #expect(h.output("text").texts == ["Okay."])
        #expect(h.events(named: "response_end").first?["interrupted"] == .bool(true))
        #expect(h.events(named: "error").isEmpty)
    }

    @Test func answerParsing() throws {
        func answer(_ body: String, _ type: String = "application/json") throws -> String? {
            try WebhookNode.answer(body: Array(body.utf8), contentType: type, url: "u")
        }
        #expect(try answer(#"{"text":"Hi."}"#) == "Hi.")
        #expect(try answer(#""Hi.""#) == "Hi.")
        #expect(try answer(#"{"text":null}"#) == nil)
        #expect(try answer("") == nil)
        #expect(try answer("Plain words.", "text/plain") == "Plain words.")
        #expect(try answer("{not json", "text/plain") == "{not json")
        #expect(throws: ResponderFailure.self) { try answer("{not json") }
        #expect(throws: ResponderFailure.self) { try answer(#"{"text":5}"#) }
        #expect(throws: ResponderFailure.self) { try answer("[1,2]") }
    }
}

extension HTTPTestServer {
    /// Waits (real time, up to `timeout`) until `condition` holds for the requests.
    func waitFor(timeout: Duration = .seconds(10), _ condition: ([Request]) -> Bool) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while !condition(requests) {
            if ContinuousClock.now >= deadline { return false }
            try? await Task.sleep(for: .milliseconds(2))
        }
        return true
    }
}
