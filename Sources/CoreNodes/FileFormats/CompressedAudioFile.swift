import Foundation
import CAVCodec
import PipelineCore

/// A compressed audio file (M4A/AAC, MP3, Ogg Opus/Vorbis, FLAC, ... — whatever FFmpeg's libavformat
/// opens) decoded to interleaved s16 at the file's own rate and channel count.
/// Used by one node at a time (not thread-safe); never shared.
public final class CompressedAudioFile: @unchecked Sendable {
    public let path: String
    public let format: AudioFormat
    /// Seconds, when the container states it.
    public let duration: Double?
    /// Codec and container, for messages ("aac in mov,mp4,m4a,3gp,3g2,mj2").
    public let description: String
    private let reader: OpaquePointer
    private var error = [CChar](repeating: 0, count: 256)

    public init(path: String) throws {
        var message = [CChar](repeating: 0, count: 256)
        guard let r = vp_media_open(path, &message, message.count) else {
            let size = (try? FileManager.default.attributesOfItem(atPath: path)[.size] as? UInt64) ?? nil
            if let size, size < Self.tinyFileBytes, Self.startsLikeAudio(path) {
                let kind = (path as NSString).pathExtension.uppercased()
                throw NodeError(.truncatedFile, "\(path): only \(size) bytes, too short to hold \(kind.isEmpty ? "any" : kind) audio (was it cut short?)")
            }
            throw NodeError(.unsupportedAudio, "\(path): not a WAV file, and not audio FFmpeg can decode (\(avMessage(message)))")
        }
        let rate = Int(vp_media_rate(r))
        guard (Int(VP_MEDIA_MIN_RATE)...Int(VP_MEDIA_MAX_RATE)).contains(rate) else {
            let codec = String(cString: vp_media_codec(r))
            vp_media_close(r)
            throw NodeError(.unsupportedAudio, "\(path): \(codec) audio at \(rate) Hz; sample rates outside \(VP_MEDIA_MIN_RATE)...\(VP_MEDIA_MAX_RATE) Hz are not read (as for WAV)")
        }
        self.path = path
        reader = r
        format = AudioFormat(sampleRate: rate, channels: Int(vp_media_channels(r)))
        let d = vp_media_duration(r)
        duration = d > 0 ? d : nil
        description = "\(String(cString: vp_media_codec(r))) in \(String(cString: vp_media_container(r)))"
    }

    /// Below this size a file FFmpeg cannot open is called too short rather than undecodable.
    static let tinyFileBytes: UInt64 = 128

    /// True when the file begins as an audio file does (RIFF, ID3, an MPEG/AAC frame sync, fLaC, OggS,
    /// an MP4 `ftyp` box, FORM): a tiny file that does is cut short; one that does not is not audio.
    static func startsLikeAudio(_ path: String) -> Bool {
        guard let h = FileHandle(forReadingAtPath: path) else { return false }
        defer { try? h.close() }
        let b = [UInt8](h.readData(ofLength: 12))
        guard b.count >= 2 else { return b.isEmpty }
        func tag(_ at: Int, _ s: String) -> Bool { b.count >= at + s.count && Array(b[at..<at + s.count]) == Array(s.utf8) }
        return tag(0, "RIFF") || tag(0, "RIFX") || tag(0, "ID3") || tag(0, "fLaC") || tag(0, "OggS") || tag(0, "FORM")
            || tag(4, "ftyp") || (b[0] == 0xFF && b[1] & 0xE0 == 0xE0)
    }

    deinit { vp_media_close(reader) }

    /// Up to `frames` samples per channel; empty at the end of the file.
    public func read(frames: Int) throws -> [Int16] {
        var out = [Int16](repeating: 0, count: max(1, frames) * format.channels)
        let n = out.withUnsafeMutableBufferPointer { vp_media_read(reader, $0.baseAddress!, Int32($0.count), &error, error.count) }
        guard n >= 0 else { throw NodeError(.decodeFailed, "\(path): \(avMessage(error))") }
        out.removeLast(out.count - Int(n) * format.channels)
        return out
    }

    /// Damage read past so far: frames skipped or undecodable, and the media time of the first and last.
    public var damage: (frames: Int, first: Double, last: Double) {
        var first = 0.0, last = 0.0
        let n = vp_media_damage(reader, &first, &last)
        return (Int(n), first, last)
    }

    /// Back to the first sample.
    public func rewind() throws {
        guard vp_media_rewind(reader, &error, error.count) == 0 else { throw NodeError(.decodeFailed, "\(path): \(avMessage(error))") }
    }
}
