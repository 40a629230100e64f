import CAVCodec
import PipelineCore

/// Sample rates the AAC nodes take (AAC-LC sampling-frequency table entries from 16 to 48 kHz).
enum AACRates {
    static let supported: Set<Int> = [16000, 22050, 24000, 32000, 44100, 48000]
    /// Samples per channel in one AAC-LC frame.
    static let frameSamples = 1024

    static func problem(_ format: AudioFormat, node: String) -> String? {
        if !supported.contains(format.sampleRate) || !(1...2).contains(format.channels) {
            return "\(node) takes 16000, 22050, 24000, 32000, 44100 or 48000 Hz mono or stereo audio, got \(format); "
                + "put a `resample` node (e.g. { type: resample, rate: 48000, channels: \(min(max(format.channels, 1), 2)) }) before it"
        }
        return nil
    }

    /// The two-byte AudioSpecificConfig of AAC-LC (ISO/IEC 14496-3 1.6.2.1) for `format`, as RFC 3640's `config=` carries it.
    static func audioSpecificConfig(_ format: AudioFormat) -> [UInt8]? {
        let table = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000, 7350]
        guard let index = table.firstIndex(of: format.sampleRate), (1...7).contains(format.channels) else { return nil }
        return [UInt8(2 << 3 | index >> 1), UInt8((index & 1) << 7 | format.channels << 3)]
    }
}

/// Reads the message a CAVCodec call left in its error buffer.
func avMessage(_ buffer: [CChar]) -> String {
    buffer.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// FFmpeg's libraries, opened at first use (see CAVCodec).
enum FFmpegLibraries {
    /// Opens them now, once per process. The AAC nodes call it when they are built: opening libavcodec and
    /// libavformat (some 130 shared libraries) takes 0.1 s on a quiet machine and approaching a second on a
    /// loaded one, and done at the first frame it held back the first packets of a call that had already
    /// begun (the sender's first packet 0.9–1.5 s late, a third of a 3 s call concealed at the far end).
    static func load(for node: String, code: NodeErrorCode) throws {
        var error = [CChar](repeating: 0, count: 512)
        guard vp_ffmpeg_load(&error, error.count) == 0 else { throw NodeError(code, "\(node): \(avMessage(error))") }
    }
}

/// An FFmpeg AAC-LC encoder (one per node; not thread-safe).
public final class AACEncoderHandle {
    public let format: AudioFormat
    public let frameSamples: Int
    /// Priming samples per channel: the decoded stream lags the input by this.
    public let delay: Int
    private let encoder: OpaquePointer
    private var packet = [UInt8](repeating: 0, count: 8192)
    private var error = [CChar](repeating: 0, count: 256)

    public init(format: AudioFormat, bitrate: Int) throws {
        if let p = AACRates.problem(format, node: "aac-encode") { throw NodeError(.unsupportedFormat, p) }
        self.format = format
        guard let e = vp_aac_encoder_create(Int32(format.sampleRate), Int32(format.channels), Int32(bitrate), &error, error.count) else {
            throw NodeError(.encoderFailed, "cannot create the AAC encoder: \(avMessage(error))")
        }
        encoder = e
        frameSamples = Int(vp_aac_encoder_frame_size(e))
        delay = Int(vp_aac_encoder_delay(e))
    }

    deinit { vp_aac_encoder_destroy(encoder) }

    /// Encodes one frame of `frameSamples` per channel from `samples[offset...]` (nil: drain); returns the packets ready.
    public func encode(_ samples: UnsafeBufferPointer<Int16>?, offset: Int = 0) throws -> [[UInt8]] {
        let rc = vp_aac_encoder_send(encoder, samples.map { $0.baseAddress! + offset }, &error, error.count)
        guard rc == 0 else { throw NodeError(.encodeFailed, avMessage(error)) }
        var out: [[UInt8]] = []
        while true {
            var pts: Int64 = 0
            let n = packet.withUnsafeMutableBufferPointer { vp_aac_encoder_receive(encoder, $0.baseAddress!, Int32($0.count), &pts, &error, error.count) }
            if n > 0 { out.append(Array(packet[0..<Int(n)])); continue }
            if n == -2 { throw NodeError(.encodeFailed, avMessage(error)) }
            return out
        }
    }
}

/// An FFmpeg AAC decoder for raw access units (one per node; not thread-safe).
public final class AACDecoderHandle {
    public let format: AudioFormat
    private let decoder: OpaquePointer
    private var pcm: [Int16]
    private var error = [CChar](repeating: 0, count: 256)

    public init(format: AudioFormat, config: [UInt8]? = nil) throws {
        if let p = AACRates.problem(format, node: "aac-decode") { throw NodeError(.unsupportedFormat, p) }
        self.format = format
        pcm = [Int16](repeating: 0, count: 8 * 2048 * format.channels)
        var message = [CChar](repeating: 0, count: 256)
        let made: OpaquePointer? = (config ?? []).withUnsafeBufferPointer { c in
            vp_aac_decoder_create(Int32(format.sampleRate), Int32(format.channels), c.baseAddress, Int32(c.count), &message, message.count)
        }
        guard let made else { throw NodeError(.decoderFailed, "cannot create the AAC decoder: \(avMessage(message))") }
        decoder = made
    }

    deinit { vp_aac_decoder_destroy(decoder) }

    /// Decodes one access unit to interleaved s16 in `format`.
    public func decode(_ packet: [UInt8]) throws -> [Int16] {
        var channels: Int32 = 0, rate: Int32 = 0
        let n = packet.withUnsafeBufferPointer { p in
            pcm.withUnsafeMutableBufferPointer { out in
                vp_aac_decoder_decode(decoder, p.baseAddress, Int32(p.count), out.baseAddress!, Int32(out.count), &channels, &rate, &error, error.count)
            }
        }
        guard n >= 0 else { throw NodeError(.decodeFailed, avMessage(error)) }
        return Array(pcm[0..<(Int(n) * format.channels)])
    }
}
