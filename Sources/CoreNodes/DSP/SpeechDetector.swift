import Foundation
import PipelineCore

/// Classifies audio as speech or not, block by block: speexdsp's preprocessor (denoise + VAD
/// probability) combined with an energy test against a tracked noise floor.
///
/// Analysis runs on a 16 kHz mono copy (the input is converted when needed; the caller's audio is
/// never changed) in blocks of `blockMs`. A block is speech when its energy is above an absolute
/// floor and `marginDB` above the noise floor (the minimum block energy over the last ~2 s), and
/// either speexdsp's speech probability reaches `probability` or the energy is `strongMarginDB`
/// above the floor. Steady noise raises the floor, so it stops counting as speech within ~2 s.
///
/// Not thread-safe: one detector belongs to one node.
public final class SpeechDetector {
    /// Tunable thresholds.
    public struct Thresholds: Sendable, Hashable {
        /// Blocks quieter than this (dBFS) are silence.
        public var absoluteFloorDB: Double = -55
        /// Needed energy above the noise floor.
        public var marginDB: Double = 6
        /// Energy above the floor that counts as speech whatever speexdsp says.
        public var strongMarginDB: Double = 15
        /// speexdsp speech probability (0...100) that confirms a block.
        public var probability: Int32 = 50
        /// Creates the defaults.
        public init() {}
    }

    /// Analysis rate.
    public static let analysisRate = 16000
    let blockSamples: Int
    let thresholds: Thresholds
    private let denoiser: SpeexDenoiser
    private var blocks: AnalysisBlocks
    private var block: [Int16]
    private var floor = NoiseFloor()

    /// Last block's energy (dBFS), noise floor and speexdsp probability, for diagnostics.
    public private(set) var last: (db: Double, floor: Double, probability: Int32) = (-120, -120, 0)

    /// Creates a detector with blocks of `blockMs` (10 or 20 recommended).
    public init(blockMs: Int = 20, thresholds: Thresholds = Thresholds()) throws {
        blockSamples = Self.analysisRate * blockMs / 1000
        blocks = AnalysisBlocks(blockSamples: blockSamples)
        self.thresholds = thresholds
        block = [Int16](repeating: 0, count: blockSamples)
        denoiser = try SpeexDenoiser(blockSamples: blockSamples, rate: Self.analysisRate, code: .vadFailed)
    }

    /// Feeds interleaved input audio whose first sample is input sample `position`; calls `decide`
    /// for each completed block with its range in input samples.
    public func feed(_ samples: [Int16], format: AudioFormat, position: Int64,
                     decide: (_ speech: Bool, _ from: Int64, _ to: Int64) throws -> Void) throws {
        try blocks.feed(samples, format: format, position: position) { analysis, from, to in
            for i in 0..<blockSamples { block[i] = analysis[analysis.startIndex + i] }
            try decide(classify(), from, to)
        }
    }

    private func classify() -> Bool {
        var sum = 0.0
        for v in block { let d = Double(v); sum += d * d }
        let db = LevelMeter.dbfs(rms: (sum / Double(blockSamples)).squareRoot())
        let noise = floor.update(db)
        block.withUnsafeMutableBufferPointer { denoiser.run($0.baseAddress!) }
        let prob = denoiser.speechProbability
        last = (db, noise, prob)
        let t = thresholds
        guard db > t.absoluteFloorDB, db > noise + t.marginDB else { return false }
        return prob >= t.probability || db > noise + t.strongMarginDB
    }
}

/// Cuts input audio into blocks of 16 kHz mono analysis audio (a converted copy when the input
/// differs; the caller's audio is never changed) and maps each block back to its range of input
/// samples, for the `vad` engines.
struct AnalysisBlocks {
    /// Analysis rate.
    static let rate = 16000
    /// Samples per block.
    let blockSamples: Int
    private var converter: AudioConverter?
    private var inputFormat: AudioFormat?
    private var pending: [Int16] = []
    /// Analysis samples consumed so far (aligned to input positions by rate ratio).
    private var analysed: Int64 = 0
    /// Input samples (per channel) whose analysis counterpart starts at `analysed == 0`.
    private var inputOrigin: Int64 = 0

    init(blockSamples: Int) { self.blockSamples = blockSamples }

    /// Feeds interleaved input audio whose first sample is input sample `position`; calls `block`
    /// with each completed block and its range in input samples.
    mutating func feed(_ samples: [Int16], format: AudioFormat, position: Int64,
                       block: (_ analysis: ArraySlice<Int16>, _ from: Int64, _ to: Int64) throws -> Void) throws {
        if format != inputFormat {
            inputFormat = format
            let analysis = AudioFormat(sampleRate: Self.rate, channels: 1)
            converter = format == analysis ? nil : try AudioConverter(from: format, to: analysis, quality: 3)
            pending.removeAll(keepingCapacity: true)
            analysed = 0
            inputOrigin = position
        }
        if let converter { pending.append(contentsOf: converter.convert(samples)) } else { pending.append(contentsOf: samples) }
        let rate = Int64(format.sampleRate)
        var offset = 0
        defer { if offset > 0 { pending.removeFirst(offset) } }
        while pending.count - offset >= blockSamples {
            let from = inputOrigin + analysed * rate / Int64(Self.rate)
            analysed += Int64(blockSamples)
            let to = inputOrigin + analysed * rate / Int64(Self.rate)
            let range = offset..<(offset + blockSamples)
            offset += blockSamples
            try block(pending[range], from, to)
        }
    }
}

/// Minimum of block energies over a sliding window (kept as the minima of 8 sub-windows).
struct NoiseFloor: Sendable, Hashable {
    private var minima = [Double](repeating: .infinity, count: 8)
    private var index = 0
    private var current = Double.infinity
    private var filled = 0
    /// Blocks per sub-window (12 blocks of 20 ms = 240 ms; 8 of them ~ 2 s).
    var subWindow = 12

    /// Adds a block's energy and returns the floor (the floor before this block is included,
    /// so a first loud block is not its own floor).
    mutating func update(_ db: Double) -> Double {
        var floor = current
        for m in minima where m < floor { floor = m }
        if floor == .infinity { floor = db - 100 }
        current = min(current, db)
        filled += 1
        if filled == subWindow {
            minima[index] = current
            index = (index + 1) % minima.count
            current = .infinity
            filled = 0
        }
        return floor
    }
}
