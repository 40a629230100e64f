import PipelineCore

/// The `slicer`'s logic as a pure value: audio and marks in, slices and flow boundaries out.
///
/// - **Flows.** A flow is one utterance (utterance mode: from a frame marked `speechStart` to one
///   marked `speechEnd`; audio outside is dropped) or the whole stream (fixed mode). Each flow gets
///   a new `voiceID` (`<prefix>-<n>`, n from 1) and numbers its slices from 0. A flow longer than
///   `maxFlowFrames` is split: the slice reaching the limit is its last, and the rest of the audio
///   continues in a new flow.
/// - **Slices** hold exactly `sliceFrames` samples per channel, except the last one of a flow
///   (what remains when the utterance, the split or the stream ends), which may be shorter.
///   A full slice is held until the next sample arrives or its flow ends, so that it can be marked
///   last: every flow's final slice has `isLast`, its first `isFirst`.
/// - **Marks.** The first slice of a flow carries `speechStart`, the last `speechEnd` (in utterance
///   mode; in fixed mode the VAD's marks ride on the slice holding the marked frame's first sample
///   (start) or last sample (end)). `discontinuity` rides on the slice holding the frame's first sample.
/// - **Wake words.** In utterance mode a frame marked `wake` starts a flow (ending an open one as
///   `interrupted`); the VAD's next `speechStart` then continues that flow instead of starting another.
/// - **Reasons.** Every flow end says why (``EndReason``): the `speechEnd` mark's reason (`silence`
///   when it has none), `max_utterance` for a split, `interrupted` when a new start cuts it, and
///   `end_of_stream`; the last slice carries it as `endReason`.
/// - **Delivery.** `.slice` delivers each slice whole once it is complete. `.stream` delivers the same
///   audio as it arrives, in pieces of at most one input frame that never straddle two slices; every
///   piece carries its slice's `voiceID` and `seq`, `isFirst` only on the flow's first piece and `isLast`
///   only on its last, so a 600 ms slice boundary costs downstream no more work than any other frame.
///   One piece is held until the next sample arrives or the flow ends (to mark the last one), which
///   delays audio by at most one input frame.
public struct SlicerStateMachine: Sendable {
    /// How audio is grouped into flows.
    public enum Mode: String, Sendable, Hashable, Decodable {
        /// One flow for the whole stream.
        case fixed
        /// One flow per utterance, from the VAD's in-band marks.
        case utterance
    }

    /// How audio leaves the machine.
    public enum Delivery: String, Sendable, Hashable, Decodable, CaseIterable {
        /// Whole slices, each once it is complete.
        case slice
        /// Pieces of at most one input frame as they arrive, marked with their slice.
        case stream
    }

    /// One slice of audio (with `.stream` delivery: one piece of a slice).
    public struct Slice: Sendable {
        /// Interleaved samples.
        public var samples: [Int16]
        /// Media time of the first sample.
        public var pts: Int64
        /// Flow identity and position.
        public var info: SliceInfo
        /// Marks to put on the slice's frame (including `slice`).
        public var marks: FrameMarks
    }

    /// What the node must do.
    public enum Action: Sendable {
        /// A flow begins (sent before its first slice).
        case flowStart(voiceID: String, pts: Int64)
        /// Send this slice.
        case slice(Slice)
        /// A flow ended; `lastSeq` is its last slice's `seq`.
        case flowEnd(voiceID: String, lastSeq: Int, pts: Int64, reason: EndReason)
    }

    /// Audio format of the stream.
    public let format: AudioFormat
    /// Grouping.
    public let mode: Mode
    /// Samples per channel per full slice.
    public let sliceFrames: Int
    /// Longest flow in samples per channel; 0 = unlimited.
    public let maxFlowFrames: Int
    /// Prefix of voice ids.
    public let prefix: String
    /// Whole slices or pieces as they arrive.
    public let delivery: Delivery

