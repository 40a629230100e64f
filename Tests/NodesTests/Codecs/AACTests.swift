import Foundation
import Testing
import PipelineCore
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// Test signals for the AAC suites: a chirp, and flite speech at 48 kHz.
enum AACTest {
    static func signal(_ kind: String) throws -> [Int16] {
        switch kind {
        case "speech":
            let wav16 = try Speech.wav(["the kitchen light is on", "open the garage door please"], voice: "slt", leadS: 1.0, gapS: 0.3)
            let out = temporaryPath("speech48.wav")
            let r = try shell("sox", [wav16, "-r", "48000", "-c", "1", "-b", "16", out])
            guard r.status == 0 else { throw NodeError("sox", r.error) }
            return try readWAV(out).samples
        default:
            return RTPTest.chirp(seconds: 3)
        }
    }
}

@Suite("AAC codec")
struct AACCodecTests {
    @Test("encode then decode keeps the waveform (48 kHz mono, 44.1 kHz stereo); nothing is lost at the end",
          arguments: [(48000, 1), (44100, 2)])
    func roundTrip(rate: Int, channels: Int) throws {
        let format = AudioFormat(sampleRate: rate, channels: channels)
        let mono = RTPTest.chirp(rate: rate, seconds: 2)
        let input = mono.flatMap { s in Array(repeating: s, count: channels) }
        let encoder = try AACEncoderHandle(format: format, bitrate: 64000 * channels)
        #expect(encoder.frameSamples == 1024)
        var packets: [[UInt8]] = []
        let padded = input + Array(repeating: 0, count: (1024 * channels - input.count % (1024 * channels)) % (1024 * channels))
        try padded.withUnsafeBufferPointer { p in
            var offset = 0
            while offset < p.count {
                packets += try encoder.encode(p, offset: offset)
                offset += 1024 * channels
            }
        }
        packets += try encoder.encode(nil)
        // One access unit per 1,024 input samples, plus the encoder's priming.
        #expect(packets.count == padded.count / channels / 1024 + encoder.delay / 1024)
        let bytes = packets.reduce(0) { $0 + $1.count }
        let bitrate = Double(bytes * 8) / (Double(mono.count) / Double(rate))
        #expect(bitrate > 40_000 * Double(channels) && bitrate < 90_000 * Double(channels), "bitrate \(bitrate)")
        let decoder = try AACDecoderHandle(format: format)
        var decoded: [Int16] = []
        for p in packets { decoded += try decoder.decode(p) }
        #expect(decoded.count / channels >= mono.count + encoder.delay)
        let left = stride(from: 0, to: decoded.count, by: channels).map { decoded[$0] }
        let aligned = Array(left.dropFirst(encoder.delay).prefix(mono.count))
        let r = Signal.bestCorrelation(Array(mono[rate / 2..<rate]), Array(aligned[(rate / 2 - 200)..<(rate + 200)]), maxLag: 401)
        #expect(r.coefficient > 0.95, "correlation \(r.coefficient) at lag \(r.lag - 200)")
    }

    @Test("a rate AAC-LC does not take is refused with the fix named")
    func unsupportedRate() {
        #expect(throws: NodeError.self) { try AACEncoderHandle(format: AudioFormat(sampleRate: 8000, channels: 1), bitrate: 64000) }
        #expect(AACRates.problem(AudioFormat(sampleRate: 8000, channels: 1), node: "aac-encode")?.contains("resample") == true)
        #expect(AACRates.audioSpecificConfig(AudioFormat(sampleRate: 48000, channels: 1)) == [0x11, 0x88])
        #expect(AACRates.audioSpecificConfig(AudioFormat(sampleRate: 44100, channels: 2)) == [0x12, 0x10])
    }

    @Test("graph: aac-encode -> aac-decode keeps every sample and the marks ride along")
    func graphRoundTrip() async throws {
        let input = try RTPTest.wav(RTPTest.chirp(seconds: 1.5))
        let output = temporaryPath("aac-out.wav")
        _ = try await runGraph("""
            version: 1
            nodes:
              src: { type: file-source, path: "\(input)" }
              enc: { type: aac-encode }
              dec: { type: aac-decode, rate: 48000, channels: 1 }
              out: { type: wav-sink, path: "\(output)" }
            links: [ "src -> enc -> dec -> out" ]
            """)
        let (format, samples) = try readWAV(output)
        #expect(format == AudioFormat(sampleRate: 48000, channels: 1))
        // 72,000 input samples padded to whole frames, plus one priming frame.
        let expected: Int = 71 * 1024 + 1024
        #expect(samples.count == expected)
    }

