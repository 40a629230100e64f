import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// The asr node's utterance finding, driven synchronously.
@Suite("ASR segmenter")
struct ASRSegmenterTests {
    static let format = AudioFormat(sampleRate: 16000, channels: 1)

    /// 20 ms chunk number `i` of a tone (`voiced`) or silence.
    static func chunk(_ i: Int, voiced: Bool, marks: FrameMarks = .none) -> ASRAudio {
        let samples = voiced ? Signal.sine(frequency: 300, rate: 16000, seconds: 0.02, level: -20) : [Int16](repeating: 0, count: 320)
        return ASRAudio(samples: samples, format: format, pts: Int64(i) * 20_000_000, marks: marks)
    }

    /// A compact trace: S(voice,seq,ms) / a<pts ms> / E.
    static func trace(_ inputs: [ASRInput]) -> [String] {
        inputs.map {
            switch $0 {
            case .utteranceStart(let v, let seq, let ms): "S(\(v),\(seq),\(ms))"
            case .audio(let a): "a\(a.startMs)"
            case .utteranceEnd: "E"
            }
        }
    }

    @Test("slicer marks give utterances with the slicer's voice id")
    func sliceMarks() {
        var s = ASRSegmenter(endpointing: true)
        var out: [ASRInput] = []
        out += s.push(Self.chunk(0, voiced: true, marks: FrameMarks(slice: SliceInfo(voiceID: "v1", seq: 0, isFirst: true, isLast: false))))
        out += s.push(Self.chunk(1, voiced: true, marks: FrameMarks(slice: SliceInfo(voiceID: "v1", seq: 1, isFirst: false, isLast: true))))
        out += s.push(Self.chunk(2, voiced: true, marks: FrameMarks(slice: SliceInfo(voiceID: "v2", seq: 0, isFirst: true, isLast: false))))
        out += s.finish()
        #expect(Self.trace(out) == ["S(v1,0,0)", "a0", "a20", "E", "S(v2,1,40)", "a40", "E"])
    }

    @Test("vad marks give utterances; audio outside them passes as plain audio")
    func vadMarks() {
        var s = ASRSegmenter(endpointing: true)
        s.makeVoiceID = { "x" }
        var out: [ASRInput] = []
        out += s.push(Self.chunk(0, voiced: false))
        out += s.push(Self.chunk(1, voiced: true, marks: FrameMarks(speechStart: true)))
        out += s.push(Self.chunk(2, voiced: true, marks: FrameMarks(speechEnd: true)))
        out += s.push(Self.chunk(3, voiced: false))
        out += s.push(Self.chunk(4, voiced: true, marks: FrameMarks(speechStart: true)))
        out += s.finish()
        // The first chunk came before any mark: the endpointer held it, and releases it first.
        #expect(Self.trace(out) == ["a0", "S(x,0,20)", "a20", "a40", "E", "a60", "S(x,1,80)", "a80", "E"])
    }

    @Test("the endpointer finds an utterance in unmarked audio, with pre-roll, and loses no audio")
    func endpointer() {
        var s = ASRSegmenter(endpointing: true, silenceMs: 200)
        s.makeVoiceID = { "e" }
        var out: [ASRInput] = []
        // 1 s silence, 0.5 s tone, 1 s silence, 0.3 s tone.
        let plan = Array(repeating: false, count: 50) + Array(repeating: true, count: 25) + Array(repeating: false, count: 50) + Array(repeating: true, count: 15)
        for (i, voiced) in plan.enumerated() { out += s.push(Self.chunk(i, voiced: voiced)) }
        out += s.finish()
        let t = Self.trace(out)
        #expect(t.filter { $0.hasPrefix("a") } == (0..<plan.count).map { "a\($0 * 20)" })
        let starts = t.filter { $0.hasPrefix("S") }
        #expect(starts.count == 2)
        // Starts within the 300 ms pre-roll before the tone at 1000 ms; ends 200 ms of silence after it.
        if case .utteranceStart(_, _, let ms)? = out.first(where: { if case .utteranceStart = $0 { true } else { false } }) {
            #expect(ms >= 700 && ms < 1000)
        }
        let firstEnd = t.firstIndex(of: "E")!
        #expect(t[firstEnd - 1] == "a\(1500 + 180)")
        #expect(t.last == "E")
    }

    @Test("without endpointing, unmarked audio passes with no utterances")
    func noEndpointing() {
        var s = ASRSegmenter(endpointing: false)
        var out: [ASRInput] = []
        for i in 0..<10 { out += s.push(Self.chunk(i, voiced: i > 3)) }
        out += s.finish()
        #expect(Self.trace(out) == (0..<10).map { "a\($0 * 20)" })
    }

    @Test("final texts join with spaces, but not next to CJK text")
    func join() {
        #expect(ASRNode.join(["hello world", "good morning"]) == "hello world good morning")
        #expect(ASRNode.join(["你好", "世界"]) == "你好世界")
        #expect(ASRNode.join([]) == "")
    }

    @Test("each ended utterance keeps its reason until taken")
    func reasons() {
        var s = ASRSegmenter(endpointing: true)
        var ids = ["a", "b", "c"].makeIterator()
        s.makeVoiceID = { ids.next()! }
        var end = FrameMarks(speechEnd: true)
        end.endReason = .turnModel(probability: 0.7)
        _ = s.push(Self.chunk(0, voiced: true, marks: FrameMarks(speechStart: true)))
        _ = s.push(Self.chunk(1, voiced: true, marks: end))
        _ = s.push(Self.chunk(2, voiced: true, marks: FrameMarks(speechStart: true)))
        _ = s.push(Self.chunk(3, voiced: true, marks: FrameMarks(speechStart: true)))
        _ = s.finish()
        #expect(s.takeReason("a") == .turnModel(probability: 0.7))
        #expect(s.takeReason("a") == nil)
        #expect(s.takeReason("b") == .interrupted)
        #expect(s.takeReason("c") == .endOfStream)
    }
}
