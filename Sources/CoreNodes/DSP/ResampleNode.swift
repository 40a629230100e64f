import PipelineCore

/// `resample`: converts any sample rate and channel count to `rate` / `channels` with speexdsp's
/// streaming resampler (`quality` 0 fast ... 10 best). Filter state carries across frames, so frame
/// boundaries do not click; the filter's tail is flushed at end of stream. Marks ride on the output
/// frame made from the input frame that carried them.
public actor ResampleNode: FrameProcessor {
    let target: (rate: Int?, channels: Int?)
    let quality: Int
    private var converter: AudioConverter?
    private var outIndex: Int64 = 0
    private var started = false

    init(configuration c: Configuration) {
        target = (c.rate, c.channels)
        quality = c.quality
    }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        let output = AudioFormat(sampleRate: target.rate ?? audio.format.sampleRate,
                                 channels: target.channels ?? audio.format.channels)
        if converter?.input != audio.format {
            if let old = converter { try await emit(old.flush(), old.output, marks: .none, context: context) }
            converter = try AudioConverter(from: audio.format, to: output, quality: quality)
            if !started {
                started = true
                outIndex = frame.pts * Int64(output.sampleRate) / 1_000_000_000
            }
        }
        let samples = converter!.convert(audio.samples)
        try await emit(samples, output, marks: frame.marks, context: context)
    }

    public func finish(context: NodeContext) async throws {
        if let c = converter { try await emit(c.flush(), c.output, marks: .none, context: context) }
        converter = nil
    }

    private func emit(_ samples: [Int16], _ format: AudioFormat, marks: FrameMarks, context: NodeContext) async throws {
        guard !samples.isEmpty || !marks.isEmpty else { return }
        let frame = Frame.audio(samples, format: format, sampleIndex: outIndex, marks: marks)
        outIndex += Int64(samples.count / format.channels)
        try await context.send(frame)
    }

    /// Configuration of `resample`.
    public struct Configuration: NodeConfiguration {
        public var rate: Int
        public var channels: Int
        public var quality: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("rate", .int(1000...384_000), default: 16000, doc: "output sample rate"),
            ParamSpec("channels", .int(1...8), default: 1, doc: "output channels (average to mix down, copy to mix up)"),
            ParamSpec("quality", .int(0...10), default: 5, doc: "speexdsp resampler quality: 0 fastest ... 10 best"),
        ]
        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "resample", summary: "Converts sample rate and channel count (speexdsp resampler, streaming)",
        family: "DSP",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.audio])],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        fusable: true,
        make: { c, _ in ResampleNode(configuration: c) })
}
