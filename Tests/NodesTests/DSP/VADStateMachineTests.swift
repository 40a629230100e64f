import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("VADStateMachine")
struct VADStateMachineTests {
    /// Feeds 20 ms blocks (320 samples at 16 kHz) from a pattern of 1 (speech) and 0 (silence).
    func run(_ pattern: String, start: Int64 = 3 * 320, stop: Int64 = 10 * 320, endOnSilence: Int64 = 0) -> [(Int, VADStateMachine.Action)] {
        var m = VADStateMachine(startSamples: start, stopSamples: stop, endOnSilenceSamples: endOnSilence)
        var out: [(Int, VADStateMachine.Action)] = []
        for (i, c) in pattern.enumerated() {
            for a in m.observe(speech: c == "1", from: Int64(i) * 320, to: Int64(i + 1) * 320) { out.append((i, a)) }
        }
        for a in m.finish() { out.append((pattern.count, a)) }
        return out
    }

    @Test func opensAfterStartAndClosesAfterStop() {
        let acts = run("0000" + "11111111" + "000000000000" + "0")
        #expect(acts.count == 2)
        #expect(acts[0].0 == 6)
        #expect(acts[0].1 == .speechStart(onset: 4 * 320))
        #expect(acts[1].1 == .speechEnd(end: 12 * 320))
        #expect(acts[1].0 == 21)  // 10 blocks of silence after block 11
    }

    @Test func shortBurstsDoNotOpen() {
        #expect(run("0110110110100").isEmpty)
    }

