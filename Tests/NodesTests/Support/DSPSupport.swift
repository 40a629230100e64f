import Foundation
import PipelineCore
import Synchronization
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// Frames received by a `dsp-collect` sink (the testing kit's recorder).
typealias DSPFrameLog = FrameRecorder

enum DSPFixtures {
    /// The built-in registry plus a `dsp-collect` sink feeding `log`.
    static func registry(_ log: DSPFrameLog, more: [String: DSPFrameLog] = [:]) -> NodeRegistry {
        var r = BuiltinNodes.registry()
        for (type, l) in more.merging(["dsp-collect": log], uniquingKeysWith: { a, _ in a }) {
            r.register(CollectingSink.descriptor(type: type, recorder: l))
        }
        return r
    }

    /// Writes a 16-bit WAV to a fresh temporary path.
    static func wav(_ samples: [Int16], format: AudioFormat, name: String = "in.wav") throws -> String {
        let path = temporaryPath(name)
        let w = try WAVWriter(path: path, format: format)
        try w.write(samples)
        try w.close()
        return path
    }

    /// Runs `file-source(path) -> <chain> -> dsp-collect`; `chain` is YAML node entries named n1, n2...
    /// in order. Returns the events and the collected frames.
    static func run(input: String, frameMs: Int = 20, chain: [String], collectPort: String? = nil) async throws -> (events: [Event], log: DSPFrameLog) {
        let log = DSPFrameLog()
        var nodes = "  src: { type: file-source, path: \"\(input)\", frame_ms: \(frameMs) }\n"
        for (i, n) in chain.enumerated() { nodes += "  n\(i + 1): \(n)\n" }
        nodes += "  sink: { type: dsp-collect }\n"
        var link = "src"
        for i in chain.indices { link += " -> n\(i + 1)" }
        if let collectPort { link += "." + collectPort }
        link += " -> sink"
        let yaml = "version: 1\nname: dsp-test\nnodes:\n\(nodes)links:\n  - \(link)\n"
        let events = try await runGraph(yaml, registry: registry(log))
        return (events, log)
    }

    /// Standard normal deviates from a seeded generator.
    static func gaussianNoise(count: Int, rms: Double, seed: UInt64 = 7) -> [Double] {
        var g = DSPRandom(seed: seed)
        var out = [Double](repeating: 0, count: count)
        for i in 0..<count {
            let u1 = max(Double.random(in: 0..<1, using: &g), 1e-12), u2 = Double.random(in: 0..<1, using: &g)
            out[i] = rms * (-2 * log(u1)).squareRoot() * cos(2 * .pi * u2)
        }
        return out
    }

    /// Three (or more) espeak-ng sentences at 16 kHz mono, trimmed of their own silence, with
    /// `gapS` of digital silence between them and `leadS` before and after. Returns the samples,
    /// the true speech spans in milliseconds and the RMS of the speech parts.
    static func sentences(_ texts: [String], leadS: Double = 0.5, gapS: Double = 1.0) throws -> (samples: [Int16], truth: [(startMs: Int, endMs: Int)], speechRMS: Double) {
        let rate = 16000
        var out = [Int16](repeating: 0, count: Int(leadS * Double(rate)))
        var truth: [(Int, Int)] = []
        var sumSq = 0.0, count = 0
        for (i, text) in texts.enumerated() {
            let path = temporaryPath("s\(i).wav")
            let r = try shell("espeak-ng", ["-v", "en-us", "-s", "160", "-w", path, text])
            guard r.status == 0 else { throw NodeError("espeak", "espeak-ng failed: \(r.error)") }
            let (format, raw) = try readWAV(path)
            let conv = try AudioConverter(from: format, to: AudioFormat(sampleRate: rate, channels: 1), quality: 8)
            let part = trimSilence(conv.convert(raw) + conv.flush())
            for v in part { sumSq += Double(v) * Double(v) }
            count += part.count
            let start = out.count
            out += part
            truth.append((start * 1000 / rate, out.count * 1000 / rate))
            out += [Int16](repeating: 0, count: Int((i == texts.count - 1 ? leadS : gapS) * Double(rate)))
        }
        return (out, truth, (sumSq / Double(max(count, 1))).squareRoot())
    }

    /// Drops leading and trailing samples until one exceeds -50 dBFS.
    static func trimSilence(_ x: [Int16]) -> [Int16] {
        let threshold: Int16 = 104
        guard let first = x.firstIndex(where: { abs(Int32($0)) > Int32(threshold) }),
              let last = x.lastIndex(where: { abs(Int32($0)) > Int32(threshold) }) else { return [] }
        return Array(x[first...last])
    }

    /// Adds white noise so that the speech-to-noise ratio is `snrDB`.
    static func addNoise(_ x: [Int16], speechRMS: Double, snrDB: Double, seed: UInt64 = 11) -> [Int16] {
        let noise = gaussianNoise(count: x.count, rms: speechRMS / pow(10, snrDB / 20), seed: seed)
        return zip(x, noise).map { Int16(max(-32768, min(32767, (Double($0) + $1).rounded()))) }
    }

