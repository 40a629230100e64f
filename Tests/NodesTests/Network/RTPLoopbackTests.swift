import Foundation
import Testing
import PipelineCore
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// Sends a chirp through opus-encode → rtp-send → (impairing relay) → rtp-receive → jitter-buffer
/// → opus-decode → wav-sink in one graph, and checks audio, timeline and counters.
struct RTPLeg {
    var sent: [Int16]
    var received: [Int16]
    var events: [Event]
    var relay: RTPRelayReport
    var buffered: [Frame]
    /// Longest time between two frames leaving the jitter buffer, ms (20 when its clock keeps time):
    /// a stall of the receiving graph on a loaded machine.
    var longestOutputGapMs: Double

    var rtpStats: Event? { RTPTest.last(events, "rtp_stats", node: "rx") }
    var jitterStats: Event? { RTPTest.last(events, "jitter_stats", node: "jb") }

    /// Frames a stall of the sender or of the receiving graph (a loaded machine pausing a thread) may
    /// cost: it is not loss or jitter the buffer was asked to absorb. Each 20 ms of stall beyond 40 ms
    /// may make one packet late.
    var stallFrames: Int { max(0, Int((max(relay.longestIngressGapMs, longestOutputGapMs) - 40) / 20)) }

    /// What the machine did, for failure messages.
    var stallDetail: String {
        "longest gap from the sender \(Int(relay.longestIngressGapMs)) ms, out of the jitter buffer \(Int(longestOutputGapMs)) ms"
    }

    /// Longest run of lost-frame markers at the jitter buffer's output, skipping the first `skip` frames.
    func longestConcealRun(skip: Int = 0) -> Int {
        var best = 0, run = 0
        // After the sender stops the buffer conceals until shutdown: that tail is not a gap.
        let end = (buffered.lastIndex { $0.encoded?.payload.isEmpty == false } ?? -1) + 1
        for f in buffered[..<end].dropFirst(skip) {
            if f.encoded?.payload.isEmpty == true { run += 1; best = max(best, run) } else { run = 0 }
        }
        return best
    }

    static func run(_ impairment: RTPImpairment, seconds: Double = 3, minMs: Int = 40) async throws -> RTPLeg {
        let signal = RTPTest.chirp(seconds: seconds)
        let input = try RTPTest.wav(signal)
        let output = temporaryPath("out.wav")
        let relay = try UDPRelay(impairment: impairment)
        let log = RTPFrameLog()
        let yaml = """
        version: 1
        name: rtp-leg
        nodes:
          src: { type: file-source, path: "\(input)", realtime: true, frame_ms: 20 }
          enc: { type: opus-encode, bitrate: 48000, application: audio }
          tx:  { type: rtp-send, host: 127.0.0.1, port: \(relay.port) }
          rx:  { type: rtp-receive, port: 0, bind: 127.0.0.1, stats_interval_ms: 0 }
          jb:  { type: jitter-buffer, min_ms: \(minMs), max_ms: 200, stats_interval_ms: 0 }
          dec: { type: opus-decode, rate: 48000 }
          tap: { type: rtp-test-tap }
          out: { type: wav-sink, path: "\(output)" }
        links:
          - src -> enc -> tx
          - rx -> jb -> dec -> out
          - jb -> tap
        """
        let pipeline = try Pipeline(yaml: yaml, registry: RTPTapNode.registry(log))
        // Stop the relay first, so that everything it forwarded reached the receiver; then the graph.
        let reportBox = RTPTestBox<RTPRelayReport>()
        let stopper = Task {
            try await Task.sleep(for: .milliseconds(Int(seconds * 1000) + 600))
            reportBox.set(relay.stop())
            try await Task.sleep(for: .milliseconds(200))
            pipeline.stop()
        }
        let events = try await RTPTest.run(pipeline, seconds: seconds + 30) { e in
            if e.name == "rtp_listening", let p = e["port"]?.intValue { relay.setTarget(Int(p)) }
        }
        try await stopper.value
        let report = try #require(reportBox.current)
        let (_, samples) = try readWAV(output)
        let played = log.entries.filter { $0.frame.encoded != nil }.map(\.arrival)
        let gaps = zip(played, played.dropFirst()).map { ($1 - $0) / .milliseconds(1) }
        return RTPLeg(sent: signal, received: samples, events: events, relay: report,
                      buffered: log.frames.filter { $0.encoded != nil }, longestOutputGapMs: gaps.max() ?? 0)
    }
}

