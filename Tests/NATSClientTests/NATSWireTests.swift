import Foundation
import NATSClient
import Testing

@Suite("NATS wire protocol")
struct NATSWireTests {
    static let stream: [UInt8] = Array((
        "INFO {\"server_id\":\"S1\",\"version\":\"2.9.10\",\"max_payload\":1048576,\"headers\":true,\"jetstream\":true}\r\n"
        + "PING\r\n+OK\r\nPONG\r\n"
        + "MSG a.b 7 5\r\nhello\r\n"
        + "MSG a.b 7 _INBOX.x.1 0\r\n\r\n"
        + "HMSG c.d 9 _INBOX.y 37 40\r\nNATS/1.0\r\nNats-Msg-Id: m1\r\nX: y z\r\n\r\nabc\r\n"
        + "HMSG _INBOX.z 2 30 30\r\nNATS/1.0 503 No Responders\r\n\r\n\r\n"
        + "-ERR 'Authorization Violation'\r\n"
    ).utf8)

    static func decodeAll(_ parser: inout NATSParser) throws -> [NATSServerOperation] {
        var ops: [NATSServerOperation] = []
        while let op = try parser.next() { ops.append(op) }
        return ops
    }

    @Test func decodesEveryOperation() throws {
        var p = NATSParser()
        p.feed(Self.stream)
        let ops = try Self.decodeAll(&p)
        #expect(ops.count == 9)
        guard case .info(let info) = ops[0] else { Issue.record("no INFO"); return }
        #expect(info.serverID == "S1" && info.jetStream && info.headers && info.maxPayload == 1_048_576)
        #expect(ops[1] == .ping && ops[2] == .ok && ops[3] == .pong)
        #expect(ops[4] == .message(NATSMessage(subject: "a.b", sid: "7", payload: Array("hello".utf8))))
        #expect(ops[5] == .message(NATSMessage(subject: "a.b", sid: "7", replyTo: "_INBOX.x.1")))
        guard case .message(let h) = ops[6] else { Issue.record("no HMSG"); return }
        #expect(h.replyTo == "_INBOX.y" && h.header("nats-msg-id") == "m1" && h.header("X") == "y z" && h.payload == Array("abc".utf8) && h.status == nil)
        guard case .message(let s) = ops[7] else { Issue.record("no status HMSG"); return }
        #expect(s.status == 503 && s.statusDescription == "No Responders" && s.payload.isEmpty && s.replyTo == nil)
        #expect(ops[8] == .error("Authorization Violation"))
        #expect(p.pending == 0)
    }

    @Test func anySplitOfTheStreamDecodesTheSame() throws {
        var whole = NATSParser()
        whole.feed(Self.stream)
        let expected = try Self.decodeAll(&whole)
        for cut in 1..<Self.stream.count {
            var p = NATSParser()
            p.feed(Self.stream[..<cut])
            var ops = try Self.decodeAll(&p)
            p.feed(Self.stream[cut...])
            ops += try Self.decodeAll(&p)
            #expect(ops == expected, "split at \(cut)")
        }
        // Byte by byte.
        var p = NATSParser()
        var ops: [NATSServerOperation] = []
        for b in Self.stream { p.feed([b]); ops += try Self.decodeAll(&p) }
        #expect(ops == expected)
    }

    @Test func boundsAndMalformedInput() throws {
        var p = NATSParser()
        p.maxControlLine = 64
        p.feed(Array(repeating: UInt8(ascii: "A"), count: 100))
        #expect(throws: NATSProtocolError.self) { try p.next() }

        var q = NATSParser()
        q.maxPayload = 10
        q.feed(Array("MSG a 1 11\r\n".utf8))
        #expect(throws: NATSProtocolError.tooLarge("message of 11 bytes (limit 10)")) { try q.next() }

        for bad in ["MSG a\r\n", "MSG a 1 x\r\n", "HMSG a 1 9 5\r\n12345\r\n", "HMSG a 1 5 5\r\nXXXXX\r\n", "WHAT\r\n", "MSG a 1 3\r\nabcd\r\n", "INFO nope\r\n"] {
            var r = NATSParser()
            r.feed(Array(bad.utf8))
            #expect(throws: NATSProtocolError.self, "\(bad.debugDescription)") { while try r.next() != nil {} }
        }
    }

