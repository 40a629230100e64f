import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("SlicerStateMachine")
struct SlicerStateMachineTests {
    let format = AudioFormat(sampleRate: 1000, channels: 1)

    /// Feeds frames of `n` samples numbered consecutively; `marks[i]` marks frame i.
    func run(_ machine: inout SlicerStateMachine, frames: Int, size: Int, marks: [Int: FrameMarks] = [:]) -> [SlicerStateMachine.Action] {
        var out: [SlicerStateMachine.Action] = []
        for i in 0..<frames {
            let samples = (0..<size).map { Int16(i * size + $0) }
            out += machine.push(samples, pts: Int64(i * size / machine.format.channels) * 1_000_000, marks: marks[i] ?? .none)
        }
        return out + machine.finish()
    }

    func slices(_ actions: [SlicerStateMachine.Action]) -> [SlicerStateMachine.Slice] {
        actions.compactMap { if case .slice(let s) = $0 { s } else { nil } }
    }

    @Test func utteranceModeCutsExactSlicesWithinMarks() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 30, prefix: "u")
        // frames of 20 samples; utterance from frame 2 to frame 6 (100 samples: 30+30+30+10).
        let acts = run(&m, frames: 10, size: 20, marks: [2: FrameMarks(speechStart: true), 6: FrameMarks(speechEnd: true)])
        let s = slices(acts)
        #expect(s.map(\.samples.count) == [30, 30, 30, 10])
        #expect(s.map(\.info.seq) == [0, 1, 2, 3])
        #expect(s.map(\.info.isFirst) == [true, false, false, false])
        #expect(s.map(\.info.isLast) == [false, false, false, true])
        #expect(Set(s.map(\.info.voiceID)) == ["u-1"])
        #expect(s.first!.samples.first == 40 && s.last!.samples.last == 139)
        #expect(s.first!.pts == 40_000_000 && s[1].pts == 70_000_000)
        #expect(s.first!.marks.speechStart && s.last!.marks.speechEnd && s.allSatisfy { $0.marks.slice == $0.info })
        guard case .flowStart(let id, _) = acts.first, case .flowEnd(let id2, let lastSeq, _, _) = acts.last else {
            Issue.record("flow boundaries missing: \(acts)"); return
        }
        #expect(id == "u-1" && id2 == "u-1" && lastSeq == 3)
    }

    @Test func fullLastSliceIsMarkedLast() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 20, prefix: "u")
        let s = slices(run(&m, frames: 5, size: 20, marks: [1: FrameMarks(speechStart: true), 2: FrameMarks(speechEnd: true)]))
        #expect(s.map(\.samples.count) == [20, 20])
        #expect(s.map(\.info.isLast) == [false, true])
    }

    @Test func eachUtteranceIsANewFlow() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 25, prefix: "p")
        let marks: [Int: FrameMarks] = [0: FrameMarks(speechStart: true), 1: FrameMarks(speechEnd: true),
                                        3: FrameMarks(speechStart: true, speechEnd: true),
                                        5: FrameMarks(speechStart: true)]
        let s = slices(run(&m, frames: 8, size: 20, marks: marks))
        #expect(s.map(\.info.voiceID) == ["p-1", "p-1", "p-2", "p-3", "p-3", "p-3"])
        #expect(s.map(\.info.seq) == [0, 1, 0, 0, 1, 2])
        #expect(s.map(\.samples.count) == [25, 15, 20, 25, 25, 10])  // the stream's end closes p-3
        #expect(s.map(\.info.isLast) == [false, true, true, false, false, true])
    }

    @Test func longUtterancesAreSplit() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 30, maxFlowFrames: 70, prefix: "u")
        let s = slices(run(&m, frames: 10, size: 20, marks: [0: FrameMarks(speechStart: true), 9: FrameMarks(speechEnd: true)]))
        // 200 samples: flows of 70 (30+30+10), 70 (30+30+10), 60 (30+30).
        #expect(s.map(\.samples.count) == [30, 30, 10, 30, 30, 10, 30, 30])
        #expect(s.map(\.info.voiceID) == ["u-1", "u-1", "u-1", "u-2", "u-2", "u-2", "u-3", "u-3"])
        #expect(s.map(\.info.isLast) == [false, false, true, false, false, true, false, true])
        // Nothing lost, nothing repeated.
        #expect(s.flatMap(\.samples) == (0..<200).map { Int16($0) })
    }

    @Test func fixedModeIsOneFlowWithAPartialTail() {
        var m = SlicerStateMachine(format: AudioFormat(sampleRate: 1000, channels: 2), mode: .fixed, sliceFrames: 16, prefix: "f")
        let s = slices(run(&m, frames: 7, size: 20))  // 140 samples = 70 frames of stereo
        #expect(s.map(\.samples.count) == [32, 32, 32, 32, 12])
        #expect(s.map(\.info.seq) == [0, 1, 2, 3, 4])
        #expect(s.map(\.info.isLast) == [false, false, false, false, true])
        #expect(s[1].pts == 16_000_000)
    }

    @Test func fixedModeCarriesVADMarksOnTheSlicesHoldingThem() {
        var m = SlicerStateMachine(format: format, mode: .fixed, sliceFrames: 50, prefix: "f")
        let s = slices(run(&m, frames: 10, size: 20, marks: [3: FrameMarks(speechStart: true), 6: FrameMarks(speechEnd: true)]))
        #expect(s.map(\.marks.speechStart) == [false, true, false, false])
        #expect(s.map(\.marks.speechEnd) == [false, false, true, false])
    }

    @Test func audioOutsideUtterancesIsDropped() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 10, prefix: "u")
        #expect(run(&m, frames: 10, size: 20).isEmpty)
    }

    // MARK: stream delivery

    /// Runs the same frames and marks through both deliveries.
    func both(mode: SlicerStateMachine.Mode, sliceFrames: Int, maxFlow: Int = 0, channels: Int = 1, sizes: [Int],
              marks: [Int: FrameMarks]) -> (slices: [SlicerStateMachine.Action], pieces: [SlicerStateMachine.Action], heldAfterPush: [Int]) {
        let f = AudioFormat(sampleRate: 1000, channels: channels)
        var a = SlicerStateMachine(format: f, mode: mode, sliceFrames: sliceFrames, maxFlowFrames: maxFlow, prefix: "v")
        var b = SlicerStateMachine(format: f, mode: mode, sliceFrames: sliceFrames, maxFlowFrames: maxFlow, prefix: "v", delivery: .stream)
        var outA: [SlicerStateMachine.Action] = [], outB: [SlicerStateMachine.Action] = []
        var held: [Int] = []
        var n = 0, inFlowPushed = 0, emitted = 0
        for (i, size) in sizes.enumerated() {
            let samples = (0..<size * channels).map { Int16(truncatingIfNeeded: n * channels + $0) }
            let pts = Int64(n) * 1_000_000
            n += size
            outA += a.push(samples, pts: pts, marks: marks[i] ?? .none)
            let wasIn = b.isInFlow
            let acts = b.push(samples, pts: pts, marks: marks[i] ?? .none)
            outB += acts
            if b.isInFlow || wasIn { inFlowPushed += size } 
            emitted += slices(acts).reduce(0) { $0 + $1.samples.count / channels }
            held.append(b.isInFlow ? inFlowPushed - emitted : 0)
            if !b.isInFlow { inFlowPushed = emitted }
        }
        return (outA + a.finish(), outB + b.finish(), held)
    }

    /// Pieces regrouped by (voice id, seq) must equal the whole slices, and flags must mark the flows' ends.
    func expectSameFlows(_ r: (slices: [SlicerStateMachine.Action], pieces: [SlicerStateMachine.Action], heldAfterPush: [Int]),
                         maxPiece: Int, sourceLocation: Testing.SourceLocation = #_sourceLocation) {
        let whole = slices(r.slices), pieces = slices(r.pieces)
        var regrouped: [(id: String, seq: Int, samples: [Int16], pts: Int64)] = []
        for p in pieces {
            #expect(p.samples.count <= maxPiece, "a piece is larger than an input frame", sourceLocation: sourceLocation)
            #expect(p.marks.slice == p.info, sourceLocation: sourceLocation)
            if let last = regrouped.last, last.id == p.info.voiceID, last.seq == p.info.seq {
                regrouped[regrouped.count - 1].samples += p.samples
            } else {
                regrouped.append((p.info.voiceID, p.info.seq, p.samples, p.pts))
            }
        }
        #expect(regrouped.map(\.id) == whole.map(\.info.voiceID), sourceLocation: sourceLocation)
        #expect(regrouped.map(\.seq) == whole.map(\.info.seq), sourceLocation: sourceLocation)
        #expect(regrouped.map(\.samples) == whole.map(\.samples), sourceLocation: sourceLocation)
        #expect(regrouped.map(\.pts) == whole.map(\.pts), sourceLocation: sourceLocation)
        // First and last flags (and the utterance marks) only on each flow's first and last piece.
        for id in Set(pieces.map(\.info.voiceID)) {
            let flow = pieces.filter { $0.info.voiceID == id }
            #expect(flow.map(\.info.isFirst) == flow.indices.map { $0 == 0 }, "\(id)", sourceLocation: sourceLocation)
            #expect(flow.map(\.info.isLast) == flow.indices.map { $0 == flow.count - 1 }, "\(id)", sourceLocation: sourceLocation)
        }
        // The same flow boundaries, with the same last seq.
        func bounds(_ acts: [SlicerStateMachine.Action]) -> [String] {
            acts.compactMap {
                switch $0 {
                case .flowStart(let id, let pts): "start \(id) \(pts)"
                case .flowEnd(let id, let seq, let pts, _): "end \(id) \(seq) \(pts)"
                case .slice: nil
                }
            }
        }
        #expect(bounds(r.pieces) == bounds(r.slices), sourceLocation: sourceLocation)
    }

    @Test func streamDeliveryCarriesTheSameSlicesAsTheyArrive() {
        // Utterance mode: 600-sample slices from 20-sample frames, an utterance from frame 3 to frame 70.
        let r = both(mode: .utterance, sliceFrames: 600, sizes: Array(repeating: 20, count: 90),
                     marks: [3: FrameMarks(speechStart: true), 70: FrameMarks(speechEnd: true)])
        expectSameFlows(r, maxPiece: 20)
        // Never more than one input frame held back: the slice boundary releases nothing in bulk.
        #expect(r.heldAfterPush.max()! <= 20)
        #expect(slices(r.pieces).count == 68)
        let ends = slices(r.pieces).filter { $0.marks.speechEnd }
        #expect(ends.count == 1 && ends[0].info.isLast)
    }

    @Test func streamDeliveryCutsFramesAtSliceAndFlowBoundaries() {
        // Frames of 25 samples against slices of 30 and flows split at 70: pieces straddle nothing.
        let r = both(mode: .utterance, sliceFrames: 30, maxFlow: 70, sizes: Array(repeating: 25, count: 12),
                     marks: [0: FrameMarks(speechStart: true), 10: FrameMarks(speechEnd: true)])
        expectSameFlows(r, maxPiece: 25)
        #expect(slices(r.pieces).flatMap(\.samples) == slices(r.slices).flatMap(\.samples))
    }

    @Test func streamDeliveryMatchesSliceDeliveryOnIrregularInput() {
        // Irregular frame sizes, stereo, fixed and utterance modes, several utterances and a stream ending mid-utterance.
        var rng = SystemRandomNumberGenerator()
        for trial in 0..<40 {
            let mode: SlicerStateMachine.Mode = trial % 2 == 0 ? .utterance : .fixed
            let sizes = (0..<60).map { _ in Int.random(in: 1...48, using: &rng) }
            var marks: [Int: FrameMarks] = [:]
            for i in 0..<60 where Int.random(in: 0..<6, using: &rng) == 0 {
                marks[i] = FrameMarks(speechStart: Bool.random(using: &rng), speechEnd: Bool.random(using: &rng),
                                      discontinuity: Bool.random(using: &rng))
            }
            let r = both(mode: mode, sliceFrames: Int.random(in: 5...100, using: &rng),
                         maxFlow: trial % 3 == 0 ? Int.random(in: 50...400, using: &rng) : 0,
                         channels: trial % 4 == 0 ? 2 : 1, sizes: sizes, marks: marks)
            expectSameFlows(r, maxPiece: 48 * (trial % 4 == 0 ? 2 : 1))
        }
    }

    func ends(_ actions: [SlicerStateMachine.Action]) -> [String] {
        actions.compactMap { if case .flowEnd(let id, _, _, let reason) = $0 { "\(id) \(reason.name)" } else { nil } }
    }

    @Test func everyFlowEndSaysWhy() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 30, maxFlowFrames: 50, prefix: "u")
        var endMark = FrameMarks(speechEnd: true)
        endMark.endReason = .turnModel(probability: 0.8)
        // u-1: 40 samples ended by the turn model; u-2 cut at 50 samples (max_utterance), u-3 its rest,
        // cut by a new start (interrupted); u-4 open at the end of input.
        let acts = run(&m, frames: 12, size: 20, marks: [0: FrameMarks(speechStart: true), 1: endMark,
                                                         3: FrameMarks(speechStart: true), 8: FrameMarks(speechStart: true)])
        #expect(ends(acts) == ["u-1 turn_model", "u-2 max_utterance", "u-3 interrupted", "u-4 max_utterance", "u-5 end_of_stream"])
        let lasts = slices(acts).filter(\.info.isLast)
        #expect(lasts.first?.marks.endReason == .turnModel(probability: 0.8))
        #expect(lasts.last?.marks.endReason == .endOfStream)
    }

    @Test func aWakeMarkStartsAFlowThatTheNextSpeechStartContinues() {
        var m = SlicerStateMachine(format: format, mode: .utterance, sliceFrames: 20, prefix: "w")
        var wake = FrameMarks()
        wake.wake = WakeMark(word: "hey_jarvis", score: 0.9)
        var noSpeech = FrameMarks(speechEnd: true)
        noSpeech.endReason = .wakeTimeout
        // Wake at 2, speech 4..6 in the same flow; wake at 8 with no speech, timed out at 9.
        let acts = run(&m, frames: 12, size: 20, marks: [2: wake, 4: FrameMarks(speechStart: true), 6: FrameMarks(speechEnd: true),
                                                         8: wake, 9: noSpeech])
        #expect(ends(acts) == ["w-1 silence", "w-2 wake_timeout"])
        #expect(slices(acts).first?.samples.first == 40)
        #expect(slices(acts).filter { $0.info.voiceID == "w-1" }.count == 5)
    }
}
