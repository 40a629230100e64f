import Foundation

/// TensorFlow Lite Micro's audio front end, in the configuration microWakeWord's models are trained on
/// (as the `pymicro-features` package sets it): 16 kHz int16 audio, a 30 ms Hann window every 10 ms,
/// a 512-point fixed-point FFT, 40 mel channels from 125 to 7500 Hz, per-channel noise reduction,
/// per-channel automatic gain (PCAN) and a log scale; one frame of 40 unsigned 16-bit values per 10 ms.
///
/// Everything after the window tables is integer arithmetic, reproduced operation by operation
/// (including the 16-bit fixed-point FFT's rounding and wrap-around), because the models were trained
/// on exactly these numbers: the output equals `pymicro_features.MicroFrontend`'s bit for bit (a test
/// checks it). The tables are computed at start from their defining formulas, in single precision
/// where the original computes them so.
///
/// Not thread-safe: one front end belongs to one detector.
final class MicroFrontend {
    static let channels = 40
    static let windowSize = 480
    static let step = 160
    static let fftSize = 512
    /// FFT bins whose energy reaches a channel.
    static let firstBin = 5, lastBin = 240

    private var window = [Int16](repeating: 0, count: MicroFrontend.windowSize)
    private var filled = 0
    private var pending: [Int16] = []
    /// Each channel's running noise estimate (noise reduction's state, also PCAN's input).
    private var noise = [UInt32](repeating: 0, count: MicroFrontend.channels)

    private var windowed = [Int16](repeating: 0, count: MicroFrontend.windowSize)
    private var accumulators = [UInt64](repeating: 0, count: MicroFrontend.channels + 1)
    private var fft = FixedFFT()

    /// Feeds samples; calls `frame` with each completed 10 ms frame (the first after 30 ms).
    func process(_ samples: [Int16], frame: ([UInt16]) throws -> Void) rethrows {
        pending.append(contentsOf: samples)
        var offset = 0
        while pending.count - offset >= Self.step {
            let take = min(Self.windowSize - filled, Self.step)
            for i in 0..<take { window[filled + i] = pending[offset + i] }
            filled += take
            offset += Self.step
            if filled == Self.windowSize {
                try frame(compute())
                window.replaceSubrange(0..<(Self.windowSize - Self.step), with: window[Self.step...])
                filled = Self.windowSize - Self.step
            }
        }
        if offset > 0 { pending.removeFirst(offset) }
    }

    /// Forgets the audio and the noise estimates (a fresh start).
    func reset() {
        filled = 0
        pending.removeAll()
        for i in noise.indices { noise[i] = 0 }
    }

    private func compute() -> [UInt16] {
        let t = Tables.shared
        // Window (Q12), and the largest magnitude for the FFT's input scaling. A windowed −32768 is not
        // counted: its 16-bit negation is itself.
        var peak: Int16 = 0
        for n in 0..<Self.windowSize {
            let w = Int16(truncatingIfNeeded: (Int32(window[n]) * Int32(t.window[n])) >> 12)
            windowed[n] = w
            let a = w < 0 ? 0 &- w : w
            if a > peak { peak = a }
        }
        let shift = 15 - Self.bitLength(UInt32(UInt16(bitPattern: peak)))
        fft.forward(windowed, shift: shift, tables: t)

        // Energy of the bins in use, into triangular mel channels (unsigned 64-bit, wrapping as the
        // original's accumulators do).
        for c in accumulators.indices { accumulators[c] = 0 }
        for k in Self.firstBin...Self.lastBin {
            let (re, im) = fft.spectrum[k]
            let energy = Int32(re) &* Int32(re) &+ Int32(im) &* Int32(im)
            let e = UInt64(bitPattern: Int64(energy))
            let band = Int(t.band[k])
            accumulators[band] &+= UInt64(t.weight[k]) &* e
            if band < Self.channels { accumulators[band + 1] &+= UInt64(t.unweight[k]) &* e }
        }

        var out = [UInt16](repeating: 0, count: Self.channels)
        for c in 0..<Self.channels {
            var s = Self.squareRoot(accumulators[c + 1]) >> UInt32(shift)
            // Noise reduction: subtract a slowly tracking estimate (even and odd channels track at
            // different rates), keeping at least 5 % of the signal.
            let smoothing: UInt64 = c % 2 == 0 ? 409 : 983
            let up = s << 10
            var estimate = UInt32(truncatingIfNeeded: (UInt64(up) * smoothing + UInt64(noise[c]) * (16384 - smoothing)) >> 14)
            noise[c] = estimate
            if estimate > up { estimate = up }
            let floor = UInt32(truncatingIfNeeded: (UInt64(s) * 819) >> 14)
            s = max((up - estimate) >> 10, floor)
            // PCAN: a gain falling with the noise estimate, then a soft shrink.
            let gain = UInt64(UInt16(bitPattern: t.gain(noise[c])))
            let snr = UInt32(truncatingIfNeeded: (UInt64(s) * gain) >> 6)
            s = snr < 8192 ? (snr &* snr) >> 20 : (snr >> 6) &- 64
            // Log scale (the front end's +3 bit correction first).
            let v = s << 3
            out[c] = v > 1 ? UInt16(min(Self.log(v, tables: t), 65535)) : 0
        }
        return out
    }

