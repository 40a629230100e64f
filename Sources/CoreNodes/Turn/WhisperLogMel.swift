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
    /// The periodic Hann window.
    private let window: [Float]
    private let dft: DFT400

    init(mels: Int = 80, samples: Int = 128_000) {
        self.mels = mels
        self.samples = samples
        filters = Self.filterbank(mels: mels)
        window = (0..<Self.fft).map { Float(0.5 - 0.5 * cos(2 * Double.pi * Double($0) / Double(Self.fft))) }
        dft = DFT400()
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
        var frame = [Float](repeating: 0, count: Self.fft)
        var scratch = DFT400.Scratch()
        for t in 0..<(total - 1) {
            let base = t * Self.hop
            // Padding at the start is constant: its spectrum is computed once.
            let first = x[base]
            var constant = true
            for n in 1..<Self.fft where x[base + n] != first { constant = false; break }
            if constant, let cached = cachedConstant, cached.value == first {
                power = cached.power
            } else {
                for n in 0..<Self.fft { frame[n] = x[base + n] * window[n] }
                dft.power(frame, into: &power, scratch: &scratch)
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

/// The power spectrum (bins 0...200) of 400 real samples: a Cooley–Tukey split into 25 transforms of
/// 16 points, twiddles, and 16 transforms of 25 points (16.4k complex products instead of 160k).
struct DFT400: Sendable {
    static let n1 = 16, n2 = 25, n = 400
    private let c16: [Float], s16: [Float], c25: [Float], s25: [Float], tc: [Float], ts: [Float]

    /// Working storage, reused between calls.
    struct Scratch {
        var re = [Float](repeating: 0, count: DFT400.n)
        var im = [Float](repeating: 0, count: DFT400.n)
    }

    init() {
        func table(_ size: Int, _ f: (Double) -> Double) -> [Float] {
            (0..<(size * size)).map { i in Float(f(2 * Double.pi * Double((i / size) * (i % size) % size) / Double(size))) }
        }
        c16 = table(Self.n1, cos); s16 = table(Self.n1, sin)
        c25 = table(Self.n2, cos); s25 = table(Self.n2, sin)
        var tc = [Float](repeating: 0, count: Self.n), ts = tc
        for a in 0..<Self.n2 {
            for k1 in 0..<Self.n1 {
                let angle = 2 * Double.pi * Double(a * k1) / Double(Self.n)
                tc[a * Self.n1 + k1] = Float(cos(angle)); ts[a * Self.n1 + k1] = Float(sin(angle))
            }
        }
        self.tc = tc; self.ts = ts
    }

    /// `power[k] = |X[k]|²` for k in 0...200, X[k] = Σ x[j] e^(-2πijk/400).
    func power(_ x: [Float], into power: inout [Float], scratch: inout Scratch) {
        let n1 = Self.n1, n2 = Self.n2
        // Stage 1: for each a (0..<25), the 16-point transform of x[25·b + a] over b, with twiddles.
        for a in 0..<n2 {
            for k1 in 0..<n1 {
                var re: Float = 0, im: Float = 0
                for b in 0..<n1 {
                    let v = x[n2 * b + a]
                    re += v * c16[b * n1 + k1]
                    im -= v * s16[b * n1 + k1]
                }
                let wc = tc[a * n1 + k1], ws = ts[a * n1 + k1]
                scratch.re[a * n1 + k1] = re * wc + im * ws
                scratch.im[a * n1 + k1] = im * wc - re * ws
            }
        }
        // Stage 2: for each k1, the 25-point transform over a gives X[k1 + 16·k2].
        for k1 in 0..<n1 {
            for k2 in 0..<n2 {
                let k = k1 + n1 * k2
                if k > 200 { continue }
                var re: Float = 0, im: Float = 0
                for a in 0..<n2 {
                    let r = scratch.re[a * n1 + k1], i = scratch.im[a * n1 + k1]
                    let c = c25[a * n2 + k2], s = s25[a * n2 + k2]
                    re += r * c + i * s
                    im += i * c - r * s
                }
                power[k] = re * re + im * im
            }
        }
    }
}
