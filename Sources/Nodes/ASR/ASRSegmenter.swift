import Foundation
import PipelineCore

/// Turns the `asr` node's audio, with its in-band markers, into a well-formed stream of
/// ``ASRInput``s: utterance start, audio, utterance end.
///
/// A pure state machine. Utterances come from, in order of preference:
/// 1. the slicer's marks (`slice.voiceID`, `isFirst`, `isLast`);
/// 2. the VAD's marks (`speechStart`, `speechEnd`), with a voice id made here;
/// 3. when neither has been seen and the engine does not segment by itself, the energy
///    ``ASREndpointer``.
///
/// Each utterance it ends gets a reason (``EndReason``), kept by voice id until ``takeReason(_:)``:
/// the mark's `endReason` (`silence` without one), `interrupted` when a new utterance starts before
/// the open one ended, `end_of_stream` at the end of input.
struct ASRSegmenter {
    /// Run the endpointer on unmarked audio.
    var endpointing: Bool
    /// Makes voice ids for utterances that have none from the slicer.
    var makeVoiceID: () -> String = ASRSegmenter.randomVoiceID

    private var sawMarks = false
    private var open = false
    private var nextSeq = 0
    private var endpointer: ASREndpointer
    /// Chunks held by the endpointer, by index.
    private var held: [Int: ASRAudio] = [:]
    private var chunkIndex = 0
    /// Why each ended utterance ended, by voice id, until taken.
    private var reasons: [String: EndReason] = [:]

    init(endpointing: Bool, silenceMs: Int64 = 600) {
        self.endpointing = endpointing
        self.endpointer = ASREndpointer(silenceMs: silenceMs)
    }

    /// True while an utterance is open.
    var isInUtterance: Bool { open }

    /// Handles one chunk of audio.
    mutating func push(_ audio: ASRAudio) -> [ASRInput] {
        let marks = audio.marks
        var out: [ASRInput] = []
        if let slice = marks.slice {
            if !sawMarks { out += flushEndpointer() }
            sawMarks = true
            if slice.isFirst || !open || slice.voiceID != currentVoiceID {
                if open { out.append(end(.interrupted)) }
                out.append(start(voiceID: slice.voiceID, at: audio.startMs))
            }
            out.append(.audio(audio))
            if slice.isLast { out.append(end(marks.endReason ?? .silence)) }
            return out
        }
        if marks.speechStart || marks.speechEnd {
            if !sawMarks { out += flushEndpointer() }
            sawMarks = true
        }
        if sawMarks || !endpointing {
            if marks.speechStart {
                if open { out.append(end(.interrupted)) }
                out.append(start(voiceID: makeVoiceID(), at: audio.startMs))
            }
            out.append(.audio(audio))
            if marks.speechEnd && open { out.append(end(marks.endReason ?? .silence)) }
            return out
        }
        let index = chunkIndex
        chunkIndex += 1
        held[index] = audio
        let ms = max(audio.endMs - audio.startMs, 1)
        return perform(endpointer.push(levelDB: ASREndpointer.level(audio.samples), durationMs: ms))
    }

    /// End of stream: releases held audio and ends an open utterance.
    mutating func finish() -> [ASRInput] {
        var out = flushEndpointer()
        if open { out.append(end(.endOfStream)) }
        return out
    }

    private var currentVoiceID: String?

    private mutating func start(voiceID: String, at ms: Int64) -> ASRInput {
        open = true
        currentVoiceID = voiceID
        defer { nextSeq += 1 }
        return .utteranceStart(voiceID: voiceID, seq: nextSeq, startMs: ms)
    }

    /// The reason `voiceID` ended (forgotten once taken); nil when it has not ended here.
    mutating func takeReason(_ voiceID: String) -> EndReason? {
        reasons.removeValue(forKey: voiceID)
    }

    private mutating func end(_ reason: EndReason) -> ASRInput {
        if let currentVoiceID {
            if reasons.count > 1000 { reasons.removeAll() }
            reasons[currentVoiceID] = reason
        }
        open = false
        currentVoiceID = nil
        return .utteranceEnd
    }

    private mutating func flushEndpointer() -> [ASRInput] {
        guard !held.isEmpty || endpointer.inSpeech else { return [] }
        return perform(endpointer.finish())
    }

    private mutating func perform(_ actions: [ASREndpointer.Action]) -> [ASRInput] {
        var out: [ASRInput] = []
        for action in actions {
            switch action {
            case .audio(let i):
                if let a = held.removeValue(forKey: i) { out.append(.audio(a)) }
            case .start(let i):
                out.append(start(voiceID: makeVoiceID(), at: held[i]?.startMs ?? 0))
            case .end:
                if open { out.append(end(.silence)) }
            }
        }
        return out
    }

    /// A fresh 16-character voice id.
    static func randomVoiceID() -> String {
        String(UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased().prefix(16))
    }
}
