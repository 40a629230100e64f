import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// Replaces every `every`-th encoded frame's payload with nothing (a lost packet, as the jitter
/// buffer reports it).
actor DSPLossNode: FrameProcessor {
    let every: Int
    var n = 0
    init(every: Int) { self.every = every }
    func process(_ frame: Frame, context: NodeContext) async throws {
        n += 1
        var f = frame
        if n % every == 0, var e = f.encoded {
            e.payload = []
            f.payload = .encoded(e)
        }
        try await context.send(f)
    }
}

@Suite("CodecNodes")
struct CodecNodeTests {
    static func speechLikeSignal(rate: Int, seconds: Double) -> [Int16] {
        // A vowel-like harmonic series with a slow amplitude envelope.
        let n = Int(Double(rate) * seconds)
        return (0..<n).map { i in
            let t = Double(i) / Double(rate)
            var v = 0.0
            for h in 1...8 { v += sin(2 * .pi * 140 * Double(h) * t + Double(h)) / Double(h) }
            let env = 0.6 + 0.4 * sin(2 * .pi * 3 * t)
            return Int16((v * env * 3500).rounded())
        }
    }

    /// SNR in dB of `y` against `x` after finding the best alignment lag.
    static func alignedSNR(_ x: [Int16], _ y: [Int16], maxLag: Int) -> (snr: Double, lag: Int) {
        let (lag, _) = Signal.bestCorrelation(Array(x.prefix(8000)), y, maxLag: maxLag)
        let n = min(x.count, y.count - lag)
        var s = 0.0, e = 0.0
        for i in 0..<n { let a = Double(x[i]), d = a - Double(y[i + lag]); s += a * a; e += d * d }
        return (10 * log10(s / max(e, 1)), lag)
    }

    @Test func base64CarriesTheBytesAndMarks() async throws {
        let samples: [Int16] = [0, 1, -1, 32767, -32768, 258]
        let e = Base64EncodeNode.encode(AudioBuffer(format: AudioFormat(sampleRate: 16000, channels: 1), samples: samples))
        #expect(e.codec == "base64-pcm")
        let decoded = try #require(Data(base64Encoded: Data(e.payload)))
        #expect(Array(decoded) == [0, 0, 1, 0, 0xff, 0xff, 0xff, 0x7f, 0x00, 0x80, 0x02, 0x01])
        #expect(String(decoding: e.payload, as: UTF8.self) == decoded.base64EncodedString())

        let path = try DSPFixtures.wav(Signal.sine(frequency: 300, rate: 16000, seconds: 1), format: AudioFormat(sampleRate: 16000, channels: 1))
        let (_, log) = try await DSPFixtures.run(input: path, chain: ["{ type: slicer, mode: fixed, slice_ms: 200 }", "{ type: base64-encode }"])
        let frames = log.encoded
        #expect(frames.count == 5)
        #expect(frames.map { $0.marks.slice?.seq } == [0, 1, 2, 3, 4])
        #expect(frames.allSatisfy { Data(base64Encoded: Data($0.encoded!.payload))?.count == 6400 })
    }

    @Test func opusEncodeRefusesOddRatesNamingResample() throws {
        let config = try OpusEncodeNode.Configuration.decode()
        let msg = try #require(OpusEncodeNode.descriptor.format.accepts(config, AudioFormat(sampleRate: 44100, channels: 1)))
        #expect(msg.contains("resample") && msg.contains("48000"))
        #expect(OpusEncodeNode.descriptor.format.accepts(config, AudioFormat(sampleRate: 16000, channels: 2)) == nil)
        #expect(OpusEncodeNode.descriptor.format.accepts(config, AudioFormat(sampleRate: 16000, channels: 3)) != nil)
        let yaml = """
        version: 1
        nodes:
          t: { type: tone-source, rate: 44100 }
          e: { type: opus-encode }
          o: { type: null-sink }
        links:
          - t -> e -> o
        """
        #expect(throws: (any Error).self) { try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) }
    }

    @Test(arguments: [(16000, 10, "voip", 32000, 4.0), (16000, 20, "voip", 32000, 4.0), (48000, 60, "voip", 32000, 4.0),
                      (8000, 40, "voip", 32000, 4.0), (16000, 20, "audio", 64000, 25.0), (48000, 20, "audio", 64000, 25.0)])
    func opusRoundTripKeepsTheSignal(args: (rate: Int, frameMs: Int, application: String, bitrate: Int, bound: Double)) async throws {
        let x = Self.speechLikeSignal(rate: args.rate, seconds: 2)
        let path = try DSPFixtures.wav(x, format: AudioFormat(sampleRate: args.rate, channels: 1))
        let (_, log) = try await DSPFixtures.run(input: path, chain: [
            "{ type: opus-encode, bitrate: \(args.bitrate), frame_ms: \(args.frameMs), application: \(args.application) }",
            "{ type: opus-decode, rate: \(args.rate) }",
        ])
        let y = log.samples
        let packets = (x.count + args.rate * args.frameMs / 1000 - 1) / (args.rate * args.frameMs / 1000)
        #expect(y.count == packets * args.rate * args.frameMs / 1000)
        let (snr, lag) = Self.alignedSNR(x, y, maxLag: args.rate / 50)
        // Measured with libopus 1.4: voip 32 kb/s (SILK, not waveform-exact) 6-7 dB; audio 64 kb/s (CELT) 31-32 dB.
        print("opus round trip \(args): SNR \(snr) dB at lag \(lag)")
        #expect(snr > args.bound, "SNR \(snr) dB at lag \(lag)")
    }