    /// Power of `frequency` in `x` (Goertzel), normalized so a full-scale sine gives ~1.
    static func goertzel(_ x: ArraySlice<Int16>, frequency: Double, rate: Int) -> Double {
        let w = 2 * Double.pi * frequency / Double(rate)
        let c = 2 * cos(w)
        var s1 = 0.0, s2 = 0.0
        for v in x { let s0 = Double(v) / 32768 + c * s1 - s2; s2 = s1; s1 = s0 }
        let power = s1 * s1 + s2 * s2 - c * s1 * s2
        return power / (Double(x.count) * Double(x.count) / 4)
    }

    /// Frequency estimated from positive-going zero crossings.
    static func zeroCrossingFrequency(_ x: ArraySlice<Int16>, rate: Int) -> Double {
        var crossings: [Double] = []
        var prev = x.first ?? 0
        for (i, v) in x.enumerated().dropFirst() {
            if prev < 0 && v >= 0 {
                let frac = Double(-prev) / Double(Int(v) - Int(prev))
                crossings.append(Double(i - 1) + frac)
            }
            prev = v
        }
        guard crossings.count > 2 else { return 0 }
        return Double(rate) * Double(crossings.count - 1) / (crossings.last! - crossings.first!)
    }
}

/// Writes Ogg Opus files (RFC 7845): an OpusHead page, an OpusTags page, then audio pages.
struct DSPOggOpusWriter {
    private var data = Data()
    private var pageSeq: UInt32 = 0
    private let serial: UInt32 = 0x766f_6963
    private var granule: UInt64 = 0
    private var pendingPackets: [[UInt8]] = []

    init(channels: Int, inputRate: Int, preSkip: Int) {
        var head = Data("OpusHead".utf8)
        head.append(1)
        head.append(UInt8(channels))
        head.append(contentsOf: Self.le16(UInt16(preSkip)))
        head.append(contentsOf: Self.le32(UInt32(inputRate)))
        head.append(contentsOf: [0, 0, 0])  // output gain 0, mapping family 0
        writePage([Array(head)], granule: 0, flags: 0x02)
        var tags = Data("OpusTags".utf8)
        let vendor = Array("voicepipe".utf8)
        tags.append(contentsOf: Self.le32(UInt32(vendor.count)))
        tags.append(contentsOf: vendor)
        tags.append(contentsOf: Self.le32(0))
        writePage([Array(tags)], granule: 0, flags: 0)
    }

    /// Adds one packet of `samples48k` samples (per channel, at 48 kHz).
    mutating func add(_ packet: [UInt8], samples48k: Int) {
        granule += UInt64(samples48k)
        writePage([packet], granule: granule, flags: 0)
    }

    /// The file, with the last page flagged end of stream.
    mutating func finish() -> Data {
        writePage([], granule: granule, flags: 0x04)
        return data
    }

    private mutating func writePage(_ packets: [[UInt8]], granule: UInt64, flags: UInt8) {
        var lacing: [UInt8] = []
        for p in packets {
            var n = p.count
            while n >= 255 { lacing.append(255); n -= 255 }
            lacing.append(UInt8(n))
        }
        var page: [UInt8] = Array("OggS".utf8) + [0, flags]
        page += Self.le64(granule) + Self.le32(serial) + Self.le32(pageSeq) + [0, 0, 0, 0]
        page.append(UInt8(lacing.count))
        page += lacing
        for p in packets { page += p }
        let crc = Self.crc32(page)
        page[22] = UInt8(crc & 0xff); page[23] = UInt8((crc >> 8) & 0xff)
        page[24] = UInt8((crc >> 16) & 0xff); page[25] = UInt8(crc >> 24)
        data.append(contentsOf: page)
        pageSeq += 1
    }

    /// Ogg's CRC-32: polynomial 0x04c11db7, not reflected, initial value 0, no final xor.
    static func crc32(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0
        for b in bytes {
            crc ^= UInt32(b) << 24
            for _ in 0..<8 { crc = crc & 0x8000_0000 != 0 ? (crc << 1) ^ 0x04c1_1db7 : crc << 1 }
        }
        return crc
    }

    static func le16(_ v: UInt16) -> [UInt8] { [UInt8(v & 0xff), UInt8(v >> 8)] }
    static func le32(_ v: UInt32) -> [UInt8] { (0..<4).map { UInt8((v >> (8 * $0)) & 0xff) } }
    static func le64(_ v: UInt64) -> [UInt8] { (0..<8).map { UInt8((v >> (8 * UInt64($0))) & 0xff) } }
}

/// A small deterministic generator (xorshift64*), so noise is the same on every run.
struct DSPRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed | 1 }
    mutating func next() -> UInt64 {
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
}
