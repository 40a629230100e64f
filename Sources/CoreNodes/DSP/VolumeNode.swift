import Foundation
import PipelineCore

/// `volume`: a level meter. Audio passes through untouched; every `interval_ms` of audio it emits
/// `volume` with `db` (dBFS, AES17: a full-scale sine reads 0), `level` (`db` clamped to -40...0),
/// `rms` and `peak` (fractions of full scale) and `media_ms` (media time at the end of the interval).
public actor VolumeNode: FrameProcessor {
    let intervalMs: Int
    private var meter: LevelMeter?
    private var format: AudioFormat?
    private var origin: Int64 = 0

    init(configuration c: Configuration) {
        intervalMs = c.intervalMs
    }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        if let audio = frame.audio, !audio.samples.isEmpty {
            if format != audio.format || meter == nil {
                format = audio.format
                meter = LevelMeter(intervalSamples: max(1, audio.format.frames(ms: intervalMs)))
                origin = frame.pts
            }
            var readings: [LevelMeter.Reading] = []
            meter!.add(audio.samples, channels: audio.format.channels) { readings.append($0) }
            try await context.send(frame)
            let rate = audio.format.sampleRate
            for r in readings {
                let ms = MediaTime.millis(origin + MediaTime.nanos(samples: r.endSample, rate: rate))
                try await context.emit(.volume, [
                    ("db", .double(Self.round(r.db, 2))), ("level", .double(Self.round(r.level, 2))),
                    ("rms", .double(Self.round(r.rms, 6))), ("peak", .double(Self.round(r.peak, 6))),
                    ("media_ms", .int(ms)),
                ])
            }
        } else {
            try await context.send(frame)
        }
    }

    private static func round(_ v: Double, _ digits: Int) -> Double {
        let m = pow(10, Double(digits))
        return (v * m).rounded() / m
    }

    /// Configuration of `volume`.
    public struct Configuration: NodeConfiguration {
        /// Length of audio per `volume` event.
        public var intervalMs: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("interval_ms", .int(1...60_000), default: 100, doc: "length of audio per volume event"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "volume", summary: "Level meter: emits volume events (dBFS, level -40...0, rms, peak); audio passes through",
        family: "DSP",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.audio], required: false, doc: "the input audio, untouched"), .events],
        configuration: Configuration.self,
        format: .passthrough,
        fusable: true,
        make: { c, _ in VolumeNode(configuration: c) })
}
