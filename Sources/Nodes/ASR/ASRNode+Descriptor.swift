import Foundation
import PipelineCore

extension ASRNode {
    /// Every parameter of the `asr` node, for all engines. Engine-specific ones have no default
    /// here (their engine applies it), so validation can tell when one is given to another engine.
    static let parameters: [ParamSpec] = [
        ParamSpec("engine", .choice(ASREngines.all.map(\.name)), default: .string(ASREngines.defaultName),
                  doc: "recognizer: " + ASREngines.all.map { "\($0.name) (\($0.summary))" }.joined(separator: "; ")),
        ParamSpec("partial_interval_ms", .int(20...10_000), default: .int(300),
                  doc: "audio between partial hypotheses while speech goes on"),
        ParamSpec("endpoint_silence_ms", .int(100...10_000), default: .int(600),
                  doc: "with no vad/slicer marks upstream (and an engine that does not segment itself): silence that ends an utterance"),
        // pocketsphinx
        ParamSpec("language", .string, doc: "pocketsphinx: model under /usr/share/pocketsphinx/model (default en-us)"),
        ParamSpec("model_dir", .string, doc: "pocketsphinx: acoustic model directory (-hmm; default /usr/share/pocketsphinx/model/<language>/<language>)"),
        ParamSpec("dict", .string, doc: "pocketsphinx: pronunciation dictionary (default cmudict-<language>.dict next to the model)"),
        ParamSpec("lm", .string, doc: "pocketsphinx: n-gram language model (default <language>.lm.bin next to the model)"),
        ParamSpec("jsgf", .string, doc: "pocketsphinx: JSGF grammar file; recognizes only what the grammar allows"),
        ParamSpec("keyphrase", .string, doc: "pocketsphinx: spot this phrase (keyword spotting) instead of free speech"),
        ParamSpec("kws", .string, doc: "pocketsphinx: keyphrase list file, one phrase per line with an optional /threshold/"),
        ParamSpec("kws_threshold", .double, doc: "pocketsphinx: detection threshold for `keyphrase` (default 1e-20; smaller misses less)"),
        // tencent
        ParamSpec("app_id", .string, doc: "tencent: AppID (default: $TENCENTCLOUD_APPID)"),
        ParamSpec("secret_id", .string, secret: true, doc: "tencent: SecretId (default: $TENCENTCLOUD_SECRET_ID)"),
        ParamSpec("secret_key", .string, secret: true, doc: "tencent: SecretKey (default: $TENCENTCLOUD_SECRET_KEY)"),
        ParamSpec("endpoint", .string, doc: "tencent: base URL (default wss://asr.cloud.tencent.com), e.g. ws://127.0.0.1:9001 for a private deployment"),
        ParamSpec("engine_model_type", .string, doc: "tencent: engine model (default 16k_zh)"),
        ParamSpec("params", .stringMap, doc: "tencent: extra query parameters (needvad, vad_silence_time, hotword_id, filter_punc, ...)"),
        ParamSpec("ca_file", .string, doc: "tencent: PEM file of CA certificates to trust instead of the system's"),
        ParamSpec("hold_ms", .int(0...600_000), doc: "tencent: audio held while reconnecting and not yet recognized (default 30000); older audio is dropped and counted"),
        ParamSpec("reconnect_attempts", .int(0...1000), doc: "tencent: consecutive reconnection attempts after a dropped connection before giving up (default 6)"),
    ]

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "asr", summary: "Speech recognition: utterances in, transcripts out (engines: \(ASREngines.all.map(\.name).joined(separator: ", ")))",
        family: "services",
        inputs: [PortSpec("in", [.audio], doc: "audio; utterances from vad/slicer marks, else found by the node or the engine")],
        outputs: [PortSpec.events, PortSpec("text", [.text], required: false, doc: "each final transcript")],
        parameters: parameters,
        format: FormatRule(output: { _, _ in nil }, accepts: { config, format in
            guard let engine = ASREngines.descriptor(config.string("engine", default: ASREngines.defaultName)) else { return nil }
            let wanted = engine.inputFormat(config)
            guard format != wanted else { return nil }
            return "engine \(engine.name) takes \(wanted) audio, got \(format); put a resample node before asr ({ type: resample, rate: \(wanted.sampleRate), channels: \(wanted.channels) })"
        }),
        check: { config in
            let name = config.string("engine", default: ASREngines.defaultName)
            guard let engine = ASREngines.descriptor(name) else { return [] }
            var problems: [String] = []
            for other in ASREngines.all where other.name != name {
                for p in other.parameters where config.has(p) && !engine.parameters.contains(p) {
                    problems.append("parameter '\(p)' belongs to engine \(other.name), but engine is \(name)")
                }
            }
            return problems + engine.check(config)
        },
        make: { try ASRNode(config: $0) })
}
