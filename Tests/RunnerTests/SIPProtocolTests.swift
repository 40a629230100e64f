import Foundation
import Nodes
import Testing
@testable import VoicepipeServe

/// The pure parts of the `sip` route: the message parser, SDP offer/answer, the retransmission timer,
/// RFC 4733 digits, RTP filtering and the telephone codecs. No sockets, no clocks.
@Suite("SIP: parser, SDP, timers, digits, RTP filter, codecs")
struct SIPProtocolTests {
    static func text(_ lines: [String], body: String = "") -> [UInt8] {
        Array((lines.joined(separator: "\r\n") + "\r\n\r\n" + body).utf8)
    }

    static let invite = text([
        "INVITE sip:echo@192.0.2.1:5060 SIP/2.0",
        "v: SIP/2.0/UDP 192.0.2.9:5062;branch=z9hG4bK776asdhds",
        "Via: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bKa, SIP/2.0/UDP 10.0.0.2;branch=z9hG4bKb",
        "f: \"Alice, A.\" <sip:alice@example.com>;tag=1928301774",
        "t: <sip:echo@192.0.2.1>",
        "i: a84b4c76e66710@pc33",
        "CSeq: 314159 INVITE",
        "Subject: a folded",
        "  subject line",
        "m: <sip:alice@192.0.2.9:5062>",
        "c: application/sdp",
        "l: 10",
    ], body: "0123456789")

    @Test("An INVITE with compact forms, a folded line, a Via list and a body of Content-Length")
    func parsesInvite() throws {
        let m = try SIPParser.parse(Self.invite)
        #expect(m.method == "INVITE")
        #expect(m.requestURI == "sip:echo@192.0.2.1:5060")
        #expect(m.callID == "a84b4c76e66710@pc33")
        #expect(m.cseq?.number == 314159 && m.cseq?.method == "INVITE")
        #expect(m["subject"] == "a folded subject line")
        #expect(m.values("Via").count == 3)
        #expect(SIPHeader.uri(m["From"] ?? "") == "sip:alice@example.com")
        #expect(SIPHeader.parameter(m["From"] ?? "", "tag") == "1928301774")
        #expect(SIPHeader.parameter(m["To"] ?? "", "tag") == nil)
        #expect(m.body == Array("0123456789".utf8))
        // A response copies Via (all of them, in order), From, Call-ID, CSeq; To gains our tag.
        let r = m.response(486, toTag: "xyz")
        #expect(r.status == 486)
        #expect(r.all("Via") == m.all("Via"))
        #expect(r["To"] == "<sip:echo@192.0.2.1>;tag=xyz")
        let again = try SIPParser.parse(r.serialized())
        #expect(again.status == 486 && again["Content-Length"] == "0" && again.callID == m.callID)
    }

    @Test("Malformed messages are refused with what could be read, never a crash", arguments: [
        ("CSeq", ["INVITE sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h;branch=z9hG4bK1", "From: <sip:x@y>;tag=1", "To: <sip:a@b>", "Call-ID: c1", "CSeq: one INVITE"], true),
        ("Content-Length", ["OPTIONS sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h;branch=z9hG4bK1", "From: <sip:x@y>;tag=1", "To: <sip:a@b>", "Call-ID: c1", "CSeq: 1 OPTIONS", "Content-Length: 900"], true),
        ("no colon", ["OPTIONS sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h;branch=z9hG4bK1", "From: <sip:x@y>;tag=1", "To: <sip:a@b>", "Call-ID: c1", "CSeq: 1 OPTIONS", "garbage line"], true),
        ("missing Call-ID", ["BYE sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h;branch=z9hG4bK1", "From: <sip:x@y>;tag=1", "To: <sip:a@b>", "CSeq: 1 BYE"], true),
        ("method mismatch", ["BYE sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h;branch=z9hG4bK1", "From: <sip:x@y>;tag=1", "To: <sip:a@b>", "Call-ID: c", "CSeq: 1 INVITE"], true),
        ("version", ["INVITE sip:a@b SIP/3.0", "Via: SIP/2.0/UDP h"], false),
        ("start line", ["HELLO"], false),
    ])
    func refusesMalformed(_ name: String, _ lines: [String], _ answerable: Bool) {
        do {
            _ = try SIPParser.parse(Self.text(lines))
            Issue.record("\(name): parsed")
        } catch {
            #expect(!error.message.isEmpty)
            #expect((error.partial?["Via"] != nil) == answerable, "\(name): \(error.message)")
        }
    }