@Suite("RTPLoopback")
struct RTPLoopbackTests {
    @Test func cleanPathCarriesAudioWithoutLoss() async throws {
        let leg = try await RTPLeg.run(RTPImpairment())
        let stats = try #require(leg.rtpStats)
        #expect(stats.rtpInt("lost") == 0 && stats.rtpInt("duplicated") == 0 && stats.rtpInt("reordered") == 0)
        #expect(stats.rtpInt("received") == Int64(leg.relay.forwarded.count))
        #expect(stats.rtpInt("received") >= 145)   // 3 s of 20 ms packets (the last partial one may be padded)
        let m = RTPTest.match(sent: leg.sent, received: leg.received)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient) at \(m.lagS) s")
        // One frame per 20 ms on the output timeline.
        #expect(zip(leg.buffered, leg.buffered.dropFirst()).allSatisfy { $1.pts - $0.pts == 20_000_000 })
    }

    @Test(arguments: [0.05, 0.20])
    func lossIsCountedAndConcealed(loss: Double) async throws {
        let leg = try await RTPLeg.run(RTPImpairment(loss: loss, seed: loss == 0.05 ? 11 : 12))
        let stats = try #require(leg.rtpStats)
        let expected = leg.relay.expected
        #expect(leg.relay.dropped.count > Int(loss * 100))          // the seed really did drop packets
        #expect(stats.rtpInt("lost") == expected.lost)
        #expect(stats.rtpInt("received") == expected.received)
        #expect(stats.rtpInt("duplicated") == 0 && stats.rtpInt("reordered") == 0)
        // Every lost packet became one lost-frame marker, and no gap is longer than what was lost + 1 frame.
        let jb = try #require(leg.jitterStats)
        #expect(jb.rtpInt("concealed") >= expected.lost)
        // (plus a late frame and its stretch per 20 ms the machine stalled a thread beyond 40 ms).
        #expect(leg.longestConcealRun() <= leg.relay.longestDropRun + 1 + 2 * leg.stallFrames,
                "conceal run \(leg.longestConcealRun()) vs drop run \(leg.relay.longestDropRun); \(leg.stallDetail)")
        #expect(zip(leg.buffered, leg.buffered.dropFirst()).allSatisfy { $1.pts - $0.pts == 20_000_000 })
        // Audio keeps flowing: as long as what was sent, and still like it.
        #expect(leg.received.count >= leg.sent.count - 48000 / 10)
        let m = RTPTest.match(sent: leg.sent, received: leg.received)
        #expect(m.coefficient > (loss < 0.1 ? 0.7 : 0.4), "correlation \(m.coefficient)")
    }

    @Test func jitterOf40msIsAbsorbed() async throws {
        let leg = try await RTPLeg.run(RTPImpairment(jitterMs: 40, seed: 21), seconds: 4)
        let stats = try #require(leg.rtpStats)
        let expected = leg.relay.expected
        #expect(stats.rtpInt("lost") == 0)
        #expect(stats.rtpInt("reordered") == expected.reordered)
        #expect(expected.reordered > 10)                           // ±40 ms on 20 ms packets reorders a lot
        let jb = try #require(leg.jitterStats)
        #expect(jb.rtpInt("target_ms") > 60, "target \(jb.rtpInt("target_ms")) ms")
        // After the first second of adaptation, misses (late packets, and one stretch frame per
        // step up of the delay) stay short and rare; a thread stall of the machine may add a late
        // frame and its stretch per 20 ms beyond 40 ms.
        let end = (leg.buffered.lastIndex { $0.encoded?.payload.isEmpty == false } ?? 0) + 1
        let misses = leg.buffered[50..<end].indices.filter { leg.buffered[$0].encoded?.payload.isEmpty == true }
        let allowance = 2 * leg.stallFrames
        let detail = "missing at \(misses) of \(end); \(leg.stallDetail)"
        print("jitter leg: \(detail), target \(jb.rtpInt("target_ms")) ms, late \(jb.rtpInt("late"))")
        #expect(leg.longestConcealRun(skip: 50) <= 4 + allowance, "\(detail)")
        #expect(misses.count * 20 < end - 50 + allowance * 20, "\(detail)")
        #expect(jb.rtpInt("late") < 20, "late \(jb.rtpInt("late"))")
        #expect(zip(leg.buffered, leg.buffered.dropFirst()).allSatisfy { $1.pts - $0.pts == 20_000_000 })
        let m = RTPTest.match(sent: leg.sent, received: leg.received)
        #expect(m.coefficient > 0.7, "correlation \(m.coefficient)")
    }

    @Test func reorderingAndDuplicationAreCountedAndUndone() async throws {
        let leg = try await RTPLeg.run(RTPImpairment(reorder: 0.1, duplicate: 0.1, seed: 31), minMs: 60)
        let stats = try #require(leg.rtpStats)
        let expected = leg.relay.expected
        #expect(expected.duplicated > 5 && expected.reordered > 5)
        #expect(stats.rtpInt("duplicated") == expected.duplicated)
        #expect(stats.rtpInt("reordered") == expected.reordered)
        #expect(stats.rtpInt("lost") == 0)
        let jb = try #require(leg.jitterStats)
        // No frame is missed (60 ms of delay covers the 30 ms hold), unless a thread of the machine stalled.
        #expect(jb.rtpInt("late") <= Int64(leg.stallFrames), "late \(jb.rtpInt("late")); \(leg.stallDetail)")
        #expect(leg.longestConcealRun(skip: 5) <= 2 * leg.stallFrames, "\(leg.stallDetail)")
        let m = RTPTest.match(sent: leg.sent, received: leg.received)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient)")
    }
}