    @Test func opusPacketsCarrySliceMarksWithoutStraddling() async throws {
        let x = Self.speechLikeSignal(rate: 16000, seconds: 1.05)
        let path = try DSPFixtures.wav(x, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (_, log) = try await DSPFixtures.run(input: path, chain: [
            "{ type: slicer, mode: fixed, slice_ms: 250, voice_id_prefix: v }",
            "{ type: opus-encode, frame_ms: 20 }",
        ])
        let packets = log.encoded
        // Slices of 250 ms = 12.5 packets: each slice ends with a padded packet (13 per slice), the
        // last slice (50 ms) needs 3.
        #expect(packets.count == 4 * 13 + 3)
        let seqs = packets.map { $0.marks.slice!.seq }
        #expect(seqs == (0..<4).flatMap { Array(repeating: $0, count: 13) } + [4, 4, 4])
        #expect(packets.filter { $0.marks.slice!.isFirst }.count == 1 && packets.first!.marks.slice!.isFirst)
        #expect(packets.filter { $0.marks.slice!.isLast }.count == 1 && packets.last!.marks.slice!.isLast)
        #expect(packets.allSatisfy { $0.encoded!.codec == "opus" && !$0.encoded!.payload.isEmpty })
    }

    @Test func opusDecodeRebuildsLostPacketsWithFECOrConcealment() async throws {
        let rate = 16000
        let x = Self.speechLikeSignal(rate: rate, seconds: 2)
        let path = try DSPFixtures.wav(x, format: AudioFormat(sampleRate: rate, channels: 1))
        let clean = DSPFrameLog(), fec = DSPFrameLog(), plc = DSPFrameLog()
        var registry = DSPFixtures.registry(clean, more: ["dsp-collect-fec": fec, "dsp-collect-plc": plc])
        registry.register(NodeDescriptor(type: "dsp-loss", summary: "test", inputs: [PortSpec("in", [.encoded])],
                                         outputs: [PortSpec("out", [.encoded])], format: .none,
                                         fusable: true, make: { _ in DSPLossNode(every: 7) }))
        let yaml = """
        version: 1
        nodes:
          src: { type: file-source, path: "\(path)" }
          enc: { type: opus-encode, bitrate: 24000, fec: true, expected_loss: 20 }
          loss: { type: dsp-loss }
          dec: { type: opus-decode, rate: \(rate) }
          decfec: { type: opus-decode, rate: \(rate) }
          decplc: { type: opus-decode, rate: \(rate), use_fec: false }
          sink: { type: dsp-collect }
          sinkfec: { type: dsp-collect-fec }
          sinkplc: { type: dsp-collect-plc }
        links:
          - src -> enc -> dec -> sink
          - enc -> loss -> decfec -> sinkfec
          - loss -> decplc -> sinkplc
        """
        _ = try await runGraph(yaml, registry: registry)
        let reference = clean.samples, withFEC = fec.samples, withPLC = plc.samples
        // 2 s = 100 packets of 20 ms; the lost ones are rebuilt, so nothing is missing.
        #expect(reference.count == x.count && withFEC.count == x.count && withPLC.count == x.count)
        #expect(fec.audio.allSatisfy { !$0.marks.discontinuity })
        // Compare the rebuilt packets (every 7th) with the lossless decode.
        func snrOfLost(_ y: [Int16]) -> Double {
            var s = 0.0, e = 0.0
            for k in stride(from: 6, to: 100, by: 7) {
                for i in (k * 320)..<((k + 1) * 320) {
                    let a = Double(reference[i]), d = a - Double(y[i]); s += a * a; e += d * d
                }
            }
            return 10 * log10(s / max(e, 1))
        }
        let fecSNR = snrOfLost(withFEC), plcSNR = snrOfLost(withPLC)
        print("opus loss: rebuilt packets vs lossless decode: FEC \(fecSNR) dB, PLC \(plcSNR) dB")
        // Measured (libopus 1.4, this steady harmonic signal, which concealment handles well):
        // FEC 9.6 dB, PLC 6.7 dB. FEC must beat plain concealment.
        #expect(fecSNR > plcSNR + 1.5, "FEC \(fecSNR) dB, PLC \(plcSNR) dB")
        #expect(Signal.rms(Array(withPLC[(6 * 320)..<(7 * 320)])) > 0.1 * Signal.rms(Array(reference[(6 * 320)..<(7 * 320)])))
    }
}
