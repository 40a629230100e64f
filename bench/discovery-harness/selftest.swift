// Self-test of Sources/CoreNodes/Discovery without sockets: DNS wire format (round trips, compression,
// hostile input, random bytes) and the intercom session state machine (two machines exchanging
// messages over a simulated link). Built by build.sh as discovery-selftest; exits 1 on a failure.

import Foundation

nonisolated(unsafe) var failures = 0

func check(_ condition: Bool, _ what: String, file: StaticString = #file, line: UInt = #line) {
    if !condition {
        failures += 1
        print("FAIL \(line): \(what)")
    }
}

typealias Name = DNSMessage.Name

// MARK: - DNS

func dnsTests() {
    let type: Name = "_voicepipe-intercom._udp.local"
    let instance = type.prepending("intercom on vp.a")   // a dot inside the label
    let host: Name = "voicepipe-1a2b3c4d.local"
    let message = DNSMessage(
        flags: DNSMessage.responseFlags,
        questions: [.init(name: type, type: .ptr, unicastResponse: true)],
        answers: [
            .init(name: type, ttl: 10, data: .ptr(instance)),
            .init(name: instance, ttl: 10, data: .srv(priority: 0, weight: 0, port: 5006, target: host), cacheFlush: true),
            .init(name: instance, ttl: 10, data: .txt([Array("id=0123456789abcdef".utf8), Array("ctl=40000".utf8), []]), cacheFlush: true),
            .init(name: host, ttl: 10, data: .a([10, 77, 0, 1]), cacheFlush: true),
        ],
        authorities: [.init(name: host, ttl: 120, data: .aaaa([0xfd, 0x77] + Array(repeating: 0, count: 13) + [1]))],
        additionals: [.init(name: host, ttl: 120, data: .other(type: .nsec, rdata: [0, 0, 1, 0x40]))])
    for compress in [true, false] {
        do {
            let wire = try message.encode(compress: compress)
            let back = try DNSMessage.decode(wire)
            check(back == message, "round trip (compress \(compress))")
            check(back.questions[0].unicastResponse, "QU bit")
            check(back.answers[1].cacheFlush && !back.answers[0].cacheFlush, "cache-flush bit")
            check(back.answers[0].data == .ptr(instance) && back.answers[0].name.labels[0] == "_voicepipe-intercom", "PTR data")
            if case .ptr(let n) = back.answers[0].data { check(n.labels[0] == "intercom on vp.a", "dot kept inside a label") }
            if compress { check(wire.count < (try message.encode(compress: false)).count, "compression shrinks") }
        } catch {
            check(false, "round trip threw \(error)")
        }
    }
    check(Name("A.B.local") == Name("a.b.LOCAL"), "names compare without ASCII case")
    check(Set([Name("A.local"), Name("a.local")]).count == 1, "names hash without ASCII case")
    check(DNSMessage.ipv6String([0xfd, 0x77] + Array(repeating: 0, count: 13) + [1]) == "fd77::1", "IPv6 text")
    check(DNSMessage.ipv4Bytes("10.77.0.1") == [10, 77, 0, 1] && DNSMessage.ipv4Bytes("1.2.3") == nil
          && DNSMessage.ipv4Bytes("1.2.3.256") == nil, "IPv4 parse")
    check(DNSMessage.txtDictionary([Array("ID=1".utf8), Array("id=2".utf8), Array("flag".utf8), Array("=x".utf8)]) == ["id": "1", "flag": ""],
          "TXT dictionary")

    // Hand-made packet with compression pointers: header, question "a.local" PTR, answer name → ptr.
    var p: [UInt8] = [0, 0, 0x84, 0, 0, 1, 0, 1, 0, 0, 0, 0]
    p += [1, 0x61, 5] + Array("local".utf8) + [0]          // offset 12: a.local
    p += [0, 12, 0, 1]
    p += [0xC0, 12, 0, 12, 0x80, 1, 0, 0, 0, 10, 0, 4, 1, 0x62, 0xC0, 14]   // PTR → b.local (pointer to "local")
    if let m = try? DNSMessage.decode(p) {
        check(m.answers.first?.data == .ptr("b.local") && m.answers.first?.cacheFlush == true, "pointer decoding")
    } else {
        check(false, "hand-made packet decodes")
    }

    func rejects(_ bytes: [UInt8], _ expected: DNSMessage.FormatError, _ what: String) {
        do {
            _ = try DNSMessage.decode(bytes)
            check(false, "\(what): accepted")
        } catch {
            check(error == expected, "\(what): \(error), expected \(expected)")
        }
    }
    let header: [UInt8] = [0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0]
    rejects(header + [0xC0, 12, 0, 1, 0, 1], .badPointer, "pointer to itself")
    rejects(header + [0xC0, 14, 0, 1, 0, 1, 0], .badPointer, "forward pointer")
    rejects(header + [1, 0x61, 0xC0, 12, 0, 1, 0, 1], .badPointer, "pointer loop through a label")
    rejects(header + [0x40, 0, 0, 1, 0, 1], .badLabelType, "extended label type")
    rejects(header + Array(repeating: [1, 0x61], count: 128).flatMap { $0 } + [0, 0, 1, 0, 1], .badName, "name over 255 bytes")
    rejects(header + [5, 0x61], .truncated, "label past the end")
    rejects([0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 0, 1, 0, 0, 0, 10, 0, 3, 1, 2, 3], .badRData, "A with 3 bytes")
    rejects([0, 0, 0x84, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 16, 0, 1, 0, 0, 0, 10, 0, 2, 5, 0x61], .badRData, "TXT string past RDATA")
    rejects([0, 0, 0x84, 0, 0, 0, 0xFF, 0xFF, 0, 0, 0, 0], .truncated, "lying record count")
    do {
        _ = try DNSMessage(questions: [.init(name: Name(labels: [String(repeating: "x", count: 64)]), type: .a)]).encode()
        check(false, "64-byte label encoded")
    } catch {
        check(error == .badName, "64-byte label refused")
    }

    // Random bytes and mutations of a valid packet: must throw or decode, never trap.
    var rng = SystemRandomNumberGenerator()
    let valid = (try? message.encode()) ?? []
    var decoded = 0
    let start = ContinuousClock.now
    for i in 0..<300_000 {
        var b: [UInt8]
        if i % 3 == 0 {
            b = (0..<Int.random(in: 0...80, using: &rng)).map { _ in UInt8.random(in: 0...255, using: &rng) }
        } else {
            b = valid
            for _ in 0..<Int.random(in: 1...6, using: &rng) {
                let at = Int.random(in: 0..<b.count, using: &rng)
                switch Int.random(in: 0...3, using: &rng) {
                case 0: b[at] = UInt8.random(in: 0...255, using: &rng)
                case 1: b[at] = 0xC0 | UInt8.random(in: 0...0x3F, using: &rng)
                case 2: b.removeSubrange(at...)
                default: b.insert(UInt8.random(in: 0...255, using: &rng), at: at)
                }
                if b.isEmpty { break }
            }
        }
        if let m = try? DNSMessage.decode(b) {
            decoded += 1
            _ = try? m.encode()
        }
    }
    print("dns: 300000 random/mutated packets in \(ContinuousClock.now - start), \(decoded) decoded, no trap")
}

