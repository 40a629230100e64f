import PipelineCore

/// `aac-encode`: s16 audio (16–48 kHz, mono or stereo) to AAC-LC access units of 1,024 samples per channel
/// (encoded frames, codec `aac`, raw access units without ADTS headers), with FFmpeg's AAC encoder.
///
/// AAC is a continuous-stream codec: the encoder keeps one frame of priming (the decoded stream lags the
/// input by 1,024 samples) and cannot be flushed mid-stream without ending it, so unlike `opus-encode` a
/// packet is not cut at slice or speech marks. Marks ride along on the packet produced after the frame
/// that carried them (speechStart, discontinuity and slice info); at end of stream the remainder is padded
/// with silence and the encoder is drained, so no input sample is lost. The packets' `pts` run on the
/// input's timeline, one packet every 1,024 samples from the first frame's `pts`.
public actor AACEncodeNode: FrameProcessor {
    let bitrate: Int
    private var encoder: AACEncoderHandle?
    private var buffer: [Int16] = []
    private var originPts: Int64 = 0
    private var packetsOut: Int64 = 0
    private var pendingMarks = FrameMarks.none

    init(configuration c: Configuration) { bitrate = c.bitrate }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        if encoder?.format != audio.format {
            if encoder != nil { try await drain(context: context) }
            encoder = try AACEncoderHandle(format: audio.format, bitrate: bitrate)
            originPts = frame.pts
            packetsOut = 0
        }
        merge(frame.marks)
        buffer.append(contentsOf: audio.samples)
        try await encodeWhole(context: context)
    }

    public func finish(context: NodeContext) async throws {
        try await drain(context: context)
    }

    private func merge(_ m: FrameMarks) {
        pendingMarks.speechStart = pendingMarks.speechStart || m.speechStart
        pendingMarks.speechEnd = pendingMarks.speechEnd || m.speechEnd
        pendingMarks.discontinuity = pendingMarks.discontinuity || m.discontinuity
        if let s = m.slice {
            if var held = pendingMarks.slice, held.voiceID == s.voiceID, held.seq == s.seq {
                held.isLast = held.isLast || s.isLast
                pendingMarks.slice = held
            } else {
                pendingMarks.slice = s
            }
        }
    }

    private func encodeWhole(context: NodeContext) async throws {
        guard let encoder else { return }
        let length = encoder.frameSamples * encoder.format.channels
        var offset = 0
        var packets: [[UInt8]] = []
        try buffer.withUnsafeBufferPointer { samples in
            while samples.count - offset >= length {
                packets += try encoder.encode(samples, offset: offset)
                offset += length
            }
        }
        if offset > 0 { buffer.removeFirst(offset) }
        try await send(packets, context: context)
    }

    /// Pads the remainder to a whole frame, drains the encoder and sends everything it held.
    private func drain(context: NodeContext) async throws {
        guard let encoder else { return }
        let length = encoder.frameSamples * encoder.format.channels
        if !buffer.isEmpty {
            buffer.append(contentsOf: repeatElement(0, count: (length - buffer.count % length) % length))
            try await encodeWhole(context: context)
        }
        try await send(try encoder.encode(nil), context: context)
        self.encoder = nil
    }

    private func send(_ packets: [[UInt8]], context: NodeContext) async throws {
        guard let encoder else { return }
        let rate = encoder.format.sampleRate
        let duration = MediaTime.nanos(samples: Int64(encoder.frameSamples), rate: rate)
        for payload in packets {
            let pts = originPts + MediaTime.nanos(samples: packetsOut * Int64(encoder.frameSamples), rate: rate)
            packetsOut += 1
            let marks = pendingMarks
            pendingMarks = .none
            let e = EncodedBuffer(codec: "aac", payload: payload, durationNanos: duration, format: encoder.format)
            try await context.send(Frame(payload: .encoded(e), pts: pts, marks: marks))
        }
    }

    /// Configuration of `aac-encode`.
    public struct Configuration: NodeConfiguration {
        public var bitrate: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("bitrate", .int(8000...320_000), default: 64000, doc: "bits per second (AAC-LC)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "aac-encode",
        summary: "Encodes 16–48 kHz mono/stereo audio to AAC-LC access units of 1,024 samples (FFmpeg)",
        family: "codecs",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.encoded], codecs: ["aac"], doc: "raw AAC-LC access units, 1,024 samples each")],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { _, _ in nil }, accepts: { _, f in AACRates.problem(f, node: "aac-encode") }),
        fusable: true,
        make: { c, _ in
            try FFmpegLibraries.load(for: "aac-encode", code: .encoderFailed)
            return AACEncodeNode(configuration: c)
        })
}
