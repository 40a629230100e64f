import Nodes
import PipelineCore

/// A call's audio codec in both directions: frames of `ptime` ms at the codec's own audio rate to RTP
/// payloads and back. Not thread-safe (Opus and G.722 keep state): one per call.
final class CallCodec {
    let codec: TelephoneCodec
    /// Sample rate of the audio the codec takes and gives (8000 for G.711, 16000 for G.722, 16000 or 48000 for Opus).
    let rate: Int
    /// Samples per frame at `rate`.
    let frameSamples: Int
    /// RTP timestamp units per frame.
    let timestampStep: UInt32
    private var opusEncoder: OpusEncoderHandle?
    private var opusDecoder: OpusDecoderHandle?
    private var g722Encoder: G722Encoder?
    private var g722Decoder: G722Decoder?

    /// `graphRate` chooses Opus's rate (48 kHz for a graph above 16 kHz, else 16 kHz).
    init(_ codec: TelephoneCodec, ptime: Int, graphRate: Int) throws {
        self.codec = codec
        switch codec {
        case .pcmu, .pcma: rate = 8000
        case .g722:
            rate = 16000
            g722Encoder = try G722Encoder()
            g722Decoder = try G722Decoder()
        case .opus:
            rate = graphRate > 16000 ? 48000 : 16000
            let format = AudioFormat(sampleRate: rate, channels: 1)
            // 2048 = OPUS_APPLICATION_VOIP.
            opusEncoder = try OpusEncoderHandle(format: format, frameMs: ptime, application: 2048, bitrate: 32000, fec: true, expectedLoss: 5,
                                                dtx: false, complexity: 5)
            opusDecoder = try OpusDecoderHandle(format: format)
        }
        frameSamples = rate * ptime / 1000
        timestampStep = UInt32(codec.rtpmap.clock * ptime / 1000)
    }

    /// One frame (`frameSamples` samples) to a payload.
    func encode(_ frame: [Int16]) throws -> [UInt8] {
        switch codec {
        case .pcmu: return frame.map(MuLaw.encode)
        case .pcma: return frame.map(ALaw.encode)
        case .g722: return g722Encoder?.encode(frame) ?? []
        case .opus:
            guard let e = opusEncoder else { return [] }
            return try frame.withUnsafeBufferPointer { try e.encode($0, offset: 0) }
        }
    }

    /// A payload to samples at `rate`.
    func decode(_ payload: [UInt8]) throws -> [Int16] {
        switch codec {
        case .pcmu: return payload.map(MuLaw.decode)
        case .pcma: return payload.map(ALaw.decode)
        case .g722: return g722Decoder?.decode(payload) ?? []
        case .opus: return try opusDecoder?.decode(payload) ?? []
        }
    }

    /// Audio for a lost frame: Opus's concealment, silence for the others.
    func conceal() -> [Int16] {
        if codec == .opus, let d = opusDecoder, let pcm = try? d.decode(nil, frameSamples: frameSamples) { return pcm }
        return [Int16](repeating: 0, count: frameSamples)
    }
}
