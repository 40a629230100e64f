import Foundation
import PipelineCore

/// Sample encodings a WAV or raw PCM file may hold.
public enum PCMEncoding: String, Sendable, Hashable, CaseIterable {
    case u8, s16le, s24le, s32le, f32le, f64le

    /// Bytes per sample.
    public var bytes: Int {
        switch self {
        case .u8: 1
        case .s16le: 2
        case .s24le: 3
        case .s32le, .f32le: 4
        case .f64le: 8
        }
    }

    /// Converts little-endian bytes to s16, appending to `out`.
    public func decode(_ bytes: UnsafeRawBufferPointer, into out: inout [Int16]) {
        let n = bytes.count / self.bytes
        out.reserveCapacity(out.count + n)
        switch self {
        case .u8:
            for i in 0..<n { out.append(Int16(Int(bytes[i]) - 128) << 8) }
        case .s16le:
            for i in 0..<n { out.append(Int16(bitPattern: UInt16(bytes[2 * i]) | UInt16(bytes[2 * i + 1]) << 8)) }
        case .s24le:
            for i in 0..<n {
                let v = Int32(bitPattern: UInt32(bytes[3 * i]) << 8 | UInt32(bytes[3 * i + 1]) << 16 | UInt32(bytes[3 * i + 2]) << 24)
                out.append(Int16(truncatingIfNeeded: v >> 16))
            }
        case .s32le:
            for i in 0..<n {
                let v = Int32(bitPattern: UInt32(bytes[4 * i]) | UInt32(bytes[4 * i + 1]) << 8 | UInt32(bytes[4 * i + 2]) << 16 | UInt32(bytes[4 * i + 3]) << 24)
                out.append(Int16(truncatingIfNeeded: v >> 16))
            }
        case .f32le:
            for i in 0..<n {
                let bits = UInt32(bytes[4 * i]) | UInt32(bytes[4 * i + 1]) << 8 | UInt32(bytes[4 * i + 2]) << 16 | UInt32(bytes[4 * i + 3]) << 24
                out.append(PCMEncoding.clamp(Double(Float(bitPattern: bits))))
            }
        case .f64le:
            for i in 0..<n {
                var bits: UInt64 = 0
                for b in 0..<8 { bits |= UInt64(bytes[8 * i + b]) << (8 * b) }
                out.append(PCMEncoding.clamp(Double(bitPattern: bits)))
            }
        }
    }

    @inline(__always) static func clamp(_ x: Double) -> Int16 {
        let v = (x * 32768).rounded()
        return Int16(max(-32768, min(32767, v.isNaN ? 0 : v)))
    }
}

/// The header of a WAV file: format and where the audio data is.
public struct WAVHeader: Sendable, Hashable {
    /// Sample rate and channels.
    public var format: AudioFormat
    /// Sample encoding.
    public var encoding: PCMEncoding
    /// Byte offset of the first sample.
    public var dataOffset: UInt64
    /// Bytes of audio data (to the end of the file when the header leaves it open).
    public var dataBytes: UInt64

    /// Duration in seconds.
    public var duration: Double { Double(dataBytes) / Double(encoding.bytes * format.channels * format.sampleRate) }