    static func bitLength(_ x: UInt32) -> Int { 32 - x.leadingZeroBitCount }

    /// The square root rounded to the nearest integer, kept within 16 bits for inputs under 2³² (and
    /// within 32 bits above), as the original's bitwise square root computes it.
    static func squareRoot(_ n: UInt64) -> UInt32 {
        if n == 0 { return 0 }
        var r = UInt64(Double(n).squareRoot())
        while r > 0 && r.multipliedReportingOverflow(by: r).overflow || r * r > n { r -= 1 }
        while true {
            let next = r + 1
            let (sq, overflow) = next.multipliedReportingOverflow(by: next)
            if overflow || sq > n { break }
            r = next
        }
        let cap: UInt64 = n < (1 << 32) ? 0xFFFF : 0xFFFF_FFFF
        if n - r * r > r && r != cap { r += 1 }
        return UInt32(r)
    }

    /// 64 · ln(v), from a 128-segment table of log2's fraction (Q16) and interpolation.
    static func log(_ v: UInt32, tables t: Tables) -> UInt32 {
        let integer = bitLength(v) - 1
        var f = Int32(bitPattern: v &- (UInt32(1) << UInt32(integer)))
        if integer < 16 { f <<= Int32(16 - integer) } else { f >>= Int32(integer - 16) }
        let segment = Int(f >> 9)
        let c0 = Int32(t.log2Fraction[segment]), c1 = Int32(t.log2Fraction[segment + 1])
        let relative = ((c1 - c0) &* (f - 512 * Int32(segment))) >> 16
        let log2 = (UInt32(integer) << 16) &+ UInt32(bitPattern: f + c0 + relative)
        let ln = UInt32(truncatingIfNeeded: (UInt64(45426) * UInt64(log2) + 32768) >> 16)
        return ((ln << 6) &+ 32768) >> 16
    }

    /// The window, filterbank, gain and log tables, computed once.
    struct Tables: Sendable {
        static let shared = Tables()

        let window: [Int16]
        /// Per FFT bin: its mel band (0...40) and its weights in that band and the one before (Q12).
        let band: [UInt8]
        let weight: [Int16]
        let unweight: [Int16]
        /// PCAN's gain curve: exact values at 0, 1, 2, then per octave k a quadratic (y0, a1, a2).
        let gainStart: [Int16]
        let gainCurve: [(y0: Int16, a1: Int16, a2: Int16)]
        let log2Fraction: [UInt16]
        /// The 256-point complex FFT's twiddles and the real split's super-twiddles (Q15).
        let twiddles: [(Int16, Int16)]
        let superTwiddles: [(Int16, Int16)]

