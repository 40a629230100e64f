import Foundation
import Testing
import PipelineCore
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// Mouth-to-ear latency on loopback, for bench/intercom-latency.sh (off unless VOICEPIPE_BENCH=1;
/// it prints figures and asserts nothing about speed).
@Suite("IntercomBench", .enabled(if: ProcessInfo.processInfo.environment["VOICEPIPE_BENCH"] == "1"))
struct IntercomBenchTests {
    /// Clicks every 500 ms into file-source (1x) → opus-encode → rtp-send → relay → rtp-receive →
    /// jitter-buffer → opus-decode; the wall time a click's frame leaves the source and the wall time
    /// its decoded frame reaches the sink give the added latency.
    /// Variants: Opus at 0 and ±40 ms of jitter, then AAC and the echo canceller (in the microphone path,
    /// fed with what is played) at 0 jitter.
    @Test(arguments: [("opus", false, 0), ("opus", false, 40), ("aac", false, 0), ("opus", true, 0), ("aac", true, 0)])
    func clickLatency(codec: String, aec: Bool, jitterMs: Int) async throws {
        let rate = 48000
        var signal = [Int16](repeating: 0, count: rate * 8)
        var clicks: [Int] = []
        var at = rate + 4321
        while at + 480 < signal.count - rate / 2 {
            for i in 0..<96 { signal[at + i] = Int16(20000 * sin(2 * .pi * 2000 * Double(i) / Double(rate))) }
            clicks.append(at)
            at += rate / 2
        }
        let input = try RTPTest.wav(signal)
        let relay = try UDPRelay(impairment: RTPImpairment(jitterMs: jitterMs, seed: 5))
        let sent = RTPFrameLog(), heard = RTPFrameLog()
        var registry = RTPTapNode.registry(sent)
        registry.register(RTPTapNode.descriptor(type: "rtp-test-tap-2", heard))
        let minMs = ProcessInfo.processInfo.environment["JB_MIN_MS"] ?? "20"
        let yaml = """
        version: 1
        name: bench
        nodes:
          src:  { type: file-source, path: "\(input)", realtime: true, frame_ms: 20 }
          sent: { type: rtp-test-tap }
          enc:  { type: \(codec == "aac" ? "aac-encode, bitrate: 64000" : "opus-encode, bitrate: 32000") }
        \(aec ? "  aec:  { type: aec, engine: webrtc, reference: arrival, stats_interval_ms: 0 }" : "")
          tx:   { type: rtp-send, host: 127.0.0.1, port: \(relay.port) }
          rx:   { type: rtp-receive, codec: \(codec), port: 0, bind: 127.0.0.1, stats_interval_ms: 0 }
          jb:   { type: jitter-buffer, min_ms: \(minMs), max_ms: 200, stats_interval_ms: 0 }
          dec:  { type: \(codec)-decode, rate: 48000 }
          heard: { type: rtp-test-tap-2 }
        links:
        \(aec ? "  - src -> aec.in\n  - aec -> enc -> tx\n  - dec -> aec.ref" : "  - src -> enc -> tx")
          - src -> sent
          - rx -> jb -> dec -> heard
        """
        let pipeline = try Pipeline(yaml: yaml, registry: registry)
        let events = try await RTPTest.run(pipeline, seconds: 8.8) { e in
            if e.name == "rtp_listening", let p = e["port"]?.intValue { relay.setTarget(Int(p)) }
        }
        _ = relay.stop()
        // Wall time of each click's first sample, at the source (frame end - 20 ms + offset) and at the sink.
        func onsets(_ log: RTPFrameLog, deliveredWhenComplete: Bool) -> [ContinuousClock.Instant] {
            var out: [ContinuousClock.Instant] = []
            var quietUntil = -1
            var position = 0
            for entry in log.entries {
                let (frame, t) = (entry.frame, entry.arrival)
                guard let a = frame.audio else { continue }
                // A captured frame leaves the source when complete; a sink starts playing a frame when it gets it.
                let frameStart = deliveredWhenComplete ? t - .milliseconds(20) : t
                for (i, s) in a.samples.enumerated() where abs(Int(s)) > 6000 && position + i > quietUntil {
                    out.append(frameStart + .microseconds(i * 1_000_000 / rate))
                    quietUntil = position + i + rate / 4
                    break
                }
                position += a.samples.count
            }
            return out
        }
        let s = onsets(sent, deliveredWhenComplete: true), h = onsets(heard, deliveredWhenComplete: false)
        let n = min(s.count, h.count)
        let latencies = (0..<n).map { Double((h[$0] - s[$0]).components.attoseconds) / 1e15 + Double((h[$0] - s[$0]).components.seconds) * 1000 }.sorted()
        let jb = RTPTest.last(events, "jitter_stats", node: "jb")
        print("BENCH intercom codec=\(codec) aec=\(aec ? "webrtc" : "off") jitter=±\(jitterMs)ms min_ms=\(minMs) clicks=\(n)/\(clicks.count) latency_ms median=\(latencies.isEmpty ? -1 : latencies[n / 2]) min=\(latencies.first ?? -1) max=\(latencies.last ?? -1) target_ms=\(jb?.rtpInt("target_ms") ?? -1) concealed=\(jb?.rtpInt("concealed") ?? -1) late=\(jb?.rtpInt("late") ?? -1)")
        #expect(n > 0)
    }
}
