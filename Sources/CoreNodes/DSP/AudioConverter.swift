import CSpeexDSP
import PipelineCore

/// Streaming sample-rate and channel conversion of s16 audio, with speexdsp's resampler.
///
/// Keeps filter state between calls, so consecutive buffers join without clicks. Not thread-safe:
/// one converter belongs to one node.
public final class AudioConverter {
    /// Input format.
    public let input: AudioFormat
    /// Output format.
    public let output: AudioFormat
    private var state: OpaquePointer?
    private var scratch: [Int16] = []

    /// Creates a converter; `quality` is speexdsp's 0 (fast) ... 10 (best).
    public init(from input: AudioFormat, to output: AudioFormat, quality: Int = 5) throws {
        self.input = input
        self.output = output
        if input.sampleRate != output.sampleRate {
            var err: Int32 = 0
            // Resample after mixing to the output channel count (less work when downmixing).
            let ch = UInt32(min(input.channels, output.channels) == output.channels ? output.channels : input.channels)
            state = speex_resampler_init(ch, UInt32(input.sampleRate), UInt32(output.sampleRate), Int32(quality), &err)
            guard err == 0, state != nil else {
                throw NodeError(.resamplerFailed, "cannot resample \(input.sampleRate) Hz to \(output.sampleRate) Hz: \(String(cString: speex_resampler_strerror(err)))")
            }
            speex_resampler_skip_zeros(state)
        }
    }

    deinit { if let state { speex_resampler_destroy(state) } }

    /// True when the formats are equal and ``convert(_:)`` returns its input.
    public var isIdentity: Bool { input == output }

    /// Converts one buffer of interleaved samples in the input format.
    public func convert(_ samples: [Int16]) -> [Int16] {
        if isIdentity { return samples }
        if output.channels <= input.channels {
            let mixed = Self.remix(samples, from: input.channels, to: output.channels)
            return resample(mixed, channels: output.channels)
        } else {
            let r = resample(samples, channels: input.channels)
            return Self.remix(r, from: input.channels, to: output.channels)
        }
    }

    /// Pushes out what the resampler's filter still holds (call once at end of stream).
    public func flush() -> [Int16] {
        guard let state else { return [] }
        let ch = output.channels <= input.channels ? output.channels : input.channels
        let latency = Int(speex_resampler_get_input_latency(state))
        let zeros = [Int16](repeating: 0, count: latency * ch)
        let tail = resample(zeros, channels: ch)
        return output.channels > input.channels ? Self.remix(tail, from: input.channels, to: output.channels) : tail
    }

    private func resample(_ samples: [Int16], channels: Int) -> [Int16] {
        guard let state else { return samples }
        let inFrames = samples.count / channels
        let capacity = inFrames * output.sampleRate / input.sampleRate + 16
        var out = [Int16](repeating: 0, count: capacity * channels)
        var inLen = UInt32(inFrames), outLen = UInt32(capacity)
        samples.withUnsafeBufferPointer { src in
            out.withUnsafeMutableBufferPointer { dst in
                _ = speex_resampler_process_interleaved_int(state, src.baseAddress, &inLen, dst.baseAddress, &outLen)
            }
        }
        out.removeLast(out.count - Int(outLen) * channels)
        return out
    }

    /// Mixes interleaved audio from `from` channels to `to` channels (average down, duplicate up).
    public static func remix(_ samples: [Int16], from: Int, to: Int) -> [Int16] {
        if from == to { return samples }
        let frames = samples.count / from
        var out = [Int16](repeating: 0, count: frames * to)
        if to == 1 {
            for f in 0..<frames {
                var sum = 0
                for c in 0..<from { sum += Int(samples[f * from + c]) }
                out[f] = Int16(sum / from)
            }
        } else if from == 1 {
            for f in 0..<frames { for c in 0..<to { out[f * to + c] = samples[f] } }
        } else {
            for f in 0..<frames { for c in 0..<to { out[f * to + c] = samples[f * from + min(c, from - 1)] } }
        }
        return out
    }
}
