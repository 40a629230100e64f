import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// Interoperability with GStreamer's RTP/Opus elements, both ways.
@Suite("RTPGStreamer", .enabled(if: haveTool("gst-launch-1.0")))
struct RTPGStreamerTests {
    @Test func receivesFromGStreamer() async throws {
        let signal = RTPTest.chirp(seconds: 3)
        let input = try RTPTest.wav(signal)
        let output = temporaryPath("from-gst.wav")
        let yaml = """
        version: 1
        name: from-gst
        nodes:
          rx:  { type: rtp-receive, port: 0, bind: 127.0.0.1, stats_interval_ms: 0 }
          jb:  { type: jitter-buffer, min_ms: 40, max_ms: 200, stats_interval_ms: 0 }
          dec: { type: opus-decode, rate: 48000 }
          out: { type: wav-sink, path: "\(output)" }
        links:
          - rx -> jb -> dec -> out
        """
        let pipeline = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
        let port = RTPTestBox<Int>()
        let run = Task { try await RTPTest.run(pipeline, seconds: 30) { e in
            if e.name == "rtp_listening", let p = e["port"]?.intValue { port.set(Int(p)) }
        } }
        let p = try #require(await port.wait())
        let gst = try RTPTestProcess.start("gst-launch-1.0", [
            "-q", "filesrc", "location=\(input)", "!", "wavparse", "!", "audioconvert", "!", "audioresample", "!",
            "opusenc", "bitrate=48000", "!", "rtpopuspay", "pt=96", "!", "udpsink", "host=127.0.0.1", "port=\(p)", "sync=true",
        ])
        let result = await gst.wait()
        #expect(result.status == 0, "gst-launch: \(result.error)")
        try await Task.sleep(for: .milliseconds(500))
        pipeline.stop()
        let events = try await run.value
        let stats = try #require(RTPTest.last(events, "rtp_stats", node: "rx"))
        #expect(stats.rtpInt("received") >= 145)
        #expect(stats.rtpInt("lost") == 0)
        let (format, samples) = try readWAV(output)
        #expect(format.sampleRate == 48000)
        let m = RTPTest.match(sent: signal, received: samples)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient) at \(m.lagS) s")
    }

    @Test func sendsToGStreamer() async throws {
        let signal = RTPTest.chirp(seconds: 3)
        let input = try RTPTest.wav(signal)
        let output = temporaryPath("to-gst.raw")
        let port = try RTPTest.freePort()
        // Raw PCM, written unbuffered: the test process may hold SIGINT blocked (children inherit the
        // mask), so gst-launch is ended with SIGKILL and there is no header to finalize.
        let gst = try RTPTestProcess.start("gst-launch-1.0", [
            "-q", "udpsrc", "address=127.0.0.1", "port=\(port)",
            "caps=application/x-rtp,media=audio,encoding-name=OPUS,clock-rate=48000,payload=96", "!",
            "rtpjitterbuffer", "latency=100", "!", "rtpopusdepay", "!", "opusdec", "!", "audioconvert", "!", "audioresample", "!",
            "audio/x-raw,format=S16LE,rate=48000,channels=1", "!", "filesink", "buffer-mode=unbuffered", "location=\(output)",
        ])
        // Give gst-launch time to bind; packets sent before that are lost, which the windows below skip.
        try await Task.sleep(for: .milliseconds(700))
        let yaml = """
        version: 1
        name: to-gst
        nodes:
          src: { type: file-source, path: "\(input)", realtime: true, frame_ms: 20 }
          enc: { type: opus-encode, bitrate: 48000, application: audio }
          tx:  { type: rtp-send, host: 127.0.0.1, port: \(port) }
        links:
          - src -> enc -> tx
        """
        _ = try await runGraph(yaml)
        try await Task.sleep(for: .milliseconds(500))
        gst.kill()
        _ = await gst.wait()
        let raw = try Data(contentsOf: URL(fileURLWithPath: output))
        let samples = raw.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        #expect(samples.count > 48000 * 2)
        let m = RTPTest.match(sent: signal, received: samples)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient) at \(m.lagS) s")
    }
}
