import Foundation

/// Whisper's log-mel features as its feature extractor computes them for a fixed window: 16 kHz
/// audio, zero-mean unit-variance normalized, a centred (reflect-padded) short-time Fourier
/// transform with a 400-sample periodic Hann window and a 160-sample hop, power spectra projected
/// on `mels` Slaney-normalized triangular filters (Slaney mel scale, 0–8000 Hz), log10 floored at
/// 1e-10, the last frame dropped, clamped to 8 below the maximum and scaled as (x + 4) / 4.
///
/// For `samples` input samples the result has `mels × samples / 160` values, mel-major
/// (`[mel][frame]`), as the model's `input_features` tensor wants them.
struct WhisperLogMel: Sendable {
    static let fft = 400
    static let hop = 160
    static let bins = fft / 2 + 1
    let mels: Int
    let samples: Int
    /// `bins × mels` filter weights, bin-major.
    private let filters: [Float]
    /// Hann-windowed cosine and sine tables, `bins × fft`.
    private let cosTable: [Float]
    private let sinTable: [Float]

    init(mels: Int = 80, samples: Int = 128_000) {
        self.mels = mels
        self.samples = samples
        filters = Self.filterbank(mels: mels)
        var c = [Float](repeating: 0, count: Self.bins * Self.fft)
        var s = c
        for k in 0..<Self.bins {
            for n in 0..<Self.fft {
                let hann = 0.5 - 0.5 * cos(2 * Double.pi * Double(n) / Double(Self.fft))
                let angle = 2 * Double.pi * Double(k * n % Self.fft) / Double(Self.fft)
                c[k * Self.fft + n] = Float(hann * cos(angle))
                s[k * Self.fft + n] = Float(hann * sin(angle))
            }
        }
        cosTable = c
        sinTable = s
    }

    /// Frames in the output.
    var frames: Int { samples / Self.hop }

    /// Features of `audio` (exactly `samples` values in -1...1).
    func features(_ audio: [Float]) -> [Float] {
        precondition(audio.count == samples, "WhisperLogMel wants exactly \(samples) samples")
        // Normalization in single precision over the whole window, as the reference does.
        var mean: Float = 0
        for v in audio { mean += v }
        mean /= Float(samples)
        var variance: Float = 0
        for v in audio { let d = v - mean; variance += d * d }
        variance /= Float(samples)
        let scale = 1 / (variance + 1e-7).squareRoot()
        let pad = Self.fft / 2
        var x = [Float](repeating: 0, count: samples + 2 * pad)
        for i in 0..<samples { x[pad + i] = (audio[i] - mean) * scale }
        for i in 0..<pad {
            x[pad - 1 - i] = x[pad + 1 + i]
            x[pad + samples + i] = x[pad + samples - 2 - i]
        }
        let total = samples / Self.hop + 1
        var out = [Float](repeating: 0, count: mels * frames)
        var power = [Float](repeating: 0, count: Self.bins)
        var cachedConstant: (value: Float, power: [Float])?
        var peak = -Float.infinity
        x.withUnsafeBufferPointer { xs in
            cosTable.withUnsafeBufferPointer { ct in
                sinTable.withUnsafeBufferPointer { st in
                    for t in 0..<(total - 1) {
                        let w = xs.baseAddress! + t * Self.hop
                        // Padding at the start is constant: its spectrum is computed once.
                        var constant = true
                        let first = w[0]
                        for n in 1..<Self.fft where w[n] != first { constant = false; break }
                        if constant, let cached = cachedConstant, cached.value == first {
                            power = cached.power
                        } else {
                            for k in 0..<Self.bins {
                                var re: Float = 0, im: Float = 0
                                let cr = ct.baseAddress! + k * Self.fft, sr = st.baseAddress! + k * Self.fft
                                for n in 0..<Self.fft {
                                    re += w[n] * cr[n]
                                    im += w[n] * sr[n]
                                }
                                power[k] = re * re + im * im
                            }
                            if constant { cachedConstant = (first, power) }
                        }
                        for m in 0..<mels {
                            var e: Float = 0
                            for k in 0..<Self.bins { e += filters[k * mels + m] * power[k] }
                            let v = log10(max(e, 1e-10))
                            out[m * frames + t] = v
                            if v > peak { peak = v }
                        }
                    }
                }
            }
        }
        let floor = peak - 8
        for i in 0..<out.count { out[i] = (max(out[i], floor) + 4) / 4 }
        return out
    }

    /// Slaney mel scale.
    static func hzToMel(_ f: Double) -> Double {
        f < 1000 ? 3 * f / 200 : 15 + log(f / 1000) * 27 / log(6.4)
    }

    static func melToHz(_ m: Double) -> Double {
        m < 15 ? 200 * m / 3 : 1000 * exp(log(6.4) / 27 * (m - 15))
    }

    /// Triangular filters over 0–8000 Hz with Slaney area normalization, `bins × mels`.
    static func filterbank(mels: Int) -> [Float] {
        let lo = hzToMel(0), hi = hzToMel(8000)
        let edges = (0..<(mels + 2)).map { melToHz(lo + (hi - lo) * Double($0) / Double(mels + 1)) }
        var w = [Float](repeating: 0, count: bins * mels)
        for k in 0..<bins {
            let f = 8000 * Double(k) / Double(bins - 1)
            for m in 0..<mels {
                let down = (f - edges[m]) / (edges[m + 1] - edges[m])
                let up = (edges[m + 2] - f) / (edges[m + 2] - edges[m + 1])
                let norm = 2 / (edges[m + 2] - edges[m])
                w[k * mels + m] = Float(max(0, min(down, up)) * norm)
            }
        }
        return w
    }
}
