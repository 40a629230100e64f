import PipelineCore

/// `opus-decode`: Opus packets to s16 audio at `rate` / `channels`, with packet-loss concealment.
///
/// **Lost packets.** An encoded frame with an **empty payload** stands for one lost packet (its
/// `durationNanos`, when set, is the lost duration; otherwise the last packet's). The jitter buffer
/// sends one per missing packet. A non-empty packet marked `marks.discontinuity` means a gap precedes
/// it: its length is taken from the pts jump since the previous packet (one packet when unknown).
///
/// **Concealment.** Missing audio is never skipped: the decoder waits for the next packet, then
/// rebuilds the frame just before it from that packet's in-band FEC (when the encoder sent FEC;
/// libopus conceals otherwise; `use_fec: false` skips FEC) and conceals any earlier missing frames (PLC). Missing frames at end
/// of stream are concealed. Output is continuous, so `discontinuity` is cleared; counters
/// `concealed` and `fec_recovered` (see `--stats`) count the rebuilt frames.
public actor OpusDecodeNode: FrameProcessor {
    let format: AudioFormat
    let useFEC: Bool
    private var decoder: OpusDecoderHandle?
    private var lost: [(samples: Int, marks: FrameMarks)] = []
    private var lastFrameSamples: Int
    private var expectedPts: Int64?
    private var outIndex: Int64 = 0
    private var origin: Int64?
    private var warnedCodec = false

    init(configuration c: Configuration) {
        format = c.format
        lastFrameSamples = format.sampleRate / 50
        useFEC = c.useFec
    }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let packet = frame.encoded else { return try await context.send(frame) }
        guard packet.codec == "opus" else {
            if !warnedCodec {
                warnedCodec = true
                try await context.emitError(code: "wrong_codec", message: "opus-decode got \(packet.codec) frames; they are skipped")
            }
            return
        }
        if decoder == nil { decoder = try OpusDecoderHandle(format: format) }
        if origin == nil { origin = frame.pts }
        if packet.payload.isEmpty {
            let n = packet.durationNanos > 0 ? samples(nanos: packet.durationNanos) : lastFrameSamples
            lost.append((n, frame.marks))
            expectedPts = frame.pts + (packet.durationNanos > 0 ? packet.durationNanos : MediaTime.nanos(samples: Int64(n), rate: format.sampleRate))
            return
        }
        if frame.marks.discontinuity && lost.isEmpty {
            var gap = lastFrameSamples
            if let expectedPts, frame.pts > expectedPts {
                gap = min(samples(nanos: frame.pts - expectedPts), format.sampleRate)
            }
            lost.append((gap, FrameMarks.none))
        }
        var marks = frame.marks
        marks.discontinuity = false
        if !lost.isEmpty {
            let pending = lost
            lost.removeAll()
            for (i, l) in pending.enumerated() {
                var pcm: [Int16]
                if i == pending.count - 1 && useFEC {
                    pcm = try decoder!.decode(packet.payload, fec: true, frameSamples: l.samples)
                    context.count("fec_recovered")
                } else {
                    pcm = try decoder!.decode(nil, frameSamples: l.samples)
                    context.count("concealed")
                }
                var m = l.marks
                m.discontinuity = false
                try await emit(&pcm, marks: m, context: context)
            }
        }
        var pcm: [Int16]
        do {
            pcm = try decoder!.decode(packet.payload)
        } catch {
            try await context.emitError(code: "decode_failed", message: "\(error); concealing")
            pcm = try decoder!.decode(nil, frameSamples: lastFrameSamples)
            context.count("concealed")
        }
        lastFrameSamples = pcm.count / format.channels
        expectedPts = frame.pts + (packet.durationNanos > 0 ? packet.durationNanos : MediaTime.nanos(samples: Int64(lastFrameSamples), rate: format.sampleRate))
        try await emit(&pcm, marks: marks, context: context)
    }

    public func finish(context: NodeContext) async throws {
        guard let decoder else { return }
        for l in lost {
            var pcm = try decoder.decode(nil, frameSamples: l.samples)
            context.count("concealed")
            var m = l.marks
            m.discontinuity = false
            try await emit(&pcm, marks: m, context: context)
        }
        lost.removeAll()
    }

    /// Samples per channel for a duration, rounded down to whole 2.5 ms (what libopus decodes).
    private func samples(nanos: Int64) -> Int {
        let unit = format.sampleRate / 400
        let n = Int(nanos * Int64(format.sampleRate) / 1_000_000_000)
        return max(unit, n / unit * unit)
    }

    private func emit(_ pcm: inout [Int16], marks: FrameMarks, context: NodeContext) async throws {
        let frame = Frame.audio(pcm, format: format, sampleIndex: outIndex, marks: marks)
        outIndex += Int64(pcm.count / format.channels)
        var f = frame
        f.pts += origin ?? 0
        try await context.send(f)
    }

    /// Configuration of `opus-decode`.
    public struct Configuration: NodeConfiguration {
        public var rate: Int
        public var channels: Int
        public var useFec: Bool
        public static let parameters: [ParamSpec] = [
            ParamSpec("rate", .int(8000...48000), default: 48000, doc: "output sample rate: 8000, 12000, 16000, 24000 or 48000"),
            ParamSpec("channels", .int(1...2), default: 1, doc: "output channels"),
            ParamSpec("use_fec", .bool, default: true, doc: "rebuild a lost packet from the next packet's FEC data (false: conceal only)"),
        ]
        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
        public func problems() -> [String] {
            OpusRates.supported.contains(rate) ? [] : ["rate must be 8000, 12000, 16000, 24000 or 48000, got \(rate)"]
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "opus-decode",
        summary: "Decodes Opus packets to audio; an empty-payload frame (or marks.discontinuity) = lost packet, rebuilt by FEC from the next packet or concealed (PLC)",
        family: "codecs",
        inputs: [PortSpec("in", [.encoded], codecs: ["opus"], doc: "Opus packets; empty payload = lost packet")],
        outputs: [PortSpec("out", [.audio])],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        fusable: true,
        make: { c, _ in OpusDecodeNode(configuration: c) })
}
