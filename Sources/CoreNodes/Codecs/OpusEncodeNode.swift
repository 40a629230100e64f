import COpus
import PipelineCore

/// `opus-encode`: s16 audio (8/12/16/24/48 kHz, mono or stereo) to Opus packets of `frame_ms`
/// (encoded frames, codec `opus`, with the audio format and duration).
///
/// Marks travel with the audio: a packet never mixes two slices. When a slice (`FrameMarks.slice`)
/// changes, ends (`isLast`) or speech ends (`speechEnd`), the partial packet is padded with silence
/// and sent. Each packet carries its slice's `SliceInfo` (`isFirst` only on the first packet of a
/// first slice, `isLast` only on the last packet of a last slice); `speechStart` and
/// `discontinuity` go on the first packet holding the marked frame's audio, `speechEnd` on the last.
/// At end of stream the remainder is padded and sent.
public actor OpusEncodeNode: FrameProcessor {
    let frameMs: Int
    let application: Int32
    let bitrate: Int?
    let fec: Bool
    let expectedLoss: Int
    let dtx: Bool
    let complexity: Int?

    private var encoder: OpusEncoderHandle?
    private var buffer: [Int16] = []
    private var bufferPts: Int64 = 0
    private var slice: SliceInfo?
    private var firstOfSlice = true
    private var pendingStart = false
    private var pendingGap = false

    init(configuration c: Configuration) {
        frameMs = c.frameMs
        application = c.application == .audio ? OPUS_APPLICATION_AUDIO : OPUS_APPLICATION_VOIP
        bitrate = c.bitrate > 0 ? c.bitrate : nil
        fec = c.fec
        expectedLoss = c.expectedLoss
        dtx = c.dtx
        complexity = c.complexity
    }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        if encoder?.format != audio.format {
            if encoder != nil { try await flush(final: true, speechEnd: false, context: context) }
            encoder = try OpusEncoderHandle(format: audio.format, frameMs: frameMs, application: application,
                                            bitrate: bitrate, fec: fec, expectedLoss: expectedLoss, dtx: dtx,
                                            complexity: complexity)
        }
        let marks = frame.marks
        if let current = slice, !buffer.isEmpty, marks.slice?.voiceID != current.voiceID || marks.slice?.seq != current.seq {
            try await flush(final: true, speechEnd: false, context: context)
        }
        if marks.slice?.voiceID != slice?.voiceID || marks.slice?.seq != slice?.seq { firstOfSlice = true }
        slice = marks.slice
        if buffer.isEmpty { bufferPts = frame.pts }
        pendingStart = pendingStart || marks.speechStart
        pendingGap = pendingGap || marks.discontinuity
        buffer.append(contentsOf: audio.samples)
        let segmentEnds = marks.slice?.isLast == true || marks.speechEnd
        try await flush(final: segmentEnds, speechEnd: marks.speechEnd, context: context)
    }

    public func finish(context: NodeContext) async throws {
        try await flush(final: true, speechEnd: false, context: context)
    }

    /// Encodes every whole packet in the buffer; with `final`, pads and encodes the remainder too.
    private func flush(final: Bool, speechEnd: Bool, context: NodeContext) async throws {
        guard let encoder else { return }
        let ch = encoder.format.channels
        let packetLength = encoder.frameSamples * ch
        if final && !buffer.isEmpty && buffer.count % packetLength != 0 {
            buffer.append(contentsOf: repeatElement(0, count: packetLength - buffer.count % packetLength))
        }
        var offset = 0
        var packets: [(payload: [UInt8], pts: Int64, marks: FrameMarks)] = []
        try buffer.withUnsafeBufferPointer { samples in
            while samples.count - offset >= packetLength {
                let payload = try encoder.encode(samples, offset: offset)
                offset += packetLength
                let isLast = final && offset == samples.count
                var m = FrameMarks(speechStart: pendingStart, speechEnd: isLast && speechEnd, discontinuity: pendingGap)
                if var s = slice {
                    s.isFirst = s.isFirst && firstOfSlice
                    s.isLast = s.isLast && isLast
                    m.slice = s
                }
                firstOfSlice = false
                pendingStart = false
                pendingGap = false
                packets.append((payload, bufferPts, m))
                bufferPts += MediaTime.nanos(samples: Int64(encoder.frameSamples), rate: encoder.format.sampleRate)
            }
        }
        if offset > 0 { buffer.removeFirst(offset) }
        let duration = MediaTime.nanos(samples: Int64(encoder.frameSamples), rate: encoder.format.sampleRate)
        for p in packets {
            let e = EncodedBuffer(codec: "opus", payload: p.payload, durationNanos: duration, format: encoder.format)
            try await context.send(Frame(payload: .encoded(e), pts: p.pts, marks: p.marks))
        }
    }

    /// libopus application of `opus-encode`.
    public enum Application: String, Sendable, Decodable, CaseIterable {
        /// Speech.
        case voip
        /// Music and general audio.
        case audio
    }

    /// Configuration of `opus-encode`.
    public struct Configuration: NodeConfiguration {
        public var bitrate: Int
        public var frameMs: Int
        public var fec: Bool
        public var expectedLoss: Int
        public var dtx: Bool
        public var application: Application
        public var complexity: Int?
        public static let parameters: [ParamSpec] = [
            ParamSpec("bitrate", .int(0...512_000), default: 24000, doc: "bits per second; 0 = libopus chooses"),
            ParamSpec("frame_ms", .int(10...60), default: 20, doc: "packet duration: 10, 20, 40 or 60 ms"),
            ParamSpec("fec", .bool, default: false, doc: "in-band forward error correction (a decoder can rebuild a lost packet from the next)"),
            ParamSpec("expected_loss", .int(0...100), default: 10, doc: "packet loss percentage FEC is tuned for"),
            ParamSpec("dtx", .bool, default: false, doc: "discontinuous transmission: tiny packets during silence"),
            ParamSpec("application", .choice(Application.allCases.map(\.rawValue)), default: "voip", doc: "voip: speech; audio: music and general audio"),
            ParamSpec("complexity", .int(0...10), doc: "encoder complexity 0...10 (default: libopus's)"),
        ]
        public func problems() -> [String] {
            [10, 20, 40, 60].contains(frameMs) ? [] : ["frame_ms must be 10, 20, 40 or 60, got \(frameMs)"]
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "opus-encode",
        summary: "Encodes 8/12/16/24/48 kHz mono/stereo audio to Opus packets (libopus); slice and speech marks ride along",
        family: "codecs",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.encoded], codecs: ["opus"], doc: "Opus packets, one per frame_ms")],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { _, _ in nil }, accepts: { _, f in OpusRates.problem(f, node: "opus-encode") }),
        fusable: true,
        make: { c, _ in OpusEncodeNode(configuration: c) })
}
