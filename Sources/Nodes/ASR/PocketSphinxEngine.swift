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
    let alternatives: Int

    init(settings: PocketSphinxSettings, partialIntervalMs: Int64, alternatives: Int = 0) {
        self.settings = settings
        self.partialIntervalMs = partialIntervalMs
        self.alternatives = alternatives
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
                let limit = alternatives
                let (text, others) = try await worker.run { () -> (String, [ASRAlternative]) in
                    let text = decoder.end()
                    return (text, text.isEmpty ? [] : decoder.alternatives(limit))
                }
                try await results.send(.final(ASRTranscript(text: text, voiceID: utterance.voiceID, seq: utterance.seq,
                                                             startMs: utterance.startMs, endMs: endMs, alternatives: others)))
                try await results.send(.utteranceEnd(voiceID: utterance.voiceID, seq: utterance.seq))
            }
        }
    }

    /// The `asr` node parameters of `engine: pocketsphinx`. Without `jsgf`, `keyphrase` or `kws`
    /// it recognizes free speech with the language model.
    public struct Configuration: ASREngineConfiguration {
        /// Model under `/usr/share/pocketsphinx/model`; `nil` = `en-us`.
        public var language: String?
        /// Acoustic model directory (`-hmm`); `nil` = the language's.
        public var modelDir: String?
        /// Pronunciation dictionary; `nil` = the language's.
        public var dict: String?
        /// N-gram language model; `nil` = the language's.
        public var lm: String?
        /// JSGF grammar file.
        public var jsgf: String?
        /// A phrase to spot (keyword spotting).
        public var keyphrase: String?
        /// Keyphrase list file.
        public var kws: String?
        /// Detection threshold for ``keyphrase``; `nil` = 1e-20.
        public var kwsThreshold: Double?

        /// The parameters that only `engine: pocketsphinx` uses.
        public static let parameters = [
            ParamSpec("language", .string, doc: "pocketsphinx: model under /usr/share/pocketsphinx/model (default en-us)"),
            ParamSpec("model_dir", .path, doc: "pocketsphinx: acoustic model directory (-hmm; default /usr/share/pocketsphinx/model/<language>/<language>)"),
            ParamSpec("dict", .path, doc: "pocketsphinx: pronunciation dictionary (default cmudict-<language>.dict next to the model)"),
            ParamSpec("lm", .path, doc: "pocketsphinx: n-gram language model (default <language>.lm.bin next to the model)"),
            ParamSpec("jsgf", .path, doc: "pocketsphinx: JSGF grammar file; recognizes only what the grammar allows"),
            ParamSpec("keyphrase", .string, doc: "pocketsphinx: spot this phrase (keyword spotting) instead of free speech"),
            ParamSpec("kws", .path, doc: "pocketsphinx: keyphrase list file, one phrase per line with an optional /threshold/"),
            ParamSpec("kws_threshold", .double, doc: "pocketsphinx: detection threshold for `keyphrase` (default 1e-20; smaller misses less)"),
        ]

        /// Conflicting searches and missing model files (checked without loading anything).
        public func problems() -> [String] { PocketSphinxSettings.check(self) }
    }

    /// Engine registration.
    public static let descriptor = ASREngineDescriptor(
        name: "pocketsphinx", summary: "embedded CMU PocketSphinx, Debian's pocketsphinx-en-us model",
        configuration: Configuration.self,
        make: { c, node, _ in
            PocketSphinxEngine(settings: PocketSphinxSettings(configuration: c), partialIntervalMs: Int64(node.partialIntervalMs),
                               alternatives: node.alternatives)
        })
}
