import Foundation
import PipelineCore

/// `tone-source`: a sine, silence or white noise at a level in dBFS (a full-scale sine is 0 dBFS,
/// as in AES17; noise has the RMS of a sine at that level).
public actor ToneSourceNode: Node {
    /// Waveform of `tone-source`.
    public enum Wave: String, Sendable, Decodable, CaseIterable { case sine, silence, noise }
    let wave: Wave
    let frequency: Double
    let level: Double
    let format: AudioFormat
    let durationMs: Int
    let realtime: Bool
    let frameMs: Int
    var rng: UInt64

    init(configuration c: Configuration) {
        wave = c.wave
        frequency = c.frequency
        level = c.levelDb
        format = c.format
        durationMs = c.durationMs
        realtime = c.realtime
        frameMs = c.frameMs
        rng = UInt64(bitPattern: Int64(c.seed)) | 1
    }

    /// Standard normal deviate (Box–Muller on a xorshift generator; deterministic per seed).
    private func gaussian() -> Double {
        func uniform() -> Double {
            rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17
            return (Double(rng >> 11) + 0.5) / Double(1 << 53)
        }
        return sqrt(-2 * log(uniform())) * cos(2 * .pi * uniform())
    }

    public func run(_ context: NodeContext) async throws {
        let frames = format.frames(ms: frameMs)
        let totalFrames: Int64? = durationMs > 0 ? Int64(format.sampleRate) * Int64(durationMs) / 1000 : nil
        let amplitude = 32767 * pow(10, level / 20)
        var index: Int64 = 0
        let pacer = context.makePacer()
        let out = context.output()
        var samples = [Int16](repeating: 0, count: frames * format.channels)
        while !Task.isCancelled {
            var n = frames
            if let totalFrames {
                if index >= totalFrames { break }
                n = Int(min(Int64(frames), totalFrames - index))
            }
            if samples.count != n * format.channels { samples = [Int16](repeating: 0, count: n * format.channels) }
            for i in 0..<n {
                let v: Double
                switch wave {
                case .sine: v = amplitude * sin(2 * .pi * frequency * Double(index + Int64(i)) / Double(format.sampleRate))
                case .silence: v = 0
                case .noise: v = amplitude / 2.0.squareRoot() * gaussian()
                }
                let s = Int16(max(-32768, min(32767, v.rounded())))
                for c in 0..<format.channels { samples[i * format.channels + c] = s }
            }
            let frame = Frame.audio(samples, format: format, sampleIndex: index)
            index += Int64(n)
            if realtime {
                try await pacer.wait(until: .nanoseconds(MediaTime.nanos(samples: index, rate: format.sampleRate)))
            }
            try await out.send(frame)
            if let totalFrames { context.reportProgress(position: Double(index) / Double(format.sampleRate), total: Double(totalFrames) / Double(format.sampleRate)) }
        }
    }

    /// Configuration of `tone-source`.
    public struct Configuration: NodeConfiguration {
        public var wave: Wave
        public var frequency: Double
        public var levelDb: Double
        public var rate: Int
        public var channels: Int
        public var durationMs: Int
        public var realtime: Bool
        public var frameMs: Int
        public var seed: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("wave", .choice(Wave.allCases.map(\.rawValue)), default: "sine", doc: "waveform"),
            ParamSpec("frequency", .double(1...200_000), default: 440.0, doc: "sine frequency in Hz"),
            ParamSpec("level_db", .double(-200...0), default: -20.0, doc: "level in dBFS (full-scale sine = 0)"),
            ParamSpec("rate", .int(1000...384_000), default: 16000, doc: "sample rate"),
            ParamSpec("channels", .int(1...8), default: 1, doc: "channels (the same signal on each)"),
            // Bounded so that the length in samples cannot overflow (about 1,000 days at 384 kHz).
            ParamSpec("duration_ms", .int(0...86_400_000_000), default: 0, doc: "length; 0 = endless"),
            ParamSpec("realtime", .bool, default: true, doc: "pace at 1x real time"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "frame length in milliseconds"),
            ParamSpec("seed", .int, default: 1, doc: "noise generator seed"),
        ]
        /// Paced at 1x, the source is timing-critical; read as fast as possible, it is bulk work.
        public var executor: ExecutorClass? { realtime ? .realtime : .bulk }

        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "tone-source", summary: "Generates a sine, silence or white noise",
        family: "sources", inputs: [], outputs: [PortSpec("out", [.audio])],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        defaultOverflow: .block,
        executor: .realtime,
        make: { c, _ in ToneSourceNode(configuration: c) })
}