    private var inFlow = false
    private var flowAnnounced = false
    private var needsNewFlow = false
    /// The open flow began at a wake word and has not yet absorbed the VAD's start.
    private var openedByWake = false
    /// Why the flow being closed ends (put on its last slice).
    private var closing: EndReason = .silence
    private var flowCount = 0
    private var voiceID = ""
    private var nextSeq = 0
    private var flowFrames = 0
    private var buffer: [Int16] = []
    private var bufferPts: Int64 = 0
    private var bufferMarks = FrameMarks()
    private var held: Slice?
    private var lastSeq = 0
    private var flowStartPts: Int64 = 0
    private var lastPts: Int64 = 0
    // Stream delivery: the slice the next sample belongs to, and how many samples it already has.
    private var sliceIndex = 0
    private var sliceFill = 0

    /// Creates a state machine.
    public init(format: AudioFormat, mode: Mode, sliceFrames: Int, maxFlowFrames: Int = 0, prefix: String,
                delivery: Delivery = .slice) {
        precondition(sliceFrames > 0, "slices hold at least one sample")
        self.format = format
        self.mode = mode
        self.sliceFrames = sliceFrames
        self.maxFlowFrames = max(0, maxFlowFrames)
        self.prefix = prefix
        self.delivery = delivery
    }

    /// True while a flow is open.
    public var isInFlow: Bool { inFlow }

    /// Feeds one frame of interleaved audio (pts of its first sample, its marks).
    public mutating func push(_ samples: [Int16], pts: Int64, marks: FrameMarks) -> [Action] {
        var actions: [Action] = []
        switch mode {
        case .utterance:
            if marks.wake != nil {
                if inFlow { closeFlow(&actions, reason: .interrupted) }
                openFlow()
                openedByWake = true
            }
            if marks.speechStart {
                if inFlow && openedByWake {
                    openedByWake = false
                } else {
                    if inFlow { closeFlow(&actions, reason: .interrupted) }
                    openFlow()
                }
            }
            if inFlow {
                append(samples, pts: pts, start: false, discontinuity: marks.discontinuity, &actions)
            }
            if marks.speechEnd && inFlow { closeFlow(&actions, reason: marks.endReason ?? .silence) }
        case .fixed:
            if !inFlow { openFlow() }
            append(samples, pts: pts, start: marks.speechStart, discontinuity: marks.discontinuity, &actions)
            if marks.speechEnd {
                if !buffer.isEmpty { bufferMarks.speechEnd = true; bufferMarks.endReason = marks.endReason } else { held?.marks.speechEnd = true; held?.marks.endReason = marks.endReason }
            }
        }
        return actions
    }

    /// End of stream: delivers the last (partial) slice and closes the open flow.
    public mutating func finish() -> [Action] {
        var actions: [Action] = []
        if inFlow { closeFlow(&actions, reason: .endOfStream) }
        return actions
    }

    private mutating func openFlow() {
        inFlow = true
        flowAnnounced = false
        needsNewFlow = false
        openedByWake = false
        flowCount += 1
        voiceID = "\(prefix)-\(flowCount)"
        nextSeq = 0
        flowFrames = 0
        sliceIndex = 0
        sliceFill = 0
        buffer.removeAll(keepingCapacity: true)
        bufferMarks = FrameMarks()
        held = nil
    }

    private mutating func append(_ samples: [Int16], pts: Int64, start: Bool, discontinuity: Bool, _ actions: inout [Action]) {
        if delivery == .stream { return appendPieces(samples, pts: pts, start: start, discontinuity: discontinuity, &actions) }
        let ch = format.channels
        var offset = 0
        var pendingStart = start, pendingGap = discontinuity
        while offset < samples.count {
            if needsNewFlow {
                closeFlow(&actions, reason: .maxUtterance)
                openFlow()
            }
            if let h = held { emit(h, last: false, &actions); held = nil }
            if buffer.isEmpty {
                bufferPts = pts + MediaTime.nanos(samples: Int64(offset / ch), rate: format.sampleRate)
                bufferMarks = FrameMarks()
                if buffer.capacity < sliceFrames * ch { buffer.reserveCapacity(sliceFrames * ch) }
            }
            if pendingStart { bufferMarks.speechStart = true; pendingStart = false }
            if pendingGap { bufferMarks.discontinuity = true; pendingGap = false }
            var room = sliceFrames - buffer.count / ch
            if maxFlowFrames > 0 { room = min(room, maxFlowFrames - flowFrames) }
            let n = min(room * ch, samples.count - offset)
            buffer.append(contentsOf: samples[offset..<(offset + n)])
            offset += n
            flowFrames += n / ch
            lastPts = pts + MediaTime.nanos(samples: Int64(offset / ch), rate: format.sampleRate)
            let flowFull = maxFlowFrames > 0 && flowFrames >= maxFlowFrames
            if buffer.count == sliceFrames * ch || flowFull {
                held = Slice(samples: buffer, pts: bufferPts, info: SliceInfo(voiceID: voiceID, seq: 0, isFirst: false, isLast: false), marks: bufferMarks)
                buffer.removeAll(keepingCapacity: true)
            }
            if flowFull { needsNewFlow = true }
        }
    }

