import Foundation
import PipelineCore

/// `slicer`: cuts audio into slices of exactly `slice_ms` (or `slice_bytes`) and groups them into
/// flows, stamping `FrameMarks.slice` (voice id, seq from 0, first/last flags) on every slice.
///
/// - `mode: utterance` — one flow per utterance, driven by the VAD's in-band `speechStart` /
///   `speechEnd` marks; audio outside utterances is dropped. Flows longer than `max_utterance_ms`
///   (default 60000) are split into several flows.
/// - `mode: fixed` — the whole stream is one flow (split by `max_utterance_ms` only when given).
///
/// - `delivery: stream` — the same flows and seq numbers, but the audio leaves as it arrives, in
///   pieces of at most one input frame that never straddle a slice (for per-frame consumers such as
///   `opus-encode`, which then never encodes a whole slice at once).
///
/// Voice ids are `<voice_id_prefix>-<n>`; the default prefix is random per run, so ids are unique.
/// The last, partial slice of a flow (and of the stream) is delivered, marked last. Emits
/// `utterance_start` / `utterance_end` (`voice_id`, `seq`, `media_ms`; the end also `reason`, see
/// ``EndReason``) on `events`; `seq` of `utterance_end` is the last slice's seq. A frame marked `wake`
/// (by the `wake` node) starts a flow in utterance mode.
public actor SlicerNode: FrameProcessor {
    let mode: SlicerStateMachine.Mode
    let sliceMs: Int?
    let sliceBytes: Int?
    let maxMs: Int
    let prefix: String
    let delivery: SlicerStateMachine.Delivery
    private var machine: SlicerStateMachine?

    init(configuration c: Configuration) {
        mode = c.mode
        sliceBytes = c.sliceBytes
        sliceMs = c.sliceBytes == nil ? (c.sliceMs ?? Configuration.defaultSliceMs) : nil
        maxMs = c.maxUtteranceMs ?? (c.mode == .utterance ? Configuration.defaultMaxUtteranceMs : 0)
        prefix = c.voiceIdPrefix ?? String(UUID().uuidString.lowercased().prefix(8))
        delivery = c.delivery
    }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        if machine?.format != audio.format {
            if machine != nil { try await perform(machine!.finish(), context: context) }
            let f = audio.format
            let frames: Int
            if let sliceBytes {
                guard sliceBytes % (2 * f.channels) == 0 else {
                    throw NodeError(.badSliceSize, "slice_bytes \(sliceBytes) is not a whole number of \(f.channels)-channel s16 samples")
                }
                frames = sliceBytes / (2 * f.channels)
            } else {
                frames = max(1, f.frames(ms: sliceMs ?? 200))
            }
            machine = SlicerStateMachine(format: f, mode: mode, sliceFrames: frames,
                                         maxFlowFrames: f.frames(ms: maxMs), prefix: prefix, delivery: delivery)
        }
        try await perform(machine!.push(audio.samples, pts: frame.pts, marks: frame.marks), context: context)
    }

    public func finish(context: NodeContext) async throws {
        if machine != nil { try await perform(machine!.finish(), context: context) }
    }

    private func perform(_ actions: [SlicerStateMachine.Action], context: NodeContext) async throws {
        for a in actions {
            switch a {
            case .flowStart(let id, let pts):
                try await context.emit(.utteranceStart, [("voice_id", .string(id)), ("seq", .int(0)), ("media_ms", .int(MediaTime.millis(pts)))])
            case .slice(let s):
                try await context.send(Frame(payload: .audio(AudioBuffer(format: machine!.format, samples: s.samples)), pts: s.pts, marks: s.marks))
            case .flowEnd(let id, let lastSeq, let pts, let reason):
                try await context.emit(.utteranceEnd, [("voice_id", .string(id)), ("seq", .int(Int64(lastSeq))), ("media_ms", .int(MediaTime.millis(pts)))] + reason.fields)
            }
        }
    }

    /// Configuration of `slicer`.
    public struct Configuration: NodeConfiguration {
        public var mode: SlicerStateMachine.Mode
        public var sliceMs: Int?
        public var sliceBytes: Int?
        public var maxUtteranceMs: Int?
        public var voiceIdPrefix: String?
        public var delivery: SlicerStateMachine.Delivery
        /// Slice length when neither `slice_ms` nor `slice_bytes` is given.
        static let defaultSliceMs = 200
        /// `max_utterance_ms` in utterance mode when not given.
        static let defaultMaxUtteranceMs = 60_000
        public static let parameters: [ParamSpec] = [
            ParamSpec("mode", .choice(["utterance", "fixed"]), default: "utterance", doc: "utterance: one flow per VAD utterance; fixed: one flow for the stream"),
            ParamSpec("slice_ms", .int(1...60_000), doc: "slice length in milliseconds (default 200)"),
            ParamSpec("slice_bytes", .int(2...10_000_000), doc: "slice length in bytes of s16 audio (instead of slice_ms)"),
            ParamSpec("max_utterance_ms", .int(0...), doc: "split flows longer than this; default 60000 in utterance mode, unlimited in fixed mode; 0 = unlimited"),
            ParamSpec("voice_id_prefix", .string, doc: "voice ids are <prefix>-<n>; default: random per run"),
            ParamSpec("delivery", .choice(SlicerStateMachine.Delivery.allCases.map(\.rawValue)), default: "slice",
                      doc: "slice: each slice whole once complete; stream: the audio as it arrives, in pieces of at most one input frame marked with their slice (for per-frame consumers such as opus-encode: no burst at slice boundaries, at most one frame of delay)"),
        ]
        public func problems() -> [String] {
            sliceMs != nil && sliceBytes != nil ? ["give slice_ms or slice_bytes, not both"] : []
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "slicer",
        summary: "Cuts audio into exact slices grouped into flows (voice_id, seq, first/last in FrameMarks.slice); utterance mode follows the VAD marks",
        family: "DSP",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.audio], doc: "slices, marked with FrameMarks.slice"), .events],
        configuration: Configuration.self,
        format: .passthrough,
        fusable: true,
        make: { c, _ in SlicerNode(configuration: c) })
}
