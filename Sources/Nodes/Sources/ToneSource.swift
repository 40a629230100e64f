import Foundation
import PipelineCore

/// `tone-source`: a sine, silence or white noise at a level in dBFS (a full-scale sine is 0 dBFS,
/// as in AES17; noise has the RMS of a sine at that level).
public actor ToneSourceNode: Node {
    enum Wave: String { case sine, silence, noise }
    let wave: Wave
    let frequency: Double
    let level: Double
    let format: AudioFormat
    let durationMs: Int
    let realtime: Bool
    let frameMs: Int
    var rng: UInt64

    init(config c: NodeConfig) {
        wave = Wave(rawValue: c.string("wave", default: "sine")) ?? .sine
        frequency = c.double("frequency", default: 440)
        level = c.double("level_db", default: -20)
        format = AudioFormat(sampleRate: c.int("rate", default: 16000), channels: c.int("channels", default: 1))
        durationMs = c.int("duration_ms", default: 0)
        realtime = c.bool("realtime", default: true)
        frameMs = c.int("frame_ms", default: 20)
        rng = UInt64(c.int("seed", default: 1)) | 1
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

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "tone-source", summary: "Generates a sine, silence or white noise",
        family: "sources", inputs: [], outputs: [PortSpec("out", [.audio])],
        parameters: [
            ParamSpec("wave", .choice(["sine", "silence", "noise"]), default: .string("sine"), doc: "waveform"),
            ParamSpec("frequency", .double(1...200_000), default: .double(440), doc: "sine frequency in Hz"),
            ParamSpec("level_db", .double(-200...0), default: .double(-20), doc: "level in dBFS (full-scale sine = 0)"),
            ParamSpec("rate", .int(1000...384_000), default: .int(16000), doc: "sample rate"),
            ParamSpec("channels", .int(1...8), default: .int(1), doc: "channels (the same signal on each)"),
            ParamSpec("duration_ms", .int(0...), default: .int(0), doc: "length; 0 = endless"),
            ParamSpec("realtime", .bool, default: .bool(true), doc: "pace at 1x real time"),
            ParamSpec("frame_ms", .int(1...1000), default: .int(20), doc: "frame length in milliseconds"),
            ParamSpec("seed", .int, default: .int(1), doc: "noise generator seed"),
        ],
        format: .fromParameters(rate: 16000, channels: 1),
        defaultOverflow: .block,
        make: { ToneSourceNode(config: $0) })
}

extension ParamType {
    static func int(_ r: PartialRangeFrom<Int>) -> ParamType { .int(r.lowerBound...Int.max) }
}
