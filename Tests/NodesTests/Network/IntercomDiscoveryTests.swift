import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

private let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()
private let binary = packageRoot.appendingPathComponent(".build/debug/voicepipe").path
private let netns = packageRoot.appendingPathComponent("scripts/netns-pair.sh").path

/// Root, `ip` and a built binary: network namespaces can be made here.
private let netnsAvailable = getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/sbin/ip")
    && FileManager.default.isExecutableFile(atPath: binary)

/// Two hosts stood in for by two network namespaces joined by a veth pair: `voicepipe run
/// pipelines/intercom.yaml` on each with no address configured must find the other (DNS-SD), call, carry
/// audio both ways, notice the other going away and call again when it returns.
@Suite("Intercom discovery", .serialized, .enabled(if: netnsAvailable), .timeLimit(.minutes(2)))
struct IntercomDiscoveryTests {
    static let (nsA, nsB) = ("vpt-a", "vpt-b")
    static let environment = ["NS_A": nsA, "NS_B": nsB, "ADDR_A": "10.78.0.1/24", "ADDR_B": "10.78.0.2/24",
                              "ADDR6_A": "fd78::1/64", "ADDR6_B": "fd78::2/64"]

    static func network(_ command: String) throws {
        let r = try shell("/usr/bin/env", environment.map { "\($0.key)=\($0.value)" } + ["bash", netns, command])
        guard r.status == 0 else { throw NodeError("netns", "netns-pair.sh \(command): \(r.error)") }
    }

    static func peer(_ ns: String, says: String, hears: String) throws -> RTPTestProcess {
        try RTPTestProcess.start("/usr/sbin/ip", [
            "netns", "exec", ns, binary, "run", packageRoot.appendingPathComponent("pipelines/intercom.yaml").path, "--quiet", "--log-level", "info",
            "--set", "mic.type=file-source", "--set", "mic.path=\(says)", "--set", "mic.realtime=true",
            "--set", "spk.type=wav-sink", "--set", "spk.path=\(hears)", "--set", "tx.name=peer in \(ns)",
        ], environment: ["PEER": ""])
    }

    @Test("two peers with no address find each other and talk both ways; one restarted, the call resumes")
    func findTalkAndRejoin() async throws {
        try Self.network("up")
        defer { try? Self.network("down") }
        let saysA = RTPTest.chirp(seconds: 14, from: 200, to: 1800)
        let saysB = RTPTest.chirp(seconds: 6, from: 1700, to: 250)
        let inA = try RTPTest.wav(saysA, name: "disc-a.wav"), inB = try RTPTest.wav(saysB, name: "disc-b.wav")
        let hearsA = temporaryPath("disc-a-hears.wav"), hearsB = temporaryPath("disc-b-hears.wav"), hearsB2 = temporaryPath("disc-b2-hears.wav")

        let a = try Self.peer(Self.nsA, says: inA, hears: hearsA)
        let b = try Self.peer(Self.nsB, says: inB, hears: hearsB)
        // B talks for 6 s, then is killed outright (no goodbye): A must notice from the silence.
        try await Task.sleep(for: .milliseconds(6500))
        b.kill()
        let rb = await b.wait()
        try await Task.sleep(for: .milliseconds(4000))
        // B comes back (a new process, as after a reboot) and the call resumes.
        let b2 = try Self.peer(Self.nsB, says: inB, hears: hearsB2)
        try await Task.sleep(for: .milliseconds(4500))
        a.interrupt(); b2.interrupt()
        let ra = await a.wait(), rb2 = await b2.wait()
        #expect(ra.status == 0, "A: \(ra.error.suffix(2000))")
        #expect(rb2.status == 0, "B again: \(rb2.error.suffix(2000))")
        _ = rb

        // A's log: connected, disconnected (the kill, within a few seconds), connected again.
        let log = ra.error
        // (A peer that invites before its advertisement is resolved is named by its id.)
        let connects = log.components(separatedBy: "connected to '").count - 1
        #expect(connects == 2, "A connected \(connects) times:\n\(log.suffix(3000))")
        #expect(log.contains("disconnected (timeout)"), "\(log.suffix(3000))")

        // Audio both ways during the first call, and A to the returned B.
        let (_, heardByA) = try readWAV(hearsA)
        let (_, heardByB) = try readWAV(hearsB)
        let (_, heardByB2) = try readWAV(hearsB2)
        // What each heard of the other, wherever in the call it fell: the audio a peer sends before the call
        // is set up is not carried (as on any intercom), and how long discovery takes depends on the machine,
        // so the half seconds that have sound in them must be the other's chirp (median over 0.75; noise scores
        // near 0), and at least 3 s of it must arrive.
        let ba = RTPTest.heard(sent: saysB, received: heardByA)
        let ab = RTPTest.heard(sent: saysA, received: heardByB)
        func summary(_ s: [Double]) -> String { s.map { String(format: "%.2f", $0) }.joined(separator: " ") }
        let connectLines = log.split(separator: "\n").filter { $0.contains("connected") }.joined(separator: "\n")
        print("A hears B: [\(summary(ba))]; B hears A: [\(summary(ab))]")
        #expect(ba.count >= 6 && ba.sorted()[ba.count / 2] > 0.75, "A hears B: [\(summary(ba))]\n\(connectLines)")
        #expect(ab.count >= 6 && ab.sorted()[ab.count / 2] > 0.75, "B hears A: [\(summary(ab))]\n\(connectLines)")
        // The returned B hears the end of A's chirp: half a second of its recording, 1.5 s in, is found in
        // A's signal after 9 s (both at 8 kHz).
        #expect(heardByB2.count > 48000 * 2, "B again heard \(heardByB2.count) samples")
        if heardByB2.count > 48000 * 2 {
            let searched = RTPTest.decimate(Array(saysA[(48000 * 9)...]), by: 6)
            var scores: [Double] = []
            var start = 24000
            while start + 24000 <= heardByB2.count {
                let window = RTPTest.decimate(Array(heardByB2[start..<start + 24000]), by: 6)
                scores.append(Signal.bestCorrelation(window, searched, maxLag: searched.count - window.count + 1).coefficient)
                start += 24000
            }
            let median = scores.sorted()[scores.count / 2]
            #expect(median > 0.8, "B again hears A: \(scores)")
        }
    }
}