    @Test("a lost packet is concealed for its own length; a garbage packet is reported once and concealed")
    func concealment() async throws {
        let harness = try NodeHarness(AACDecodeNode.descriptor, parameters: ["rate": 48000, "channels": 1])
        let format = AudioFormat(sampleRate: 48000, channels: 1)
        let encoder = try AACEncoderHandle(format: format, bitrate: 64000)
        let tone = RTPTest.chirp(rate: 48000, seconds: 0.5)
        var packets: [[UInt8]] = []
        try tone.withUnsafeBufferPointer { p in
            var o = 0
            while o + 1024 <= p.count { packets += try encoder.encode(p, offset: o); o += 1024 }
        }
        let d = MediaTime.nanos(samples: 1024, rate: 48000)
        var frames: [Frame] = []
        for (i, p) in packets.enumerated() {
            let payload: [UInt8] = i == 5 ? [] : (i == 9 ? [0xFF, 0xFF, 0x00, 0x13] : p)
            frames.append(Frame(payload: .encoded(EncodedBuffer(codec: "aac", payload: payload, durationNanos: d, format: format)), pts: Int64(i) * d))
        }
        harness.send(frames)
        try await harness.run()
        let out = harness.output().frames.compactMap(\.audio)
        // The decoder's own priming shortens the first output; every packet after it gives 1,024 samples.
        let total = out.reduce(0) { $0 + $1.samples.count }
        #expect(total >= (packets.count - 1) * 1024 && total <= packets.count * 1024, "\(total) samples for \(packets.count) packets")
        let stats = harness.pipeline.nodeStats.first { $0.id == NodeHarness.nodeID }
        let concealed: UInt64 = stats?.counters["concealed"] ?? 0
        let errors: UInt64 = stats?.counters["decode_errors"] ?? 0
        #expect(concealed == 2)
        #expect(errors == 1)
        #expect(harness.events(named: "error").count == 1)
    }
}

@Suite("RFC 3640 payload")
struct RTPMPEG4PayloadTests {
    @Test("one access unit: 16-bit AU-headers-length, 13-bit size, marker set")
    func single() throws {
        let unit = (0..<300).map { UInt8($0 & 0xFF) }
        let packets = RTPMPEG4Payload.packetize(unit)
        #expect(packets.count == 1)
        #expect(packets[0].marker)
        #expect(Array(packets[0].payload.prefix(4)) == [0x00, 0x10, UInt8(300 >> 5), UInt8((300 & 31) << 3)])
        var d = RTPMPEG4Payload.Depacketizer()
        #expect(try d.units(in: packets[0].payload, marker: true, timestamp: 7) == [unit])
    }

    @Test("a large access unit is fragmented and reassembled; a lost fragment drops only that unit")
    func fragments() throws {
        let unit = (0..<3000).map { UInt8(($0 * 7) & 0xFF) }
        let packets = RTPMPEG4Payload.packetize(unit)
        #expect(packets.count == 3)
        #expect(packets.map(\.marker) == [false, false, true])
        var d = RTPMPEG4Payload.Depacketizer()
        #expect(try d.units(in: packets[0].payload, marker: false, timestamp: 1).isEmpty)
        #expect(try d.units(in: packets[1].payload, marker: false, timestamp: 1).isEmpty)
        #expect(try d.units(in: packets[2].payload, marker: true, timestamp: 1) == [unit])
        // First fragment lost, then a new unit: the orphan fragments never complete anything.
        var e = RTPMPEG4Payload.Depacketizer()
        #expect(throws: RTPMPEG4Payload.Problem.self) { _ = try e.units(in: packets[1].payload, marker: false, timestamp: 1); _ = try e.units(in: packets[2].payload, marker: true, timestamp: 1) }
        let next = RTPMPEG4Payload.packetize([1, 2, 3])[0]
        #expect(try e.units(in: next.payload, marker: true, timestamp: 2) == [[1, 2, 3]])
    }

    @Test("several access units in one packet (as other senders may group them)")
    func grouped() throws {
        let payload: [UInt8] = [0x00, 0x20, 0x00, 0x18, 0x00, 0x10, 1, 2, 3, 4, 5]
        var d = RTPMPEG4Payload.Depacketizer()
        #expect(try d.units(in: payload, marker: true, timestamp: 0) == [[1, 2, 3], [4, 5]])
    }

    @Test("malformed headers are refused, never trap", arguments: [
        [UInt8](), [0x00], [0x00, 0x00], [0x00, 0x0F, 0, 0], [0x00, 0x10, 0x00], [0x00, 0x30, 0x00, 0x08, 0x00, 0x08, 1],
        [0x00, 0x20, 0x00, 0x18, 0x00, 0x18, 1, 2, 3],
    ])
    func malformed(payload: [UInt8]) {
        var d = RTPMPEG4Payload.Depacketizer()
        #expect(throws: RTPMPEG4Payload.Problem.self) { try d.units(in: payload, marker: true, timestamp: 0) }
    }
}