// MARK: - Session

typealias S = IntercomSessionState

/// Two state machines joined by a lossless link with 1 ms latency, driven in 10 ms steps.
struct Pair {
    var a: S
    var b: S
    let aPeer: S.Peer
    let bPeer: S.Peer
    var now: Duration = .zero
    var events: [(Duration, String, S.Output)] = []
    var aAlive = true
    var bAlive = true
    var queue: [(due: Duration, to: String, message: IntercomMessage, from: S.Endpoint)] = []

    init(aID: String, bID: String, codecB: String = "opus") {
        a = S(configuration: .init(id: aID, rtpPort: 5006, codec: "opus"))
        b = S(configuration: .init(id: bID, rtpPort: 5008, codec: codecB))
        aPeer = S.Peer(id: aID, instance: "A", control: .init(host: "10.77.0.1", port: 40001), codec: "opus")
        bPeer = S.Peer(id: bID, instance: "B", control: .init(host: "10.77.0.2", port: 40002), codec: codecB)
    }

    mutating func feed(_ side: String, _ input: S.Input) {
        if side == "a" ? !aAlive : !bAlive { return }
        let outs = side == "a" ? a.handle(input, now: now) : b.handle(input, now: now)
        for o in outs {
            events.append((now, side, o))
            if case .send(let m, let to) = o {
                let target = to.host == "10.77.0.1" ? "a" : "b"
                let from = side == "a" ? aPeer.control : bPeer.control
                queue.append((now + .milliseconds(1), target, m, from))
            }
        }
    }