        init() {
            // Hann window, computed in single precision as the original does.
            let arg = Float(Double.pi * 2 / Double(MicroFrontend.windowSize))
            window = (0..<MicroFrontend.windowSize).map { n in
                let v = Float(0.5) - Float(0.5) * cosf(arg * (Float(n) + 0.5))
                return Int16((v * 4096 + 0.5).rounded(.down))
            }

            // Mel filterbank: 41 bands evenly spaced in mel between 125 and 7500 Hz over the bins of a
            // 512-point spectrum (31.25 Hz apart); a bin's weight belongs to its band, its unweight to
            // the band before.
            func mel(_ f: Float) -> Float { 1127 * log1pf(f / 700) }
            let bands = MicroFrontend.channels + 1
            let hzPerBin = Float(0.5) * 16000 / Float(MicroFrontend.fftSize / 2)
            let melLow = mel(125), melHigh = mel(7500)
            let spacing = (melHigh - melLow) / Float(bands)
            let centres = (0..<bands).map { melLow + spacing * Float($0 + 1) }
            var band = [UInt8](repeating: 0, count: MicroFrontend.fftSize / 2 + 1)
            var weight = [Int16](repeating: 0, count: band.count)
            var unweight = [Int16](repeating: 0, count: band.count)
            var bin = Int(Float(1.5) + 125 / hzPerBin)
            for b in 0..<bands {
                let below = b == 0 ? melLow : centres[b - 1]
                while bin < band.count && mel(Float(bin) * hzPerBin) <= centres[b] {
                    let w = (centres[b] - mel(Float(bin) * hzPerBin)) / (centres[b] - below)
                    band[bin] = UInt8(b)
                    weight[bin] = Int16((w * 4096 + 0.5).rounded(.down))
                    unweight[bin] = Int16(((1 - w) * 4096 + 0.5).rounded(.down))
                    bin += 1
                }
            }
            self.band = band
            self.weight = weight
            self.unweight = unweight

            // PCAN gain: 2^21 · (x / 2^7 + 80)^−0.95 in single precision, tabulated per octave.
            func gain(_ x: UInt32) -> Int16 {
                let g = Float(1 << 21) * powf(Float(x) / Float(1 << 7) + 80, -Float(0.95))
                return g > 32767 ? 32767 : Int16(g + 0.5)
            }
            var curve: [(y0: Int16, a1: Int16, a2: Int16)] = [(0, 0, 0), (0, 0, 0)]
            for k in 2...32 {
                let x0 = UInt32(1) << UInt32(k - 1)
                let x1 = x0 + x0 / 2
                let x2 = k == 32 ? UInt32.max : 2 * x0
                let y0 = gain(x0), y1 = gain(x1), y2 = gain(x2)
                let d1 = y1 &- y0, d2 = y2 &- y0
                let a1 = 4 &* d1 &- d2
                curve.append((y0, a1, d2 &- a1))
            }
            gainStart = [gain(0), gain(1), curve[2].y0]
            gainCurve = curve

            // log2(1 + x) − x at 129 points of [0, 1] (Q16), and a zero beyond for the interpolation.
            log2Fraction = (0...128).map { i in
                let x = Double(i) / 128
                return UInt16((65536 * (Foundation.log2(1 + x) - x)).rounded())
            } + [0]

            let m = MicroFrontend.fftSize / 2
            func q15(_ phase: Double) -> (Int16, Int16) {
                (Int16((0.5 + 32767 * cos(phase)).rounded(.down)), Int16((0.5 + 32767 * sin(phase)).rounded(.down)))
            }
            let pi = 3.14159265358979323846264338327
            twiddles = (0..<m).map { q15(-2 * pi * Double($0) / Double(m)) }
            superTwiddles = (0..<(m / 2)).map { q15(-pi * (Double($0 + 1) / Double(m) + 0.5)) }
        }

        /// PCAN's gain for a noise estimate: quadratic interpolation within the estimate's octave.
        func gain(_ x: UInt32) -> Int16 {
            if x <= 2 { return gainStart[Int(x)] }
            let k = MicroFrontend.bitLength(x)
            let (y0, a1, a2) = gainCurve[k]
            let frac = Int32(bitPattern: (k < 11 ? x << UInt32(11 - k) : x >> UInt32(k - 11)) & 0x3FF)
            var r = (Int32(a2) * frac) >> 5
            r = (r + Int32(a1) * 32) &* frac
            r = ((r &+ 16384) >> 15) &+ Int32(y0)
            return Int16(truncatingIfNeeded: r)
        }
    }
}

/// kissfft's 16-bit fixed-point real FFT of 512 points (a 256-point complex FFT by four radix-4
/// stages, then the real split), with its rounding and wrap-around, scaled by about 1/512.
struct FixedFFT {
    typealias Complex = (re: Int16, im: Int16)
    private var z = [Complex](repeating: (0, 0), count: MicroFrontend.fftSize / 2)
    private var out = [Complex](repeating: (0, 0), count: MicroFrontend.fftSize / 2)
    /// The last ``forward(_:shift:tables:)``'s result, bins 0...256 (kept: no array per frame).
    private(set) var spectrum = [Complex](repeating: (0, 0), count: MicroFrontend.fftSize / 2 + 1)

