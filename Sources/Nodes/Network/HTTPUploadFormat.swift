import Foundation
import PipelineCore

/// What `http-upload` sends: a WAV stream, raw PCM or Ogg Opus.
public enum HTTPUploadFormat: String, Sendable, CaseIterable, Decodable {
    /// 16-bit PCM WAV; the header's sizes say "unknown" (0xFFFFFFFF) while streaming.
    case wav
    /// Raw s16le PCM.
    case pcm
    /// Opus frames from `opus-encode`, in an Ogg Opus stream (RFC 7845).
    case opus

    /// File name extension of a spooled upload.
    public var fileExtension: String {
        switch self {
        case .wav: "wav"
        case .pcm: "pcm"
        case .opus: "opus"
        }
    }

    /// The default `Content-Type` for a stream in `format`.
    public func contentType(format: AudioFormat?) -> String {
        switch self {
        case .wav: "audio/wav"
        case .pcm: "audio/L16;rate=\(format?.sampleRate ?? 16000);channels=\(format?.channels ?? 1);endianness=little-endian"
        case .opus: "audio/ogg;codecs=opus"
        }
    }
}

/// Turns frames into the bytes of one upload, incrementally.
///
/// Feed frames with ``encode(_:)``; ``finish()`` returns what is still held (Ogg's last page).
/// Errors say which frames the format needs.
struct HTTPUploadEncoder {
    let format: HTTPUploadFormat
    private(set) var audioFormat: AudioFormat?
    private var started = false
    private var ogg: OggOpusWriter?

    init(format: HTTPUploadFormat) { self.format = format }

    mutating func encode(_ frame: Frame) throws -> [UInt8] {
        switch (format, frame.payload) {
        case (.wav, .audio(let a)), (.pcm, .audio(let a)):
            var out: [UInt8] = []
            if !started {
                started = true
                audioFormat = a.format
                if format == .wav { out = Self.streamingWAVHeader(format: a.format) }
            } else if a.format != audioFormat {
                throw NodeError(.formatChanged, "audio format changed from \(audioFormat!) to \(a.format) mid-upload; add a `resample` node")
            }
            out.reserveCapacity(out.count + a.samples.count * 2)
            for s in a.samples {
                let u = UInt16(bitPattern: s)
                out.append(UInt8(u & 0xFF))
                out.append(UInt8(u >> 8))
            }
            return out
        case (.opus, .encoded(let e)) where e.codec == "opus":
            if ogg == nil {
                let f = e.format ?? AudioFormat(sampleRate: 48000, channels: 1)
                audioFormat = f
                ogg = OggOpusWriter(channels: f.channels, inputRate: f.sampleRate)
            }
            return ogg!.add(packet: e.payload, durationNanos: e.durationNanos)
        case (.opus, .audio):
            throw NodeError(.needsOpus, "format: opus uploads Opus frames: put an `opus-encode` node before http-upload (or use format: wav)")
        case (_, .encoded(let e)):
            throw NodeError(.needsAudio, "format: \(format.rawValue) uploads PCM audio but received \(e.codec) frames; use format: opus for opus-encode output")
        default:
            return []
        }
    }

    mutating func finish() -> [UInt8] {
        ogg?.finish() ?? []
    }

    /// A 44-byte WAV header whose RIFF and data sizes are 0xFFFFFFFF ("to the end of the stream").
    static func streamingWAVHeader(format: AudioFormat) -> [UInt8] {
        wavHeader(format: format, dataBytes: nil)
    }

    /// A 44-byte 16-bit PCM WAV header; `dataBytes` nil = unknown.
    static func wavHeader(format: AudioFormat, dataBytes: UInt32?) -> [UInt8] {
        var d: [UInt8] = []
        func u32(_ v: UInt32) { d += [UInt8(v & 0xFF), UInt8(v >> 8 & 0xFF), UInt8(v >> 16 & 0xFF), UInt8(v >> 24)] }
        func u16(_ v: UInt16) { d += [UInt8(v & 0xFF), UInt8(v >> 8)] }
        d += Array("RIFF".utf8); u32(dataBytes.map { $0 &+ 36 } ?? 0xFFFF_FFFF); d += Array("WAVE".utf8)
        d += Array("fmt ".utf8); u32(16); u16(1); u16(UInt16(format.channels)); u32(UInt32(format.sampleRate))
        u32(UInt32(format.bytesPerSecond)); u16(UInt16(format.channels * 2)); u16(16)
        d += Array("data".utf8); u32(dataBytes ?? 0xFFFF_FFFF)
        return d
    }
}

