import PipelineCore

/// The hysteresis of the `vad` node, as a pure value: it sees one classified block at a time
/// (speech or not, with its sample range) and says when speech starts and ends.
///
/// Positions are sample indices (per channel) of the audio the node passes. Speech opens after
/// `startSamples` of consecutive speech blocks (the onset is the first of them), closes after
/// `stopSamples` of silence (the end is the end of the last speech block), and, with
/// `endOnSilenceSamples > 0`, the stream ends once that much silence follows speech.
///
/// With an end-of-turn model (`maxPauseSamples > 0`), `stopSamples` of silence does not close speech
/// by itself: it asks (``Action/checkTurn(end:)``) and the node answers with ``turnDecision(complete:probability:)``.
/// A complete turn ends at once (reason `turn_model`); an incomplete one stays open until speech
/// resumes or the silence reaches `maxPauseSamples` (reason `silence`). Alternatively the answer sets
/// how long to wait (``turnWait(probability:waitSamples:)``): speech ends when the silence reaches it
/// (reason `turn_model`) unless speech resumes first. Every `speechEnd` says why.
///
/// ```swift
/// var m = VADStateMachine(startSamples: 1600, stopSamples: 8000)
/// for action in m.observe(speech: true, from: 0, to: 320) { ... }
/// ```
public struct VADStateMachine: Sendable, Hashable {
    /// What the node must do after a block.
    public enum Action: Sendable, Hashable {
        /// Speech started at sample `onset`.
        case speechStart(onset: Int64)
        /// Speech ended at sample `end` (end of the last speech block), for `reason`.
        case speechEnd(end: Int64, reason: EndReason = .silence)
        /// `stopSamples` of silence followed speech: ask the turn model whether the turn is complete
        /// (the audio up to now), then call ``VADStateMachine/turnDecision(complete:probability:)``.
        case checkTurn(end: Int64)
        /// Enough silence followed speech: end the stream (after any `speechEnd`).
        case endOfStream
    }

    /// Speech needed to open, in samples.
    public let startSamples: Int64
    /// Silence needed to close, in samples.
    public let stopSamples: Int64
    /// Silence after speech that ends the stream; 0 = never.
    public let endOnSilenceSamples: Int64
    /// With a turn model: the longest pause inside a turn the model calls incomplete; 0 = no model.
    public let maxPauseSamples: Int64

    /// True between a start and its end.
    public private(set) var inSpeech = false
    /// True once any speech has been seen.
    public private(set) var hadSpeech = false
    private var runStart: Int64?
    private var lastSpeechEnd: Int64 = 0
    private var ended = false
    /// The turn model was asked during this pause.
    private var asked = false
    /// The end of the last block observed.
    private var lastObserved: Int64 = 0
    /// A wait the model's answer set for this pause (silence, in samples) and that answer.
    private var turnWaitSamples: Int64?
    private var turnProbability = 0.0

    /// Creates a state machine.
    public init(startSamples: Int64, stopSamples: Int64, endOnSilenceSamples: Int64 = 0, maxPauseSamples: Int64 = 0) {
        self.startSamples = max(1, startSamples)
        self.stopSamples = max(1, stopSamples)
        self.endOnSilenceSamples = max(0, endOnSilenceSamples)
        self.maxPauseSamples = maxPauseSamples > 0 ? max(self.stopSamples, maxPauseSamples) : 0
    }

    /// The turn model's answer to the last ``Action/checkTurn(end:)``: a complete turn ends speech now.
    public mutating func turnDecision(complete: Bool, probability: Double) -> [Action] {
        guard complete, inSpeech, !ended, asked else { return [] }
        inSpeech = false
        asked = false
        return [.speechEnd(end: lastSpeechEnd, reason: .turnModel(probability: probability))]
    }

    /// The turn model's answer to the last ``Action/checkTurn(end:)`` as a wait: speech ends once the
    /// silence reaches `waitSamples` (at once if it already has), unless speech resumes first.
    public mutating func turnWait(probability: Double, waitSamples: Int64) -> [Action] {
        guard inSpeech, !ended, asked else { return [] }
        if lastObserved - lastSpeechEnd >= waitSamples {
            inSpeech = false
            asked = false
            return [.speechEnd(end: lastSpeechEnd, reason: .turnModel(probability: probability))]
        }
        turnWaitSamples = waitSamples
        turnProbability = probability
        return []
    }

    /// Feeds one block `from..<to` classified as speech or not; returns the actions, in order.
    public mutating func observe(speech: Bool, from: Int64, to: Int64) -> [Action] {
        if ended { return [] }
        lastObserved = to
        var actions: [Action] = []
        if speech {
            if inSpeech {
                lastSpeechEnd = to
                asked = false
                turnWaitSamples = nil
            } else {
                let start = runStart ?? from
                runStart = start
                if to - start >= startSamples {
                    inSpeech = true
                    hadSpeech = true
                    lastSpeechEnd = to
                    runStart = nil
                    actions.append(.speechStart(onset: start))
                }
            }
        } else {
            runStart = nil
            let silence = to - lastSpeechEnd
            if inSpeech && maxPauseSamples > 0 {
                if let wait = turnWaitSamples, silence >= wait {
                    inSpeech = false
                    asked = false
                    turnWaitSamples = nil
                    actions.append(.speechEnd(end: lastSpeechEnd, reason: .turnModel(probability: turnProbability)))
                } else if silence >= maxPauseSamples {
                    inSpeech = false
                    asked = false
                    turnWaitSamples = nil
                    actions.append(.speechEnd(end: lastSpeechEnd, reason: .silence))
                } else if silence >= stopSamples && !asked {
                    asked = true
                    actions.append(.checkTurn(end: lastSpeechEnd))
                }
            } else if inSpeech && silence >= stopSamples {
                inSpeech = false
                actions.append(.speechEnd(end: lastSpeechEnd, reason: .silence))
            }
            if hadSpeech && endOnSilenceSamples > 0 && silence >= endOnSilenceSamples {
                if inSpeech {
                    inSpeech = false
                    actions.append(.speechEnd(end: lastSpeechEnd, reason: .endOnSilence))
                }
                ended = true
                actions.append(.endOfStream)
            }
        }
        return actions
    }

    /// End of input: closes open speech.
    public mutating func finish() -> [Action] {
        guard inSpeech, !ended else { return [] }
        inSpeech = false
        ended = true
        return [.speechEnd(end: lastSpeechEnd, reason: .endOfStream)]
    }
}