    /// Reads and checks the header of the file at `path`. Errors name the file and the problem.
    public static func read(path: String) throws -> WAVHeader {
        guard let h = FileHandle(forReadingAtPath: path) else {
            throw NodeError(FileManager.default.fileExists(atPath: path) ? .fileUnreadable : .fileNotFound,
                            FileManager.default.fileExists(atPath: path) ? "\(path): cannot open for reading (permissions?)" : noSuchFileMessage(path))
        }
        defer { try? h.close() }
        let fileSize = (try? h.seekToEnd()) ?? 0
        try h.seek(toOffset: 0)
        let head = try h.read(upToCount: 12) ?? Data()
        guard head.count == 12 else { throw NodeError(.truncatedWav, "\(path): file too short for a WAV header (\(fileSize) bytes)") }
        guard head.prefix(4) == Data("RIFF".utf8), head.subdata(in: 8..<12) == Data("WAVE".utf8) else {
            if head.prefix(4) == Data("RF64".utf8) { throw NodeError(.unsupportedWav, "\(path): RF64 WAV files are not supported") }
            throw NodeError(.notWav, "\(path): not a WAV file (no RIFF/WAVE header); for raw PCM give `raw: { rate: 16000, channels: 1 }`")
        }
        var offset: UInt64 = 12
        var format: AudioFormat?
        var encoding: PCMEncoding?
        while true {
            try h.seek(toOffset: offset)
            let ch = try h.read(upToCount: 8) ?? Data()
            guard ch.count == 8 else {
                throw NodeError(.truncatedWav, format == nil ? "\(path): truncated WAV: no `fmt ` chunk" : "\(path): truncated WAV: no `data` chunk")
            }
            let id = String(decoding: ch.prefix(4), as: UTF8.self)
            let size = UInt64(ch.le32(4))
            let body = offset + 8
            if id == "fmt " {
                let f = try h.read(upToCount: Int(min(size, 64))) ?? Data()
                guard f.count >= 16 else { throw NodeError(.truncatedWav, "\(path): truncated `fmt ` chunk") }
                var tag = f.le16(0)
                let channels = Int(f.le16(2)), rate = Int(f.le32(4)), bits = Int(f.le16(14))
                if tag == 0xFFFE, f.count >= 26 { tag = f.le16(24) }   // WAVE_FORMAT_EXTENSIBLE: sub-format GUID starts with the tag
                switch (tag, bits) {
                case (1, 8): encoding = .u8
                case (1, 16): encoding = .s16le
                case (1, 24): encoding = .s24le
                case (1, 32): encoding = .s32le
                case (3, 32): encoding = .f32le
                case (3, 64): encoding = .f64le
                default:
                    let name = [6: "A-law", 7: "µ-law", 2: "ADPCM", 0x11: "IMA ADPCM", 0x55: "MP3"][Int(tag)] ?? "format tag \(tag)"
                    throw NodeError(.unsupportedEncoding, "\(path): unsupported WAV encoding (\(name), \(bits)-bit); supported: PCM 8/16/24/32-bit integer, 32/64-bit float")
                }
                guard channels >= 1, channels <= 8, rate >= 1000, rate <= 768_000 else {
                    throw NodeError(.unsupportedWav, "\(path): implausible WAV format (\(rate) Hz, \(channels) channels)")
                }
                format = AudioFormat(sampleRate: rate, channels: channels)
            } else if id == "data" {
                guard let format, let encoding else { throw NodeError(.badWav, "\(path): `data` chunk before `fmt ` chunk") }
                let available = fileSize > body ? fileSize - body : 0
                var bytes = size
                if size == 0xFFFF_FFFF || size == 0 {
                    bytes = available   // header left open by a streaming writer: read to the end
                } else if size > available {
                    throw NodeError(.truncatedWav, "\(path): truncated WAV: header announces \(size) bytes of audio but the file holds \(available)")
                }
                let frame = UInt64(encoding.bytes * format.channels)
                bytes -= bytes % frame
                return WAVHeader(format: format, encoding: encoding, dataOffset: body, dataBytes: bytes)
            }
            offset = body + size + (size & 1)
            if offset > fileSize { throw NodeError(.truncatedWav, "\(path): truncated WAV: chunk '\(id)' runs past the end of the file") }
        }
    }
}

/// Writes a 16-bit PCM WAV file, finalizing the header sizes on ``close()``.
///
/// Every open writer is also listed in ``WAVWriter/finalizeAllForExit()``, so that a process
/// leaving at once (a second SIGINT) still leaves headers that match the samples written.
public final class WAVWriter {
    private let output: FileOutput
    /// Path written.
    public let path: String
    /// Format written.
    public let format: AudioFormat
    private(set) var dataBytes: UInt64 = 0
    private var closed = false
    private let registration: Int