    /// Stream delivery: each run of samples up to a slice (or flow) boundary becomes a piece at once.
    private mutating func appendPieces(_ samples: [Int16], pts: Int64, start: Bool, discontinuity: Bool, _ actions: inout [Action]) {
        let ch = format.channels
        var offset = 0
        var pendingStart = start, pendingGap = discontinuity
        while offset < samples.count {
            if needsNewFlow {
                closeFlow(&actions, reason: .maxUtterance)
                openFlow()
            }
            var room = sliceFrames - sliceFill
            if maxFlowFrames > 0 { room = min(room, maxFlowFrames - flowFrames) }
            let n = min(room * ch, samples.count - offset)
            // A frame that fits its slice whole goes on as it is (no copy).
            let piece = Slice(samples: n == samples.count ? samples : Array(samples[offset..<(offset + n)]),
                              pts: pts + MediaTime.nanos(samples: Int64(offset / ch), rate: format.sampleRate),
                              info: SliceInfo(voiceID: voiceID, seq: sliceIndex, isFirst: false, isLast: false),
                              marks: FrameMarks(speechStart: pendingStart, discontinuity: pendingGap))
            pendingStart = false
            pendingGap = false
            if let h = held { emit(h, last: false, &actions) }
            held = piece
            offset += n
            flowFrames += n / ch
            sliceFill += n / ch
            lastPts = pts + MediaTime.nanos(samples: Int64(offset / ch), rate: format.sampleRate)
            if sliceFill == sliceFrames { sliceIndex += 1; sliceFill = 0 }
            if maxFlowFrames > 0 && flowFrames >= maxFlowFrames { needsNewFlow = true }
        }
    }

    private mutating func emit(_ slice: Slice, last: Bool, _ actions: inout [Action]) {
        var s = slice
        if !flowAnnounced {
            flowAnnounced = true
            actions.append(.flowStart(voiceID: voiceID, pts: s.pts))
        }
        // With stream delivery a piece keeps its slice's seq; nextSeq counts what this flow emitted.
        let first = nextSeq == 0
        let seq = delivery == .stream ? s.info.seq : nextSeq
        s.info = SliceInfo(voiceID: voiceID, seq: seq, isFirst: first, isLast: last)
        lastSeq = seq
        nextSeq += 1
        if mode == .utterance {
            s.marks.speechStart = first
            s.marks.speechEnd = last
        }
        if last { s.marks.endReason = closing }
        s.marks.slice = s.info
        actions.append(.slice(s))
    }

    private mutating func closeFlow(_ actions: inout [Action], reason: EndReason) {
        closing = reason
        if !buffer.isEmpty {
            if let h = held { emit(h, last: false, &actions); held = nil }
            let s = Slice(samples: buffer, pts: bufferPts, info: SliceInfo(voiceID: voiceID, seq: 0, isFirst: false, isLast: false), marks: bufferMarks)
            buffer.removeAll(keepingCapacity: true)
            emit(s, last: true, &actions)
        } else if let h = held {
            held = nil
            emit(h, last: true, &actions)
        }
        if flowAnnounced { actions.append(.flowEnd(voiceID: voiceID, lastSeq: lastSeq, pts: lastPts, reason: reason)) }
        inFlow = false
        needsNewFlow = false
    }
}
