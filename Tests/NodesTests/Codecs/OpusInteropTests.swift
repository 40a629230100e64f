import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("OpusInterop", .enabled(if: haveTool("gst-launch-1.0")))
struct OpusInteropTests {
    @Test func oggCRCMatchesKnownValue() {
        // Check value of CRC-32 with polynomial 0x04c11db7, initial value 0, no reflection, no final xor (Ogg).
        #expect(DSPOggOpusWriter.crc32(Array("123456789".utf8)) == 0x89a1_897f)
    }

    @Test func gstreamerOpusdecDecodesOurPackets() async throws {
        let rate = 48000
        let x = CodecNodeTests.speechLikeSignal(rate: rate, seconds: 1.5)
        let path = try DSPFixtures.wav(x, format: AudioFormat(sampleRate: rate, channels: 1))
        let (_, log) = try await DSPFixtures.run(input: path, chain: ["{ type: opus-encode, bitrate: 64000, application: audio }"])
        let packets = log.encoded
        #expect(packets.count == 75)
        var ogg = DSPOggOpusWriter(channels: 1, inputRate: rate, preSkip: 312)
        for p in packets { ogg.add(p.encoded!.payload, samples48k: 960) }
        let oggPath = temporaryPath("x.opus"), outPath = temporaryPath("x.wav")
        try ogg.finish().write(to: URL(fileURLWithPath: oggPath))
        let r = try shell("gst-launch-1.0", ["-q", "filesrc", "location=\(oggPath)", "!", "oggdemux", "!", "opusdec", "!",
                                             "audioconvert", "!", "audio/x-raw,format=S16LE,rate=48000,channels=1", "!",
                                             "wavenc", "!", "filesink", "location=\(outPath)"])
        #expect(r.status == 0, "gst-launch failed: \(r.error)")
        let (format, y) = try readWAV(outPath)
        #expect(format == AudioFormat(sampleRate: 48000, channels: 1))
        #expect(abs(y.count - x.count) <= 960, "decoded \(y.count) samples of \(x.count)")
        // opusdec applies the pre-skip, so the output lines up with the input within a few samples.
        let c = Signal.bestCorrelation(Array(x[4800..<20000]), Array(y[4800...]), maxLag: 400)
        #expect(c.coefficient > 0.97 && c.lag < 20, "correlation \(c.coefficient) at lag \(c.lag)")
    }
}