    @inline(__always) static func round(_ p: Int32) -> Int16 { Int16(truncatingIfNeeded: (p &+ 16384) >> 15) }
    @inline(__always) static func wrap(_ x: Int32) -> Int16 { Int16(truncatingIfNeeded: x) }
    @inline(__always) static func scale(_ c: Complex, _ k: Int32) -> Complex { (round(Int32(c.re) * k), round(Int32(c.im) * k)) }
    @inline(__always) static func multiply(_ a: Complex, _ b: (Int16, Int16)) -> Complex {
        (round(Int32(a.re) * Int32(b.0) &- Int32(a.im) * Int32(b.1)), round(Int32(a.re) * Int32(b.1) &+ Int32(a.im) * Int32(b.0)))
    }
    @inline(__always) static func add(_ a: Complex, _ b: Complex) -> Complex { (wrap(Int32(a.re) + Int32(b.re)), wrap(Int32(a.im) + Int32(b.im))) }
    @inline(__always) static func sub(_ a: Complex, _ b: Complex) -> Complex { (wrap(Int32(a.re) - Int32(b.re)), wrap(Int32(a.im) - Int32(b.im))) }

    /// Computes ``spectrum`` of `samples` shifted left by `shift` and zero-padded to 512.
    mutating func forward(_ samples: [Int16], shift: Int, tables t: MicroFrontend.Tables) {
        let n = MicroFrontend.fftSize / 2
        for i in 0..<n {
            let a = 2 * i, b = 2 * i + 1
            z[i] = (a < samples.count ? Int16(truncatingIfNeeded: Int32(samples[a]) << Int32(shift)) : 0,
                    b < samples.count ? Int16(truncatingIfNeeded: Int32(samples[b]) << Int32(shift)) : 0)
        }
        work(output: 0, input: 0, stride: 1, tables: t)

        // Split the complex transform of the interleaved samples into the real signal's spectrum.
        let dc = Self.scale(out[0], 16383)
        spectrum[0] = (Self.wrap(Int32(dc.re) + Int32(dc.im)), 0)
        spectrum[n] = (Self.wrap(Int32(dc.re) - Int32(dc.im)), 0)
        for k in 1...(n / 2) {
            let fpk = Self.scale(out[k], 16383)
            let mirrored = out[n - k]
            let fpnk = Self.scale((mirrored.re, 0 &- mirrored.im), 16383)
            let f1 = Self.add(fpk, fpnk), f2 = Self.sub(fpk, fpnk)
            let tw = Self.multiply(f2, t.superTwiddles[k - 1])
            spectrum[k] = (Self.wrap((Int32(f1.re) + Int32(tw.re)) >> 1), Self.wrap((Int32(f1.im) + Int32(tw.im)) >> 1))
            spectrum[n - k] = (Self.wrap((Int32(f1.re) - Int32(tw.re)) >> 1), Self.wrap((Int32(tw.im) - Int32(f1.im)) >> 1))
        }
    }

    /// One level of the decimation in time: four sub-transforms of a quarter of the points, then the
    /// radix-4 butterflies combining them.
    private mutating func work(output o: Int, input i: Int, stride: Int, tables t: MicroFrontend.Tables) {
        let m = MicroFrontend.fftSize / 2 / (4 * stride)
        if m == 1 {
            for q in 0..<4 { out[o + q] = z[i + q * stride] }
        } else {
            for q in 0..<4 { work(output: o + q * m, input: i + q * stride, stride: 4 * stride, tables: t) }
        }
        for k in 0..<m {
            let f0 = Self.scale(out[o + k], 8191)
            let f1 = Self.scale(out[o + k + m], 8191)
            let f2 = Self.scale(out[o + k + 2 * m], 8191)
            let f3 = Self.scale(out[o + k + 3 * m], 8191)
            let s0 = Self.multiply(f1, t.twiddles[k * stride])
            let s1 = Self.multiply(f2, t.twiddles[2 * k * stride])
            let s2 = Self.multiply(f3, t.twiddles[3 * k * stride])
            let s5 = Self.sub(f0, s1)
            let g0 = Self.add(f0, s1)
            let s3 = Self.add(s0, s2), s4 = Self.sub(s0, s2)
            out[o + k + 2 * m] = Self.sub(g0, s3)
            out[o + k] = Self.add(g0, s3)
            out[o + k + m] = (Self.wrap(Int32(s5.re) + Int32(s4.im)), Self.wrap(Int32(s5.im) - Int32(s4.re)))
            out[o + k + 3 * m] = (Self.wrap(Int32(s5.re) - Int32(s4.im)), Self.wrap(Int32(s5.im) + Int32(s4.re)))
        }
    }
}
