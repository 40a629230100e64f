import Foundation
import PipelineCore

/// Accumulates the RMS and peak of s16 audio over fixed intervals (a pure value; no allocation per sample).
///
/// Levels follow AES17: a full-scale sine reads 0 dBFS, so `db = 20*log10(rms/32768) + 3.01`.
///
/// ```swift
/// var meter = LevelMeter(intervalSamples: 1600)       // 100 ms at 16 kHz
/// meter.add(samples, channels: 1) { reading in print(reading.db) }
/// ```
public struct LevelMeter: Sendable {
    /// One interval's measurement.
    public struct Reading: Sendable, Hashable {
        /// Level in dBFS (AES17), at least -120.
        public var db: Double
        /// `db` clamped to -40...0 (the scale recognizer SDKs report).
        public var level: Double
        /// RMS as a fraction of full scale (0...1).
        public var rms: Double
        /// Peak absolute sample as a fraction of full scale (0...1).
        public var peak: Double
        /// Index (per channel) of the sample that ends the interval.
        public var endSample: Int64
    }

    /// Per-channel samples per interval.
    public let intervalSamples: Int
    private var sumSquares: Double = 0
    private var peak: Int32 = 0
    private var count = 0
    private var position: Int64 = 0

    /// Creates a meter that reports every `intervalSamples` samples per channel.
    public init(intervalSamples: Int) {
        precondition(intervalSamples > 0, "interval must hold at least one sample")
        self.intervalSamples = intervalSamples
    }

    /// AES17 dBFS of an RMS given in sample units (full scale 32768).
    @inlinable public static func dbfs(rms: Double) -> Double {
        max(-120, 20 * log10(max(rms, 1e-9) / 32768) + 3.0103)
    }

    /// Adds interleaved samples; calls `report` for every interval completed.
    public mutating func add(_ samples: [Int16], channels: Int, report: (Reading) throws -> Void) rethrows {
        let ch = max(channels, 1)
        let frames = samples.count / ch
        var f = 0
        try samples.withUnsafeBufferPointer { buf in
            while f < frames {
                let n = min(frames - f, intervalSamples - count)
                var s = 0.0
                var p = peak
                for i in (f * ch)..<((f + n) * ch) {
                    let v = Int32(buf[i])
                    s += Double(v * v)
                    let a = abs(v)
                    if a > p { p = a }
                }
                sumSquares += s
                peak = p
                count += n
                f += n
                position += Int64(n)
                if count == intervalSamples {
                    let rms = (sumSquares / Double(count * ch)).squareRoot()
                    let db = Self.dbfs(rms: rms)
                    try report(Reading(db: db, level: min(0, max(-40, db)), rms: rms / 32768,
                                       peak: Double(peak) / 32768, endSample: position))
                    sumSquares = 0; peak = 0; count = 0
                }
            }
        }
    }
}
