import PipelineCore

/// Stretches or squeezes interleaved s16 audio by a few hundred ppm, continuously: linear
/// interpolation at a fractional read position carried from one buffer to the next. Used by the
/// playback sinks to follow ``DriftCompensator``; at such ratios it never switches filters or
/// drops a sample, so changing the ratio between buffers is inaudible.
struct DriftResampler {
    let channels: Int
    /// Read position of the next output frame, in frames after `last` (0 = `last` itself).
    private var position: Double = 0
    /// The input frame before the current buffer (nil before the first buffer).
    private var last: [Int16]?

    init(channels: Int) { self.channels = max(1, channels) }

    /// Resamples `samples` so that one second of input lasts `1 + ppm / 1e6` seconds of output.
    mutating func process(_ samples: [Int16], ppm: Double) -> [Int16] {
        let ch = channels
        let frames = samples.count / ch
        guard frames > 0 else { return samples }
        let step = 1 / (1 + ppm / 1e6)
        // y[0] = last (if any), then the new frames.
        let offset = last == nil ? 0 : 1
        let total = frames + offset
        func sample(_ frame: Int, _ c: Int) -> Double {
            if frame < offset { return Double(last![c]) }
            return Double(samples[(frame - offset) * ch + c])
        }
        var out: [Int16] = []
        out.reserveCapacity(Int(Double(frames) / step + 2) * ch)
        var p = position
        while p <= Double(total - 1) {
            let i = Int(p)
            let f = p - Double(i)
            for c in 0..<ch {
                let a = sample(i, c)
                let v = i + 1 < total ? a + (sample(i + 1, c) - a) * f : a
                out.append(Int16(max(-32768, min(32767, v.rounded()))))
            }
            p += step
        }
        // Carry the position past the new last frame (which becomes y[0] of the next buffer).
        position = p - Double(total - 1)
        last = Array(samples[(frames - 1) * ch..<frames * ch])
        return out
    }
}