@Suite("RTPIPv6")
struct RTPIPv6Tests {
    /// rtp-receive bound to `::` (dual stack) hears rtp-send aimed at `::1`.
    @Test func sendsAndReceivesOverIPv6() async throws {
        let signal = RTPTest.chirp(seconds: 2.5)
        let input = try RTPTest.wav(signal)
        let output = temporaryPath("v6.wav")
        let receiver = try Pipeline(yaml: """
        version: 1
        name: v6-rx
        nodes:
          rx:  { type: rtp-receive, port: 0, bind: "::", stats_interval_ms: 0 }
          jb:  { type: jitter-buffer, min_ms: 40, stats_interval_ms: 0 }
          dec: { type: opus-decode }
          out: { type: wav-sink, path: "\(output)" }
        links:
          - rx -> jb -> dec -> out
        """, registry: BuiltinNodes.registry())
        let port = RTPTestBox<Int>()
        let run = Task { try await RTPTest.run(receiver, seconds: 30) { e in
            if e.name == "rtp_listening", let p = e["port"]?.intValue { port.set(Int(p)) }
        } }
        let p = try #require(await port.wait())
        _ = try await runGraph("""
        version: 1
        name: v6-tx
        nodes:
          src: { type: file-source, path: "\(input)", realtime: true }
          enc: { type: opus-encode, bitrate: 48000, application: audio }
          tx:  { type: rtp-send, host: "::1", port: \(p) }
        links:
          - src -> enc -> tx
        """)
        try await Task.sleep(for: .milliseconds(400))
        receiver.stop()
        let events = try await run.value
        let stats = try #require(RTPTest.last(events, "rtp_stats", node: "rx"))
        #expect(stats.rtpInt("received") >= 120 && stats.rtpInt("lost") == 0)
        let (_, samples) = try readWAV(output)
        let m = RTPTest.match(sent: signal, received: samples)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient)")
    }
}