/// Writes Opus packets as an Ogg Opus stream (RFC 7845): an `OpusHead` page, an `OpusTags`
/// page, then one page per packet. The newest packet is held back so the last one can carry
/// the end-of-stream flag.
struct OggOpusWriter {
    private let serial: UInt32
    private var sequence: UInt32 = 0
    private var granule: Int64 = 0
    private var held: (packet: [UInt8], granule: Int64)?
    private let header: [UInt8]
    private var wroteHeaders = false
    static let preSkip: UInt16 = 312

    init(channels: Int, inputRate: Int, serial: UInt32 = UInt32.random(in: 1...UInt32.max)) {
        self.serial = serial
        var h = Array("OpusHead".utf8)
        h.append(1)
        h.append(UInt8(channels))
        h += [UInt8(Self.preSkip & 0xFF), UInt8(Self.preSkip >> 8)]
        let r = UInt32(inputRate)
        h += [UInt8(r & 0xFF), UInt8(r >> 8 & 0xFF), UInt8(r >> 16 & 0xFF), UInt8(r >> 24)]
        h += [0, 0, 0]   // output gain 0, channel mapping family 0
        header = h
    }

    /// Adds a packet; returns the bytes ready to send.
    mutating func add(packet: [UInt8], durationNanos: Int64) -> [UInt8] {
        var out: [UInt8] = []
        if !wroteHeaders {
            wroteHeaders = true
            out += page(header, granule: 0, flags: 0x02)
            var tags = Array("OpusTags".utf8)
            let vendor = Array("voicepipe".utf8)
            tags += [UInt8(vendor.count), 0, 0, 0] + vendor + [0, 0, 0, 0]
            out += page(tags, granule: 0, flags: 0)
        }
        if let h = held { out += page(h.packet, granule: h.granule, flags: 0) }
        granule += durationNanos * 48_000 / 1_000_000_000
        held = (packet, granule + Int64(Self.preSkip))
        return out
    }

    /// The last page, flagged end of stream.
    mutating func finish() -> [UInt8] {
        guard let h = held else { return [] }
        held = nil
        return page(h.packet, granule: h.granule, flags: 0x04)
    }

    private mutating func page(_ packet: [UInt8], granule: Int64, flags: UInt8) -> [UInt8] {
        var lacing: [UInt8] = []
        var n = packet.count
        while n >= 255 { lacing.append(255); n -= 255 }
        lacing.append(UInt8(n))
        var p = Array("OggS".utf8)
        p.append(0)
        p.append(flags)
        let g = UInt64(bitPattern: granule)
        for i in 0..<8 { p.append(UInt8(g >> (8 * UInt64(i)) & 0xFF)) }
        for v in [serial, sequence] { for i in 0..<4 { p.append(UInt8(v >> (8 * UInt32(i)) & 0xFF)) } }
        p += [0, 0, 0, 0]   // CRC, filled below
        p.append(UInt8(lacing.count))
        p += lacing
        p += packet
        let crc = OggCRC.checksum(p)
        for i in 0..<4 { p[22 + i] = UInt8(crc >> (8 * UInt32(i)) & 0xFF) }
        sequence += 1
        return p
    }
}

/// The CRC-32 of Ogg pages (polynomial 0x04C11DB7, not reflected, initial value 0).
enum OggCRC {
    static let table: [UInt32] = (0..<256).map { i -> UInt32 in
        var r = UInt32(i) << 24
        for _ in 0..<8 { r = r & 0x8000_0000 != 0 ? (r << 1) ^ 0x04C1_1DB7 : r << 1 }
        return r
    }

    static func checksum(_ bytes: [UInt8]) -> UInt32 {
        var crc: UInt32 = 0
        for b in bytes { crc = (crc << 8) ^ table[Int((crc >> 24) ^ UInt32(b))] }
        return crc
    }
}