    @Test func shortPausesDoNotClose() {
        let acts = run("1111" + "00000" + "1111" + "00000" + "11")
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .speechEnd(end: 20 * 320, reason: .endOfStream)]
        #expect(acts.map(\.1) == expected)
        #expect(acts[1].0 == 20)  // closed by finish(), at end of input
    }

    @Test func endOnSilenceEndsTheStreamAfterSpeech() {
        // No speech yet: silence never ends the stream.
        #expect(run(String(repeating: "0", count: 50), endOnSilence: 5 * 320).isEmpty)
        let acts = run("11111" + String(repeating: "0", count: 30), stop: 10 * 320, endOnSilence: 15 * 320)
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .speechEnd(end: 5 * 320), .endOfStream]
        #expect(acts.map(\.1) == expected)
        #expect(acts[2].0 == 19)
    }

    @Test func endOnSilenceShorterThanStopClosesFirst() {
        let acts = run("11111" + String(repeating: "0", count: 30), stop: 20 * 320, endOnSilence: 4 * 320)
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .speechEnd(end: 5 * 320, reason: .endOnSilence), .endOfStream]
        #expect(acts.map(\.1) == expected)
        #expect(acts[1].0 == 8 && acts[2].0 == 8)
    }

    @Test func secondUtteranceAfterClose() {
        let acts = run("1111" + String(repeating: "0", count: 12) + "1111" + "0")
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .speechEnd(end: 4 * 320), .speechStart(onset: 16 * 320), .speechEnd(end: 20 * 320, reason: .endOfStream)]
        #expect(acts.map(\.1) == expected)
    }

    @Test func everyEndSaysWhy() {
        #expect(run("1111" + String(repeating: "0", count: 12)).last?.1 == .speechEnd(end: 4 * 320, reason: .silence))
        #expect(run("11111111").last?.1 == .speechEnd(end: 8 * 320, reason: .endOfStream))
        let acts = run("11111" + String(repeating: "0", count: 30), stop: 20 * 320, endOnSilence: 4 * 320)
        #expect(acts[1].1 == .speechEnd(end: 5 * 320, reason: .endOnSilence))
    }

    /// A turn model answering `complete` for the n-th question (0-based).
    func runWithTurnModel(_ pattern: String, answers: [Bool]) -> [(Int, VADStateMachine.Action)] {
        var m = VADStateMachine(startSamples: 3 * 320, stopSamples: 5 * 320, maxPauseSamples: 20 * 320)
        var out: [(Int, VADStateMachine.Action)] = []
        var asked = 0
        for (i, c) in pattern.enumerated() {
            for a in m.observe(speech: c == "1", from: Int64(i) * 320, to: Int64(i + 1) * 320) {
                out.append((i, a))
                if case .checkTurn = a {
                    let complete = asked < answers.count && answers[asked]
                    asked += 1
                    for d in m.turnDecision(complete: complete, probability: complete ? 0.9 : 0.1) { out.append((i, d)) }
                }
            }
        }
        return out
    }

    @Test func aCompleteTurnEndsAtTheFirstPause() {
        let acts = runWithTurnModel("11111" + String(repeating: "0", count: 30), answers: [true])
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .checkTurn(end: 1600), .speechEnd(end: 1600, reason: .turnModel(probability: 0.9))]
        #expect(acts.map(\.1) == expected)
        #expect(acts[2].0 == 9)  // after stop (5 blocks), not max_pause (20)
    }

    @Test func anIncompleteTurnWaitsForSpeechOrTheLongestPause() {
        // A pause of 12 blocks inside the turn: asked once, incomplete, speech resumes; then the end
        // is incomplete too and the turn closes after the longest pause (20 blocks) on silence.
        let acts = runWithTurnModel("11111" + String(repeating: "0", count: 12) + "1111" + String(repeating: "0", count: 25), answers: [false, false])
        let expected: [VADStateMachine.Action] = [.speechStart(onset: 0), .checkTurn(end: 1600), .checkTurn(end: 6720), .speechEnd(end: 6720, reason: .silence)]
        #expect(acts.map(\.1) == expected)
        #expect(acts[3].0 == 40)
    }

    @Test func aLateCompleteAnswerAfterTheEndChangesNothing() {
        var m = VADStateMachine(startSamples: 320, stopSamples: 320, maxPauseSamples: 640)
        _ = m.observe(speech: true, from: 0, to: 320)
        #expect(m.observe(speech: false, from: 320, to: 640) == [.checkTurn(end: 320)])
        #expect(m.observe(speech: false, from: 640, to: 960) == [.speechEnd(end: 320, reason: .silence)])
        #expect(m.turnDecision(complete: true, probability: 0.8).isEmpty)
    }

    /// turn_policy scaled: the answer sets the pause to wait out; speech resuming first keeps the turn.
    @Test func aScaledWaitEndsThePauseAtItsLengthUnlessSpeechResumes() {
        // 320-sample blocks; stop after 2 blocks of silence, longest pause 20 blocks.
        var m = VADStateMachine(startSamples: 320, stopSamples: 640, maxPauseSamples: 6400)
        _ = m.observe(speech: true, from: 0, to: 320)
        #expect(m.observe(speech: false, from: 320, to: 640).isEmpty)
        #expect(m.observe(speech: false, from: 640, to: 960) == [.checkTurn(end: 320)])
        // Unsure (a wait of 6 blocks = 1920 samples of silence): nothing yet after 4 blocks of silence...
        #expect(m.turnWait(probability: 0.4, waitSamples: 1920).isEmpty)
        #expect(m.observe(speech: false, from: 960, to: 1280).isEmpty)
        // ...speech resumes: the turn goes on and the wait is forgotten.
        _ = m.observe(speech: true, from: 1280, to: 1600)
        for b in 0..<2 { #expect(m.observe(speech: false, from: 1600 + Int64(b) * 320, to: 1920 + Int64(b) * 320).count == (b == 1 ? 1 : 0)) }
        // Sure (a wait shorter than the silence already seen): it ends at once, with the model's reason.
        #expect(m.turnWait(probability: 0.95, waitSamples: 320) == [.speechEnd(end: 1600, reason: .turnModel(probability: 0.95))])
        #expect(!m.inSpeech)
    }

    @Test func aScaledWaitEndsWhenTheSilenceReachesIt() {
        var m = VADStateMachine(startSamples: 320, stopSamples: 640, maxPauseSamples: 6400)
        _ = m.observe(speech: true, from: 0, to: 320)
        _ = m.observe(speech: false, from: 320, to: 640)
        _ = m.observe(speech: false, from: 640, to: 960)
        #expect(m.turnWait(probability: 0.6, waitSamples: 1600).isEmpty)
        var ends: [(Int64, VADStateMachine.Action)] = []
        for b in 3..<30 {
            for a in m.observe(speech: false, from: Int64(b) * 320, to: Int64(b + 1) * 320) { ends.append((Int64(b + 1) * 320, a)) }
        }
        #expect(ends.map(\.1) == [.speechEnd(end: 320, reason: .turnModel(probability: 0.6))])
        // At 1600 samples of silence after the last speech (sample 320 + 1600), not at the longest pause.
        #expect(ends.first?.0 == 1920)
    }
}