    mutating func run(for duration: Duration) {
        let end = now + duration
        while now < end {
            now += .milliseconds(10)
            let due = queue.filter { $0.due <= now }
            queue.removeAll { $0.due <= now }
            for d in due { feed(d.to, .received(d.message, from: d.from)) }
            feed("a", .tick)
            feed("b", .tick)
        }
    }

    func first(_ side: String, _ match: (S.Output) -> Bool) -> Duration? {
        events.first { $0.1 == side && match($0.2) }?.0
    }
    func count(_ side: String, _ match: (S.Output) -> Bool) -> Int {
        events.filter { $0.1 == side && match($0.2) }.count
    }
}

func isConnected(_ o: S.Output) -> Bool { if case .connected = o { return true }; return false }
func isDisconnected(_ o: S.Output, _ reason: String? = nil) -> Bool {
    if case .disconnected(_, let r) = o { return reason == nil || r == reason }
    return false
}

func sessionTests() {
    // Both find each other: the lower id (a) invites at once, b accepts.
    var p = Pair(aID: "00000000000000aa", bID: "00000000000000bb")
    p.feed("a", .found(p.bPeer)); p.feed("b", .found(p.aPeer))
    p.run(for: .milliseconds(100))
    check(p.first("a", isConnected) != nil && p.first("b", isConnected) != nil, "both connected")
    check(p.count("b", { if case .send(let m, _) = $0 { return m.type == .invite }; return false }) == 0, "higher id did not invite")
    if case .connected(_, let rtp, _, _) = p.a.phase { check(rtp == .init(host: "10.77.0.2", port: 5008), "a sends RTP to b's port") }
    // Pings keep it up.
    p.run(for: .seconds(10))
    check(p.count("a", { isDisconnected($0) }) == 0, "no disconnect while pinging")
    check(p.count("a", { if case .send(let m, _) = $0 { return m.type == .ping }; return false }) >= 9, "a pings every second")
    // b dies: a sees the timeout after 3 s.
    p.bAlive = false
    let died = p.now
    p.run(for: .seconds(5))
    if let t = p.first("a", { isDisconnected($0, "timeout") }) {
        check(t - died >= .seconds(2) && t - died <= .seconds(3) + .milliseconds(50), "timeout after ~3 s (\(t - died))")
    } else {
        check(false, "timeout reported")
    }
    // a keeps inviting while discovery lists b; discovery loses b: a goes idle.
    check({ if case .inviting = p.a.phase { return true }; return false }(), "re-inviting after timeout")
    p.feed("a", .lost(instance: "B"))
    check(p.a.phase == .idle, "idle after lost")
    // b comes back with a new id (higher): a invites at once.
    p.b = S(configuration: .init(id: "00000000000000cc", rtpPort: 5008, codec: "opus"))
    p.bAlive = true
    var newB = p.bPeer; newB.id = "00000000000000cc"
    p.events.removeAll()
    p.feed("a", .found(newB)); p.feed("b", .found(p.aPeer))
    p.run(for: .milliseconds(100))
    check(p.first("a", isConnected) != nil && p.first("b", isConnected) != nil, "reconnected after restart")

    // The higher id invites after the grace when the lower one never does (it has not found us).
    p = Pair(aID: "00000000000000aa", bID: "00000000000000bb")
    p.feed("b", .found(p.aPeer))
    p.run(for: .seconds(3))
    if let t = p.first("b", isConnected) { check(t >= .seconds(2) && t < .milliseconds(2100), "grace invite at 2 s (\(t))") }
    else { check(false, "higher id invites after the grace") }
    check(p.first("a", isConnected) != nil, "lower id accepts an invite from an unknown peer")

    // Glare: both invite (b after its grace, a at the same moment); the lower id's invite wins.
    p = Pair(aID: "00000000000000aa", bID: "00000000000000bb")
    p.b = S(configuration: { var c = S.Configuration(id: "00000000000000bb", rtpPort: 5008, codec: "opus"); c.inviteGrace = .zero; return c }())
    p.feed("a", .found(p.bPeer)); p.feed("b", .found(p.aPeer))
    p.run(for: .milliseconds(200))
    check(p.count("a", isConnected) == 1 && p.count("b", isConnected) == 1, "glare: one session each side")
    check(p.a.connectedPeer?.id == "00000000000000bb" && p.b.connectedPeer?.id == "00000000000000aa", "glare: connected to each other")

    // RTP as liveness: no control traffic from b, but heard() keeps a connected.
    var s = S(configuration: .init(id: "01", rtpPort: 5006, codec: "opus"))
    let peer = S.Peer(id: "02", instance: "B", control: .init(host: "10.77.0.2", port: 40002))
    _ = s.handle(.received(.invite(id: "02", rtpPort: 5008, codec: "OPUS"), from: peer.control), now: .zero)
    check(s.connectedPeer != nil, "accepts a codec with other case")
    var t = Duration.zero
    var dropped = false
    while t < .seconds(6) {
        t += .milliseconds(100)
        _ = s.handle(.heard(host: "10.77.0.2"), now: t)
        if s.handle(.tick, now: t).contains(where: { isDisconnected($0) }) { dropped = true }
    }
    check(!dropped, "RTP arrival keeps the session")
    // A third peer is busy-rejected; the same host with a new id is a restart.
    var out = s.handle(.received(.invite(id: "03", rtpPort: 5010, codec: "opus"), from: .init(host: "10.77.0.3", port: 40003)), now: t)
    check(out == [.send(.reject(id: "01", reason: "busy"), to: .init(host: "10.77.0.3", port: 40003))], "busy")
    out = s.handle(.received(.invite(id: "04", rtpPort: 5008, codec: "opus"), from: .init(host: "10.77.0.2", port: 40100)), now: t)
    check(out.contains { isDisconnected($0, "peer restarted") } && out.contains(where: isConnected) && s.connectedPeer?.id == "04",
          "restart on the same host replaces the session")
    // bye: disconnected, and no invite to it until found again.
    out = s.handle(.received(.bye(id: "04"), from: .init(host: "10.77.0.2", port: 40100)), now: t)
    check(out.contains { isDisconnected($0, "bye") } && s.phase == .idle, "bye")
    // stop sends bye.
    _ = s.handle(.received(.invite(id: "05", rtpPort: 5008, codec: "opus"), from: .init(host: "10.77.0.2", port: 40100)), now: t)
    out = s.handle(.stop, now: t)
    check(out.first == .send(.bye(id: "01"), to: .init(host: "10.77.0.2", port: 40100)) && out.contains { isDisconnected($0, "stopped") }, "stop")
    check(s.handle(.tick, now: t + .seconds(10)).isEmpty, "nothing after stop")

    // Codec mismatch: b rejects; a reports it and holds off for the backoff.
    p = Pair(aID: "00000000000000aa", bID: "00000000000000bb", codecB: "pcmu")
    p.feed("a", .found(p.bPeer)); p.feed("b", .found(p.aPeer))
    p.run(for: .seconds(3))
    check(p.count("a", { if case .rejected(_, let r) = $0 { return r.hasPrefix("codec mismatch") }; return false }) >= 1, "codec mismatch rejected")
    check(p.count("a", isConnected) == 0 && p.count("b", isConnected) == 0, "no session on a codec mismatch")

    // Messages.
    let m = IntercomMessage.invite(id: "3f2a", rtpPort: 5006, codec: "opus")
    check(String(decoding: m.encoded(), as: UTF8.self) == #"{"codec":"opus","id":"3f2a","rtp_port":5006,"type":"invite"}"#, "invite JSON")
    check(IntercomMessage.decode(m.encoded()) == m, "message round trip")
    check(IntercomMessage.decode(Array(#"{"type":"invite","id":"x","rtp_port":0,"codec":"opus"}"#.utf8)) == nil, "invite with port 0 refused")
    check(IntercomMessage.decode(Array(#"{"type":"hello","id":"x"}"#.utf8)) == nil, "unknown type refused")
    check(IntercomMessage.decode(Array("\u{1}garbage".utf8)) == nil, "garbage refused")
    check(IntercomMessage.decode(Array(#"{"type":"accept","id":"9c","rtp_port":5008,"extra":1}"#.utf8)) == .accept(id: "9c", rtpPort: 5008), "extra keys ignored")
}

@main
struct SelfTest {
    static func main() {
        dnsTests()
        sessionTests()
        print(failures == 0 ? "selftest: all passed" : "selftest: \(failures) failed")
        exit(failures == 0 ? 0 : 1)
    }
}