    @Test func encodesPublishWithAndWithoutHeaders() {
        var out: [UInt8] = []
        NATSEncoder.publish(subject: "a.b", payload: Array("hi".utf8), into: &out)
        #expect(String(decoding: out, as: UTF8.self) == "PUB a.b 2\r\nhi\r\n")
        out = []
        NATSEncoder.publish(subject: "a.b", replyTo: "r.1", headers: [("Nats-Msg-Id", "x")], payload: Array("hi".utf8), into: &out)
        let text = String(decoding: out, as: UTF8.self)
        #expect(text == "HPUB a.b r.1 28 30\r\nNATS/1.0\r\nNats-Msg-Id: x\r\n\r\nhi\r\n")
        // What we encode, a server relays as HMSG that our parser reads back.
        var p = NATSParser()
        p.feed(Array(text.replacingOccurrences(of: "HPUB a.b r.1", with: "HMSG a.b 4 r.1").utf8))
        #expect((try? p.next()) == .message(NATSMessage(subject: "a.b", sid: "4", replyTo: "r.1", headers: [("Nats-Msg-Id", "x")], payload: Array("hi".utf8))))
    }

    @Test func subjectTokensAndURLs() throws {
        #expect(NATSSubject.token("voice id.1*>") == "voice_id_1__")
        #expect(NATSSubject.token("") == "_")
        #expect(NATSSubject.isValidForPublish("voicepipe.asr.s1.transcript"))
        #expect(!NATSSubject.isValidForPublish("a..b") && !NATSSubject.isValidForPublish("a.*") && !NATSSubject.isValidForPublish("a b"))

        let o = try NATSOptions(url: "nats://alice:s%40cret@nats-0:4223, nats://[::1], 10.0.0.5")
        #expect(o.servers == [NATSServerAddress(host: "nats-0", port: 4223, user: "alice", password: "s@cret"),
                              NATSServerAddress(host: "::1"), NATSServerAddress(host: "10.0.0.5")])
        #expect(o.servers[0].description == "nats://nats-0:4223")   // no credentials in logs
        #expect(try NATSOptions(url: "tls://nats:4222").servers == [NATSServerAddress(host: "nats", tls: true)])
        #expect(throws: NATSError.self) { try NATSOptions(url: "wss://nats:4222") }
        #expect(throws: NATSError.self) { try NATSOptions(url: "nats://host:99999") }
        #expect(throws: NATSError.self) { try NATSOptions(url: " , ") }
        var e = try NATSOptions(url: "nats://h")
        e.applyEnvironment(["NATS_USER": "u", "NATS_PASSWORD": "p", "NATS_TOKEN": "t"])
        #expect(e.user == "u" && e.password == "p" && e.token == "t")
    }

    @Test func clusterServersFromINFO() throws {
        let info = try NATSServerInfo(json: Array(#"{"server_id":"x","connect_urls":["10.0.0.7:4222","[fd00::2]:4223","nats-2"],"jetstream":true}"#.utf8))
        #expect(info.connectURLs == ["10.0.0.7:4222", "[fd00::2]:4223", "nats-2"])
        // Discovered servers are reached like the configured one: same TLS and URL credentials.
        let template = NATSServerAddress(host: "nats", port: 4222, user: "u", password: "p", tls: true)
        let found = info.connectURLs.compactMap { NATSServerAddress(discovered: $0, like: template) }
        #expect(found == [NATSServerAddress(host: "10.0.0.7", port: 4222, user: "u", password: "p", tls: true),
                          NATSServerAddress(host: "fd00::2", port: 4223, user: "u", password: "p", tls: true),
                          NATSServerAddress(host: "nats-2", port: 4222, user: "u", password: "p", tls: true)])
        #expect(NATSServerAddress(discovered: "h:0", like: template) == nil)
        #expect(NATSServerAddress(discovered: "[::1", like: template) == nil)
        #expect(NATSServerAddress(discovered: "", like: template) == nil)
        #expect(try NATSServerInfo(json: Array(#"{"server_id":"x"}"#.utf8)).connectURLs.isEmpty)
    }
}