    @Test("Binary noise, an empty datagram and an oversized one are refused")
    func refusesNoise() {
        var g = SystemRandomNumberGenerator()
        for n in [0, 1, 7, 100, 2000] {
            let noise = (0..<n).map { _ in UInt8.random(in: 0...255, using: &g) }
            #expect(throws: SIPParseError.self) { try SIPParser.parse(noise) }
        }
        var big = Self.text(["OPTIONS sip:a@b SIP/2.0", "Via: SIP/2.0/UDP h", "From: <sip:x@y>", "To: <sip:a@b>", "Call-ID: c", "CSeq: 1 OPTIONS"])
        big += [UInt8](repeating: 65, count: SIPParser.maxMessageBytes)
        #expect(throws: SIPParseError.self) { try SIPParser.parse(big) }
    }

    @Test("A TCP stream is split by Content-Length, across reads and with keep-alives between messages")
    func framesStream() throws {
        let one = Self.invite
        var framer = SIPStreamFramer()
        var got: [SIPMessage] = []
        let stream = one + Array("\r\n\r\n".utf8) + one
        for chunk in stride(from: 0, to: stream.count, by: 37).map({ Array(stream[$0..<min($0 + 37, stream.count)]) }) {
            got += try framer.push(chunk)
        }
        #expect(got.count == 2)
        #expect(got.allSatisfy { $0.body == Array("0123456789".utf8) })
        #expect(framer.pending == 0)
        var noLength = SIPStreamFramer()
        #expect(throws: SIPParseError.self) {
            try noLength.push(Self.text(["OPTIONS sip:a@b SIP/2.0", "Via: SIP/2.0/TCP h", "From: <sip:x@y>", "To: <sip:a@b>", "Call-ID: c", "CSeq: 1 OPTIONS"]))
        }
    }

    static let offer = """
        v=0\r
        o=alice 2890844526 2890844526 IN IP4 198.51.100.7\r
        s=-\r
        c=IN IP4 198.51.100.7\r
        t=0 0\r
        m=audio 49170 RTP/AVP 9 8 0 111 101 13\r
        a=rtpmap:111 opus/48000/2\r
        a=rtpmap:101 telephone-event/8000\r
        a=fmtp:101 0-16\r
        a=ptime:20\r
        a=sendrecv\r

        """

    @Test("SDP answer: the route's first codec the offer has, its payload type, telephone-event and CN kept")
    func negotiates() throws {
        let offer = try SessionDescription.parse(Self.offer)
        #expect(offer.address == "198.51.100.7" && offer.port == 49170)
        let n = try MediaNegotiation.negotiate(offer: offer, preferences: [.opus, .pcmu])
        #expect(n.codec == .opus && n.payloadType == 111 && n.telephoneEvent == 101 && n.comfortNoise == 13)
        let answer = n.answer(address: "192.0.2.1", port: 40000, sessionID: "1", version: 1)
        let text = answer.text()
        #expect(text.contains("m=audio 40000 RTP/AVP 111 101 13"))
        #expect(text.contains("a=rtpmap:111 opus/48000/2"))
        #expect(text.contains("a=sendrecv"))
        // Reading our own answer back gives the same stream.
        #expect(try SessionDescription.parse(text).formats.map(\.payloadType) == [111, 101, 13])
        // Static payload types without rtpmap are understood (G.722 = 9).
        #expect(try MediaNegotiation.negotiate(offer: offer, preferences: [.g722]).payloadType == 9)
        #expect(try MediaNegotiation.negotiate(offer: offer, preferences: [.pcma, .pcmu]).codec == .pcma)
    }

    @Test("No codec in common is a 488 failure naming what was offered")
    func noCommonCodec() throws {
        let offer = try SessionDescription.parse("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP 3 18\r\na=rtpmap:18 G729/8000\r\n")
        #expect(throws: MediaNegotiation.Failure.noCommonCodec(offered: ["pt 3", "g729"])) {
            try MediaNegotiation.negotiate(offer: offer, preferences: TelephoneCodec.allCases)
        }
        #expect(throws: SessionDescription.Problem.self) { try SessionDescription.parse("v=0\r\nc=IN IP4 1.2.3.4\r\n") }
        #expect(throws: SessionDescription.Problem.self) { try SessionDescription.parse("hello") }
        #expect(throws: SessionDescription.Problem.self) { try SessionDescription.parse("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP 300\r\n") }
    }

    @Test("Hold: sendonly is answered recvonly, inactive inactive, c=0.0.0.0 as sendonly")
    func hold() throws {
        for (attribute, caller, answer) in [("a=sendonly", "sendonly", "recvonly"), ("a=inactive", "inactive", "inactive"),
                                            ("a=recvonly", "recvonly", "sendonly"), ("", "sendrecv", "sendrecv")] {
            let o = try SessionDescription.parse("v=0\r\nc=IN IP4 1.2.3.4\r\nm=audio 4000 RTP/AVP 0\r\n\(attribute)\r\n")
            #expect(o.direction.rawValue == caller)
            let n = try MediaNegotiation.negotiate(offer: o, preferences: [.pcmu])
            #expect(n.answer(address: "5.6.7.8", port: 1, sessionID: "1", version: 2).direction.rawValue == answer)
        }
        let old = try SessionDescription.parse("v=0\r\nc=IN IP4 0.0.0.0\r\nm=audio 4000 RTP/AVP 0\r\n")
        #expect(old.direction == .sendonly)
    }

    @Test("Timers G and H: 500 ms doubling to 4 s, giving up at 32 s; done once answered")
    func retransmission() {
        var t = SIPRetransmission()
        var sends: [Int] = []
        var ms = 0
        loop: while ms <= 40_000 {
            switch t.poll(elapsedMs: ms) {
            case .retransmit: sends.append(ms)
            case .giveUp: break loop
            case .wait(let until): ms = until; continue
            case .done: Issue.record("done without an answer"); break loop
            }
        }
        #expect(sends == [500, 1500, 3500, 7500, 11500, 15500, 19500, 23500, 27500, 31500])
        #expect(ms == 32_000)
        var answered = SIPRetransmission()
        #expect(answered.poll(elapsedMs: 600) == .retransmit)
        answered.answered()
        #expect(answered.poll(elapsedMs: 5000) == .done)
    }

    @Test("Over TCP nothing is repeated, only the 32 s limit stays (RFC 3261 §17.1.1.2); due() performs the repetitions due and says when to look again")
    func reliableTimer() {
        var t = SIPRetransmission(reliable: true)
        #expect(t.poll(elapsedMs: 600) == .wait(untilMs: 32_000))
        #expect(t.poll(elapsedMs: 31_999) == .wait(untilMs: 32_000))
        #expect(t.poll(elapsedMs: 32_000) == .giveUp)
        var u = SIPRetransmission()
        let start = ContinuousClock.now
        var sent = 0, gaveUp = false
        #expect(u.due(now: start + .milliseconds(1600), since: start, retransmit: { sent += 1 }, giveUp: { gaveUp = true }) == start + .milliseconds(3500))
        #expect(sent == 2 && !gaveUp)
        #expect(u.due(now: start + .milliseconds(40_000), since: start, retransmit: { sent += 1 }, giveUp: { gaveUp = true }) == nil)
        #expect(gaveUp)
    }

    @Test("A SIP URI's transport parameter, with other parameters and headers around it")
    func uriTransport() {
        #expect(SIPDialer.uriParameter("sip:bob@192.0.2.1:5060;transport=TCP", "transport") == "TCP")
        #expect(SIPDialer.uriParameter("sip:bob@192.0.2.1;user=phone;transport=tcp?subject=x", "transport") == "tcp")
        #expect(SIPDialer.uriParameter("sip:bob@192.0.2.1:5060", "transport") == nil)
        #expect(SIPDialer.uriParameter("sip:bob@192.0.2.1?transport=tcp", "transport") == nil)
    }

    @Test("RFC 4733: one digit per event with its duration, end packets repeated; an event without end reported at the next")
    func telephoneEvents() {
        var d = TelephoneEventDetector()
        func packet(_ event: UInt8, end: Bool, duration: Int) -> [UInt8] { [event, end ? 0x8a : 0x0a, UInt8(duration >> 8), UInt8(duration & 0xff)] }
        var digits: [TelephoneEventDetector.Digit] = []
        for dur in stride(from: 160, through: 1120, by: 160) { digits += d.packet(timestamp: 1000, payload: packet(1, end: false, duration: dur)) }
        for _ in 0..<3 { digits += d.packet(timestamp: 1000, payload: packet(1, end: true, duration: 1280)) }
        #expect(digits == [.init(digit: "1", durationMs: 160)])
        // '#' whose end packets were lost, then '*'.
        digits = d.packet(timestamp: 5000, payload: packet(11, end: false, duration: 800))
        digits += d.packet(timestamp: 9000, payload: packet(10, end: true, duration: 400))
        #expect(digits == [.init(digit: "#", durationMs: 100), .init(digit: "*", durationMs: 50)])
        #expect(d.packet(timestamp: 9100, payload: [1, 2]).isEmpty && d.ignored == 1)
        #expect(TelephoneEventDetector.info(contentType: "application/dtmf-relay", body: "Signal=5\r\nDuration=160\r\n") == .init(digit: "5", durationMs: 160))
        #expect(TelephoneEventDetector.info(contentType: "application/dtmf", body: "#") == .init(digit: "#", durationMs: 0))
        #expect(TelephoneEventDetector.info(contentType: "text/plain", body: "Signal=5") == nil)
        #expect(TelephoneEventDetector.info(contentType: "application/dtmf-relay", body: "Signal=Z") == nil)
    }

    @Test("Symmetric RTP: the first source is latched; other addresses, other SSRCs and unknown payload types are counted and ignored")
    func rtpFilter() {
        var f = RTPInbound(payloadType: 8, telephoneEvent: 101, comfortNoise: nil)
        func rtp(_ pt: UInt8, ssrc: UInt32, seq: UInt16 = 1) -> [UInt8] {
            RTPPacket(payloadType: pt, sequenceNumber: seq, timestamp: 160 * UInt32(seq), ssrc: ssrc, payload: [1, 2, 3]).serialized()
        }
        guard case .audio = f.classify(rtp(8, ssrc: 7), from: "10.0.0.1:4000") else { Issue.record("first packet"); return }
        #expect(f.source == "10.0.0.1:4000")
        #expect(f.classify(rtp(8, ssrc: 7), from: "10.0.0.66:4000") == .wrongAddress)
        #expect(f.classify(rtp(8, ssrc: 99), from: "10.0.0.1:4000") == .wrongSSRC)
        #expect(f.classify(rtp(0, ssrc: 7), from: "10.0.0.1:4000") == .unknownPayloadType(0))
        #expect(f.classify(rtp(13, ssrc: 7), from: "10.0.0.1:4000") == .comfortNoise)
        #expect(f.classify([0x80, 1], from: "10.0.0.1:4000") == .malformed)
        if case .telephoneEvent = f.classify(rtp(101, ssrc: 7), from: "10.0.0.1:4000") {} else { Issue.record("telephone-event") }
        #expect(f.counters.wrongAddress == 1 && f.counters.wrongSSRC == 1 && f.counters.unknownPayload == 1 && f.counters.malformed == 1)
        // A restarted stream (a new SSRC, steadily, from the latched address) is followed.
        var last: RTPInbound.Verdict = .malformed
        for i in 0..<f.restartAfter { last = f.classify(rtp(8, ssrc: 1234, seq: UInt16(i)), from: "10.0.0.1:4000") }
        if case .audio = last {} else { Issue.record("restart not followed: \(last)") }
        #expect(f.ssrc == 1234)
    }

    @Test("G.711: A-law and µ-law code values and round trips within the law's step")
    func g711() {
        #expect(ALaw.encode(0) == 0xd5 && MuLaw.encode(0) == 0xff)
        #expect(ALaw.decode(0xd5) == 8 && ALaw.decode(0x55) == -8)
        for s in stride(from: -32768, through: 32767, by: 97).map(Int16.init) {
            let a = Int(ALaw.decode(ALaw.encode(s))), u = Int(MuLaw.decode(MuLaw.encode(s)))
            let step = max(16, abs(Int(s)) / 16)
            #expect(abs(a - Int(s)) <= step, "A-law \(s) -> \(a)")
            #expect(abs(u - Int(s)) <= step + 132, "µ-law \(s) -> \(u)")
        }
        // Every A-law code decodes and encodes back to itself.
        for c in 0...255 { #expect(ALaw.encode(ALaw.decode(UInt8(c))) == UInt8(c), "code \(c)") }
    }

    @Test("G.722 (spandsp, loaded at run time) and Opus carry a 1 kHz tone through the call codec")
    func wideband() throws {
        for codec in [TelephoneCodec.g722, .opus, .pcma] {
            let enc = try CallCodec(codec, ptime: 20, graphRate: 16000)
            let dec = try CallCodec(codec, ptime: 20, graphRate: 16000)
            var out: [Int16] = []
            var input: [Int16] = []
            for f in 0..<25 {
                let frame = (0..<enc.frameSamples).map { i in Int16(8000 * sin(2 * Double.pi * 1000 * Double(f * enc.frameSamples + i) / Double(enc.rate))) }
                input += frame
                let payload = try enc.encode(frame)
                #expect(!payload.isEmpty)
                out += try dec.decode(payload)
            }
            #expect(out.count == input.count, "\(codec)")
            // After the codec's delay, the output has the tone's energy at 1 kHz (Goertzel).
            let tail = out.suffix(enc.rate / 4).map(Double.init)
            let k = 2 * cos(2 * Double.pi * 1000 / Double(enc.rate))
            var a = 0.0, b = 0.0
            for x in tail { (a, b) = (x + k * a - b, a) }
            let tone = (a * a + b * b - k * a * b) * 2 / Double(tail.count)
            let total = tail.reduce(0) { $0 + $1 * $1 }
            #expect(tone / total > 0.8, "\(codec): \(tone / total) of the energy at 1 kHz")
            #expect(dec.conceal().count == dec.frameSamples)
        }
    }

    @Test("Digest (RFC 2617's own example): the challenge read, the response computed; other algorithms and qops refused")
    func digest() throws {
        let c = try DigestChallenge.parse("Digest realm=\"testrealm@host.com\", qop=\"auth,auth-int\", nonce=\"dcd98b7102dd2f0e8b11d0f600bfb0c093\", opaque=\"5ccc069c403ebaf9f0171e9517f40e41\"")
        #expect(c.realm == "testrealm@host.com" && c.qop == "auth" && c.opaque == "5ccc069c403ebaf9f0171e9517f40e41")
        let v = c.authorization(method: "GET", uri: "/dir/index.html", user: "Mufasa", password: "Circle Of Life", cnonce: "0a4f113b")
        #expect(v.contains("response=\"6629fae49393a05397450978507c4ef1\""), "\(v)")
        #expect(v.contains("nc=00000001") && v.contains("qop=auth") && v.contains("opaque=\"5ccc069c403ebaf9f0171e9517f40e41\""))
        #expect(throws: DigestChallenge.Problem.self) { try DigestChallenge.parse("Basic realm=\"x\"") }
        #expect(throws: DigestChallenge.Problem.self) { try DigestChallenge.parse("Digest realm=\"x\", nonce=\"y\", algorithm=SHA-256") }
        #expect(throws: DigestChallenge.Problem.self) { try DigestChallenge.parse("Digest realm=\"x\", nonce=\"y\", qop=\"auth-int\"") }
        #expect(throws: DigestChallenge.Problem.self) { try DigestChallenge.parse("Digest realm=\"x\"") }
    }
}
