import COpus
import PipelineCore

/// Sample rates libopus encodes and decodes.
enum OpusRates {
    static let supported: Set<Int> = [8000, 12000, 16000, 24000, 48000]

    /// Why `format` cannot be used with Opus, or nil.
    static func problem(_ format: AudioFormat, node: String) -> String? {
        if !supported.contains(format.sampleRate) || !(1...2).contains(format.channels) {
            return "\(node) takes 8000, 12000, 16000, 24000 or 48000 Hz mono or stereo audio, got \(format); "
                + "put a `resample` node (e.g. { type: resample, rate: \(nearest(format.sampleRate)), channels: \(min(max(format.channels, 1), 2)) }) before it"
        }
        return nil
    }

    static func nearest(_ rate: Int) -> Int {
        supported.min(by: { abs($0 - rate) < abs($1 - rate) }) ?? 48000
    }

    static func message(_ code: Int32) -> String { String(cString: opus_strerror(code)) }
}

/// A libopus encoder (one per node; not thread-safe).
public final class OpusEncoderHandle {
    public let format: AudioFormat
    public let frameSamples: Int
    private let encoder: OpaquePointer
    private var packet = [UInt8](repeating: 0, count: 4000)

    public init(format: AudioFormat, frameMs: Int, application: Int32, bitrate: Int?, fec: Bool, expectedLoss: Int,
         dtx: Bool, complexity: Int?) throws {
        if let p = OpusRates.problem(format, node: "opus-encode") { throw NodeError(.unsupportedFormat, p) }
        self.format = format
        frameSamples = format.sampleRate * frameMs / 1000
        var err: Int32 = 0
        guard let e = opus_encoder_create(Int32(format.sampleRate), Int32(format.channels), application, &err), err == OPUS_OK else {
            throw NodeError(.encoderFailed, "cannot create the Opus encoder: \(OpusRates.message(err))")
        }
        encoder = e
        if let bitrate { _ = voicepipe_opus_set_bitrate(e, Int32(bitrate)) }
        _ = voicepipe_opus_set_inband_fec(e, fec ? 1 : 0)
        if fec { _ = voicepipe_opus_set_packet_loss_perc(e, Int32(expectedLoss)) }
        _ = voicepipe_opus_set_dtx(e, dtx ? 1 : 0)
        if let complexity { _ = voicepipe_opus_set_complexity(e, Int32(complexity)) }
    }

    deinit { opus_encoder_destroy(encoder) }

    /// Encoder delay in samples at the input rate (the decoder's output lags the input by this).
    var lookahead: Int {
        var v: Int32 = 0
        _ = voicepipe_opus_get_lookahead(encoder, &v)
        return Int(v)
    }

    /// Encodes exactly `frameSamples` samples per channel starting at `offset` of `samples`.
    public func encode(_ samples: UnsafeBufferPointer<Int16>, offset: Int) throws -> [UInt8] {
        let n = packet.withUnsafeMutableBufferPointer { out in
            opus_encode(encoder, samples.baseAddress! + offset, Int32(frameSamples), out.baseAddress!, Int32(out.count))
        }
        guard n >= 0 else { throw NodeError(.encodeFailed, "Opus encoding failed: \(OpusRates.message(n))") }
        return Array(packet[0..<Int(n)])
    }
}

/// A libopus decoder (one per node; not thread-safe).
public final class OpusDecoderHandle {
    public let format: AudioFormat
    private let decoder: OpaquePointer
    private var pcm: [Int16]
    /// Largest frame: 120 ms.
    public let maxFrame: Int

    public init(format: AudioFormat) throws {
        if let p = OpusRates.problem(format, node: "opus-decode") { throw NodeError(.unsupportedFormat, p) }
        self.format = format
        maxFrame = format.sampleRate * 120 / 1000
        pcm = [Int16](repeating: 0, count: maxFrame * format.channels)
        var err: Int32 = 0
        guard let d = opus_decoder_create(Int32(format.sampleRate), Int32(format.channels), &err), err == OPUS_OK else {
            throw NodeError(.decoderFailed, "cannot create the Opus decoder: \(OpusRates.message(err))")
        }
        decoder = d
    }

    deinit { opus_decoder_destroy(decoder) }

    /// Decodes a packet; with `fec`, decodes the previous (lost) frame of `frameSamples` from the
    /// packet's redundancy (libopus conceals when there is none). `packet == nil` conceals
    /// `frameSamples` (packet-loss concealment).
    public func decode(_ packet: [UInt8]?, fec: Bool = false, frameSamples: Int? = nil) throws -> [Int16] {
        let size = Int32(min(frameSamples ?? maxFrame, maxFrame))
        let n: Int32 = pcm.withUnsafeMutableBufferPointer { out in
            if let packet {
                return packet.withUnsafeBufferPointer { p in
                    opus_decode(decoder, p.baseAddress, Int32(p.count), out.baseAddress!, size, fec ? 1 : 0)
                }
            }
            return opus_decode(decoder, nil, 0, out.baseAddress!, size, 0)
        }
        guard n >= 0 else { throw NodeError(.decodeFailed, "Opus decoding failed: \(OpusRates.message(n))") }
        return Array(pcm[0..<(Int(n) * format.channels)])
    }
}