@Suite("Publish queue (at-least-once bookkeeping)")
struct PublishQueueTests {
    func message(_ i: Int) -> OutboundMessage { OutboundMessage(subject: "s", payload: [UInt8(i & 0xff)], id: "m\(i)") }

    @Test func sendsInOrderWithinTheWindowAndForgetsOnlyWhatIsAcknowledged() {
        var q = PublishQueue(capacity: 100, window: 3, ackTimeout: .seconds(1))
        for i in 1...5 { q.enqueue(message(i)) }
        let t0 = ContinuousClock.now
        let first = q.takeForSending(now: t0)
        #expect(first.map(\.message.id) == ["m1", "m2", "m3"])
        #expect(q.takeForSending(now: t0).isEmpty)              // window full
        #expect(q.acknowledged(first[1].seq) == .stored)
        #expect(q.acknowledged(first[1].seq) == .unknown)       // a second ack of the same is ignored
        #expect(q.takeForSending(now: t0).map(\.message.id) == ["m4"])
        #expect(q.held == 4)
        // Overdue acknowledgements are sent again, before new messages.
        let later = q.takeForSending(now: t0 + .seconds(1))
        #expect(later.map(\.message.id) == ["m1", "m3", "m4"])
        #expect(q.resent == 3)
    }

    @Test func aLostConnectionPutsWhatWasInFlightBackInOrder() {
        var q = PublishQueue(capacity: 100, window: 2, ackTimeout: .seconds(5))
        for i in 1...4 { q.enqueue(message(i)) }
        let now = ContinuousClock.now
        let sent = q.takeForSending(now: now)
        #expect(sent.map(\.message.id) == ["m1", "m2"])
        _ = q.acknowledged(sent[0].seq)
        q.connectionLost()
        #expect(q.inFlightCount == 0)
        #expect(q.takeForSending(now: now).map(\.message.id) == ["m2", "m3"])
    }

    @Test func aFullQueueDropsTheOldestWaitingMessageAndCountsIt() {
        var q = PublishQueue(capacity: 3, window: 1)
        for i in 1...3 { q.enqueue(message(i)) }
        _ = q.takeForSending(now: .now)                           // m1 in flight: never dropped for room
        #expect(q.enqueue(message(4))?.id == "m2")
        #expect(q.enqueue(message(5))?.id == "m3")
        #expect(q.dropped == 2 && q.held == 3)
        var ids: [String] = []
        var now = ContinuousClock.now
        while !q.isEmpty {
            for s in q.takeForSending(now: now) { ids.append(s.message.id); _ = q.acknowledged(s.seq) }
            now += .milliseconds(1)
        }
        // m1, in flight all along, is sent again once its acknowledgement is overdue; m2 and m3 are gone.
        #expect(ids == ["m1", "m4", "m5"])
        #expect(q.acknowledged == 3 && q.resent == 1)
    }

    @Test func refusalsAreRetriedThenDropped() {
        var q = PublishQueue(capacity: 10, window: 10, ackTimeout: .seconds(1), maxAttempts: 2)
        q.enqueue(message(1)); q.enqueue(message(2))
        let a = q.takeForSending(now: .now)
        #expect(q.refused(a[0].seq, permanent: false) == .retry)
        #expect(q.refused(a[1].seq, permanent: true) == .rejected)
        let b = q.takeForSending(now: .now)
        #expect(b.map(\.message.id) == ["m1"])
        #expect(q.refused(b[0].seq, permanent: false) == .rejected)   // second attempt was the last
        #expect(q.isEmpty && q.rejected == 2)
    }
}
