import PipelineCore
import Testing
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
        guard case .flowStart(let id, _) = acts.first, case .flowEnd(let id2, let lastSeq, _) = acts.last else {
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
}
