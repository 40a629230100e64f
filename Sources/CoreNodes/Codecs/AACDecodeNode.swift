import PipelineCore

/// `aac-decode`: AAC-LC access units (codec `aac`, from `aac-encode` or `rtp-receive codec: aac`) to s16
/// audio at `rate`/`channels`, with FFmpeg's AAC decoder.
///
/// The stream's own rate and channel count come with the packets (their `format`), else from `rate` and
/// `channels`; the decoder is configured for AAC-LC with them, and its output is converted to `rate`/`channels`
/// when they differ. AAC has no packet-loss concealment of its own: a lost packet (empty payload, as
/// `jitter-buffer` sends) is filled with the last decoded frame faded out over its length, and further
/// losses with silence, all counted (`concealed`). A packet the decoder rejects is concealed the same way
/// and reported once as an `error` event (`decode_failed`).
public actor AACDecodeNode: FrameProcessor {
    let format: AudioFormat
    private var decoder: AACDecoderHandle?
    private var converter: AudioConverter?
    private var last: [Int16] = []
    private var lostInRow = 0
    private var outIndex: Int64 = 0
    private var origin: Int64?
    private var warnedCodec = false
    private var warnedDecode = false

    init(configuration c: Configuration) { format = c.format }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let packet = frame.encoded else { return try await context.send(frame) }
        guard packet.codec == "aac" else {
            if !warnedCodec {
                warnedCodec = true
                try await context.emitError(code: "wrong_codec", message: "aac-decode got \(packet.codec) frames; they are skipped")
            }
            return
        }
        if origin == nil { origin = frame.pts }
        var marks = frame.marks
        marks.discontinuity = false
        if packet.payload.isEmpty {
            let n = packet.durationNanos > 0
                ? Int((packet.durationNanos * Int64(format.sampleRate) + 500_000_000) / 1_000_000_000) : AACRates.frameSamples
            return try await conceal(samples: n, marks: marks, context: context)
        }
        let streamFormat = packet.format ?? format
        if decoder?.format != streamFormat {
            decoder = try AACDecoderHandle(format: streamFormat)
            converter = streamFormat == format ? nil : try AudioConverter(from: streamFormat, to: format, quality: 5)
        }
        let pcm: [Int16]
        do {
            pcm = try decoder!.decode(packet.payload)
        } catch let e as NodeError {
            context.count("decode_errors")
            if !warnedDecode {
                warnedDecode = true
                try await context.emitError(code: "decode_failed", message: "aac-decode: \(e.message); concealing")
            }
            return try await conceal(samples: AACRates.frameSamples * format.sampleRate / streamFormat.sampleRate, marks: marks, context: context)
        }
        let out = converter.map { $0.convert(pcm) } ?? pcm
        if out.isEmpty { return }
        lostInRow = 0
        last = out
        try await emit(out, marks: marks, context: context)
    }

    public func finish(context: NodeContext) async throws {
        if let converter {
            let tail = converter.flush()
            if !tail.isEmpty { try await emit(tail, marks: .none, context: context) }
        }
    }

    /// The last frame faded out (first loss in a row), silence after.
    private func conceal(samples n: Int, marks: FrameMarks, context: NodeContext) async throws {
        context.count("concealed")
        let ch = format.channels
        var pcm = [Int16](repeating: 0, count: max(1, n) * ch)
        if lostInRow == 0, !last.isEmpty {
            let frames = pcm.count / ch
            let source = last.count / ch
            for i in 0..<frames {
                let gain = 1 - Double(i) / Double(frames)
                for c in 0..<ch { pcm[i * ch + c] = Int16(Double(last[(i % source) * ch + c]) * gain) }
            }
        }
        lostInRow += 1
        try await emit(pcm, marks: marks, context: context)
    }

    private func emit(_ pcm: [Int16], marks: FrameMarks, context: NodeContext) async throws {
        var f = Frame.audio(pcm, format: format, sampleIndex: outIndex, marks: marks)
        outIndex += Int64(pcm.count / format.channels)
        f.pts += origin ?? 0
        try await context.send(f)
    }

    /// Configuration of `aac-decode`.
    public struct Configuration: NodeConfiguration {
        public var rate: Int
        public var channels: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("rate", .int(8000...96000), default: 48000, doc: "output sample rate (and the stream's, when the packets do not say): 16000...48000"),
            ParamSpec("channels", .int(1...2), default: 1, doc: "output channels"),
        ]
        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
        public func problems() -> [String] {
            AACRates.supported.contains(rate) ? [] : ["rate must be 16000, 22050, 24000, 32000, 44100 or 48000, got \(rate)"]
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "aac-decode",
        summary: "Decodes AAC-LC access units to audio (FFmpeg); an empty payload = lost packet, concealed by fading out the last frame",
        family: "codecs",
        inputs: [PortSpec("in", [.encoded], codecs: ["aac"], doc: "raw AAC access units; empty payload = lost packet")],
        outputs: [PortSpec("out", [.audio])],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        fusable: true,
        make: { c, _ in
            try FFmpegLibraries.load(for: "aac-decode", code: .decoderFailed)
            return AACDecodeNode(configuration: c)
        })
}
