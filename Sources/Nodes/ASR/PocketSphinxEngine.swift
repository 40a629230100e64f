import Foundation
import PipelineCore

/// `engine: pocketsphinx`: the embedded CMU PocketSphinx decoder (16 kHz mono).
///
/// Decodes each utterance as its audio arrives, on a thread of its own, reporting the best
/// hypothesis as a partial every `partial_interval_ms` of audio (when it changed) and the final
/// result when the utterance ends. Audio outside utterances is ignored: the node (vad, slicer or
/// its own endpointer) decides where utterances are.
public struct PocketSphinxEngine: ASREngine {
    let settings: PocketSphinxSettings
    let partialIntervalMs: Int64

    init(settings: PocketSphinxSettings, partialIntervalMs: Int64 = 300) {
        self.settings = settings
        self.partialIntervalMs = partialIntervalMs
    }

    public var segmentsUnmarkedAudio: Bool { false }

    public func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws {
        let worker = BlockingWorker(name: "pocketsphinx-\(context.id)")
        defer { worker.shutdown() }
        let settings = self.settings
        let decoder = try await worker.run { try PocketSphinxDecoder(settings) }

        var current: (voiceID: String, seq: Int, startMs: Int64)?
        var endMs: Int64 = 0
        var sinceHypothesis: Int64 = 0
        var lastPartial = ""
        for await input in inputs {
            switch input {
            case .utteranceStart(let voiceID, let seq, let startMs):
                try await worker.run { try decoder.start() }
                current = (voiceID, seq, startMs)
                endMs = startMs
                sinceHypothesis = 0
                lastPartial = ""
                try await results.send(.utteranceStart(voiceID: voiceID, seq: seq))
            case .audio(let audio):
                guard let utterance = current else { continue }
                endMs = audio.endMs
                sinceHypothesis += audio.endMs - audio.startMs
                let wantHypothesis = sinceHypothesis >= partialIntervalMs
                if wantHypothesis { sinceHypothesis = 0 }
                let samples = audio.samples
                let hypothesis = try await worker.run { () throws -> String? in
                    try decoder.process(samples)
                    return wantHypothesis ? decoder.hypothesis() : nil
                }
                if let hypothesis, !hypothesis.isEmpty, hypothesis != lastPartial {
                    lastPartial = hypothesis
                    try await results.send(.partial(ASRTranscript(text: hypothesis, voiceID: utterance.voiceID, seq: utterance.seq,
                                                                   startMs: utterance.startMs, endMs: endMs)))
                }
            case .utteranceEnd:
                guard let utterance = current else { continue }
                current = nil
                let text = try await worker.run { decoder.end() }
                try await results.send(.final(ASRTranscript(text: text, voiceID: utterance.voiceID, seq: utterance.seq,
                                                             startMs: utterance.startMs, endMs: endMs)))
                try await results.send(.utteranceEnd(voiceID: utterance.voiceID, seq: utterance.seq))
            }
        }
    }

    /// Engine registration.
    public static let descriptor = ASREngineDescriptor(
        name: "pocketsphinx", summary: "embedded CMU PocketSphinx, Debian's pocketsphinx-en-us model",
        parameters: ["language", "model_dir", "dict", "lm", "jsgf", "keyphrase", "kws", "kws_threshold"],
        check: { PocketSphinxSettings.check($0) },
        make: { config in
            PocketSphinxEngine(settings: PocketSphinxSettings(config: config),
                               partialIntervalMs: Int64(config.int("partial_interval_ms", default: 300)))
        })
}