@Suite("AAC over RTP with GStreamer", .enabled(if: haveTool("gst-launch-1.0") && gstElement("avenc_aac") && gstElement("rtpmp4gpay")))
struct AACGStreamerTests {
    @Test("GStreamer avenc_aac ! rtpmp4gpay into voicepipe", arguments: ["chirp", "speech"])
    func receivesFromGStreamer(kind: String) async throws {
        let signal = try AACTest.signal(kind)
        let input = try RTPTest.wav(signal, name: "aac-in-\(kind).wav")
        let output = temporaryPath("aac-from-gst-\(kind).wav")
        let pipeline = try Pipeline(yaml: """
            version: 1
            nodes:
              rx:  { type: rtp-receive, codec: aac, rate: 48000, channels: 1, port: 0, bind: 127.0.0.1, stats_interval_ms: 0 }
              jb:  { type: jitter-buffer, min_ms: 40, max_ms: 200, stats_interval_ms: 0 }
              dec: { type: aac-decode, rate: 48000, channels: 1 }
              out: { type: wav-sink, path: "\(output)" }
            links:
              - rx -> jb -> dec -> out
            """, registry: BuiltinNodes.registry())
        let port = RTPTestBox<Int>()
        let run = Task { try await RTPTest.run(pipeline, seconds: 40) { e in
            if e.name == "rtp_listening", let p = e["port"]?.intValue { port.set(Int(p)) }
        } }
        let p = try #require(await port.wait())
        let gst = try RTPTestProcess.start("gst-launch-1.0", [
            "-q", "filesrc", "location=\(input)", "!", "wavparse", "!", "audioconvert", "!", "audioresample", "!",
            "audio/x-raw,rate=48000,channels=1", "!", "avenc_aac", "bitrate=64000", "!", "rtpmp4gpay", "pt=96", "!",
            "udpsink", "host=127.0.0.1", "port=\(p)", "sync=true",
        ])
        let result = await gst.wait()
        #expect(result.status == 0, "gst-launch: \(result.error)")
        try await Task.sleep(for: .milliseconds(500))
        pipeline.stop()
        let events = try await run.value
        let stats = try #require(RTPTest.last(events, "rtp_stats", node: "rx"))
        let expectedUnits = Int64(signal.count / 1024)
        #expect(stats.rtpInt("received") >= expectedUnits - 2, "received \(stats.rtpInt("received")) of about \(expectedUnits)")
        #expect(stats.rtpInt("lost") == 0)
        let (format, samples) = try readWAV(output)
        #expect(format.sampleRate == 48000)
        let m = RTPTest.match(sent: signal, received: samples)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient) at \(m.lagS) s")
    }

    @Test("voicepipe aac-encode ! rtp-send into GStreamer rtpmp4gdepay ! avdec_aac", arguments: ["chirp", "speech"])
    func sendsToGStreamer(kind: String) async throws {
        let signal = try AACTest.signal(kind)
        let input = try RTPTest.wav(signal, name: "aac-out-\(kind).wav")
        let output = temporaryPath("aac-to-gst-\(kind).raw")
        let port = try RTPTest.freePort()
        let config = AACRates.audioSpecificConfig(AudioFormat(sampleRate: 48000, channels: 1))!.map { String(format: "%02x", $0) }.joined()
        let gst = try RTPTestProcess.start("gst-launch-1.0", [
            "-q", "udpsrc", "address=127.0.0.1", "port=\(port)",
            // Typed strings: an untyped `config=1188` would be read as a number and the decoder left without its configuration.
            "caps=application/x-rtp,media=audio,clock-rate=48000,encoding-name=MPEG4-GENERIC,encoding-params=(string)1,mode=(string)AAC-hbr,"
                + "sizelength=(string)13,indexlength=(string)3,indexdeltalength=(string)3,streamtype=(string)5,config=(string)\(config),payload=96",
            "!", "rtpjitterbuffer", "latency=100", "!", "rtpmp4gdepay", "!", "avdec_aac", "!", "audioconvert", "!", "audioresample", "!",
            "audio/x-raw,format=S16LE,rate=48000,channels=1", "!", "filesink", "buffer-mode=unbuffered", "location=\(output)",
        ])
        try await Task.sleep(for: .milliseconds(700))
        _ = try await runGraph("""
            version: 1
            nodes:
              src: { type: file-source, path: "\(input)", realtime: true, frame_ms: 20 }
              enc: { type: aac-encode, bitrate: 64000 }
              tx:  { type: rtp-send, host: 127.0.0.1, port: \(port) }
            links:
              - src -> enc -> tx
            """)
        try await Task.sleep(for: .milliseconds(500))
        gst.kill()
        _ = await gst.wait()
        let raw = try Data(contentsOf: URL(fileURLWithPath: output))
        let samples = raw.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        #expect(samples.count > signal.count * 2 / 3)
        let m = RTPTest.match(sent: signal, received: samples)
        #expect(m.coefficient > 0.9, "correlation \(m.coefficient) at \(m.lagS) s")
    }
}

/// Whether GStreamer has an element (plugins differ between installations).
func gstElement(_ name: String) -> Bool {
    (try? shell("gst-inspect-1.0", ["--exists", name]).status) == 0
}