    /// Creates (truncates) the file and writes a provisional header.
    public init(path: String, format: AudioFormat) throws {
        self.path = path
        self.format = format
        output = try FileOutput(path: path)
        try output.write(WAVWriter.header(format: format, dataBytes: 0))
        registration = OpenWAVFiles.add(fd: output.fd, format: format)
    }

    /// The 44-byte header of a 16-bit PCM WAV file.
    public static func header(format: AudioFormat, dataBytes: UInt64) -> Data {
        var d = Data()
        func u32(_ v: UInt32) { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
        func u16(_ v: UInt16) { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
        let data = UInt32(min(dataBytes, UInt64(UInt32.max - 36)))
        d.append(contentsOf: Array("RIFF".utf8)); u32(36 + data); d.append(contentsOf: Array("WAVE".utf8))
        d.append(contentsOf: Array("fmt ".utf8)); u32(16); u16(1); u16(UInt16(format.channels)); u32(UInt32(format.sampleRate))
        u32(UInt32(format.bytesPerSecond)); u16(UInt16(format.channels * 2)); u16(16)
        d.append(contentsOf: Array("data".utf8)); u32(data)
        return d
    }

    /// Appends samples; a failed write (full disk, I/O error) throws a ``NodeError`` naming the path.
    public func write(_ samples: [Int16]) throws {
        try samples.withUnsafeBytes { try output.write($0) }
        dataBytes += UInt64(samples.count * 2)
        OpenWAVFiles.update(registration, dataBytes: dataBytes)
    }

    /// Writes the final sizes into the header and closes the file.
    public func close() throws {
        guard !closed else { return }
        closed = true
        OpenWAVFiles.remove(registration)
        do {
            try output.write(WAVWriter.header(format: format, dataBytes: dataBytes), at: 0)
        } catch {
            try? output.close()
            throw error
        }
        try output.close()
    }

    /// Rewrites the header of every WAV file still open so it declares the samples written so
    /// far; for a process about to exit without unwinding. Safe from any thread.
    public static func finalizeAllForExit() {
        OpenWAVFiles.finalizeAll()
    }

    deinit { try? close() }
}

/// The WAV files open in this process, with their sizes so far.
enum OpenWAVFiles {
    struct Entry { var fd: Int32; var format: AudioFormat; var dataBytes: UInt64 }
    private static let table = LockedValue<(next: Int, entries: [Int: Entry])>((0, [:]))

    static func add(fd: Int32, format: AudioFormat) -> Int {
        table.withLock { t in
            t.next += 1
            t.entries[t.next] = Entry(fd: fd, format: format, dataBytes: 0)
            return t.next
        }
    }
    static func update(_ id: Int, dataBytes: UInt64) { table.withLock { $0.entries[id]?.dataBytes = dataBytes } }
    static func remove(_ id: Int) { _ = table.withLock { $0.entries.removeValue(forKey: id) } }
    static func finalizeAll() {
        table.withLock { t in
            for (_, e) in t.entries {
                let header = WAVWriter.header(format: e.format, dataBytes: e.dataBytes)
                _ = header.withUnsafeBytes { pwrite(e.fd, $0.baseAddress!, $0.count, 0) }
            }
            t.entries = [:]
        }
    }
}

extension Data {
    func le16(_ at: Int) -> UInt16 { UInt16(self[startIndex + at]) | UInt16(self[startIndex + at + 1]) << 8 }
    func le32(_ at: Int) -> UInt32 {
        UInt32(self[startIndex + at]) | UInt32(self[startIndex + at + 1]) << 8 | UInt32(self[startIndex + at + 2]) << 16 | UInt32(self[startIndex + at + 3]) << 24
    }
}
