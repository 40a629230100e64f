import Foundation
import PipelineCore
import TencentASR

/// `engine: tencent` of the `asr` node: Tencent Cloud real-time speech recognition over
/// WebSocket (API v2, `wss://asr.cloud.tencent.com/asr/v2/<appid>`).
///
/// The server's VAD finds utterances (`needvad=1` unless `params:` says otherwise), so all audio
/// is streamed, marked or not; an utterance reported while an input utterance (VAD/slicer) is
/// open takes its voice id, otherwise `<connection voice id>-<index>`.
///
/// ```yaml
/// asr: { type: asr, engine: tencent, engine_model_type: 16k_zh, params: { vad_silence_time: 800 } }
/// ```
/// Credentials default to `TENCENTCLOUD_APPID`, `TENCENTCLOUD_SECRET_ID`, `TENCENTCLOUD_SECRET_KEY`.
public struct TencentASREngine: ASREngine {
    /// The settings.
    public let configuration: TencentASRConfiguration

    /// Creates the engine.
    public init(configuration: TencentASRConfiguration) { self.configuration = configuration }

    public var segmentsUnmarkedAudio: Bool { true }

    public func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws {
        // Credentials from the environment are secrets too: kept out of events and logs.
        context.secrets.add(configuration.secretID)
        context.secrets.add(configuration.secretKey)
        let session = TencentASRSession(
            config: configuration, results: results, clock: context.clock,
            makePacer: { context.makePacer() }, logger: context.logger,
            count: { name, n in context.count(name, by: n) })
        try await session.run(inputs: inputs)
    }

    /// The `asr` node parameters of `engine: tencent`, as given (credentials and the endpoint are
    /// resolved by ``TencentASRConfiguration/init(parameters:environment:)`` when the node is made).
    public struct Configuration: ASREngineConfiguration {
        /// AppID; `nil` = `$TENCENTCLOUD_APPID`.
        public var appID: String?
        /// SecretId; `nil` = `$TENCENTCLOUD_SECRET_ID`.
        public var secretID: String?
        /// SecretKey; `nil` = `$TENCENTCLOUD_SECRET_KEY`.
        public var secretKey: String?
        /// Base URL; `nil` = ``TencentEndpoint/default``.
        public var endpoint: String?
        /// Engine model as given; see ``model``.
        public var engineModelType: String?
        /// Extra query parameters.
        public var params: [String: String]?
        /// PEM file of CA certificates to trust instead of the system's.
        public var caFile: String?
        /// Audio held while reconnecting, in milliseconds; `nil` = ``TencentASRConfiguration/defaultMaxHeldMs``.
        public var holdMs: Int?
        /// Consecutive reconnection attempts; `nil` = the ``TencentReconnectPolicy`` default.
        public var reconnectAttempts: Int?
        /// The service's own options, checked (`nil` = the service's default).
        public var filterDirty: Int?
        public var filterModal: Int?
        public var filterPunc: Int?
        public var convertNumMode: String?
        public var wordInfo: Int?
        public var hotwordID: String?
        public var hotwordList: String?
        public var customizationID: String?
        public var vadSilenceTime: Int?
        public var noiseThreshold: Double?
        public var reinforceHotword: Int?
        public var needvad: Int?
        public var maxSpeakTime: Int?
        /// Silence after which a connection is ended cleanly (the next audio opens a new one).
        public var idleEndMs: Int?
        /// Deadline of the opening handshake, in milliseconds.
        public var handshakeTimeoutMs: Int?
        /// Deadline of the final result after `{"type": "end"}`, in milliseconds.
        public var finalTimeoutMs: Int?

        enum CodingKeys: String, CodingKey {
            case appID = "app_id", secretID = "secret_id", secretKey, endpoint, engineModelType, params, caFile, holdMs, reconnectAttempts
            case filterDirty, filterModal, filterPunc, convertNumMode, wordInfo, hotwordID = "hotword_id", hotwordList
            case customizationID = "customization_id", vadSilenceTime, noiseThreshold, reinforceHotword, needvad, maxSpeakTime
            case idleEndMs, handshakeTimeoutMs, finalTimeoutMs
        }

        /// The service options given as typed parameters, as query parameters.
        public var serviceParameters: [String: String] {
            var p: [String: String] = [:]
            func put(_ key: String, _ value: (some CustomStringConvertible)?) { if let value { p[key] = value.description } }
            put("filter_dirty", filterDirty); put("filter_modal", filterModal); put("filter_punc", filterPunc)
            put("convert_num_mode", convertNumMode); put("word_info", wordInfo); put("hotword_id", hotwordID)
            put("hotword_list", hotwordList); put("customization_id", customizationID); put("vad_silence_time", vadSilenceTime)
            put("noise_threshold", noiseThreshold); put("reinforce_hotword", reinforceHotword); put("needvad", needvad)
            put("max_speak_time", maxSpeakTime)
            return p
        }

        /// The parameters that only `engine: tencent` uses.
        public static let parameters = [
            ParamSpec("app_id", .string, doc: "tencent: AppID (default: $TENCENTCLOUD_APPID)"),
            ParamSpec("secret_id", .string, secret: true, doc: "tencent: SecretId (default: $TENCENTCLOUD_SECRET_ID)"),
            ParamSpec("secret_key", .string, secret: true, doc: "tencent: SecretKey (default: $TENCENTCLOUD_SECRET_KEY)"),
            ParamSpec("endpoint", .string, doc: "tencent: base URL (default wss://asr.cloud.tencent.com), e.g. ws://127.0.0.1:9001 for a private deployment"),
            ParamSpec("engine_model_type", .string, doc: "tencent: engine model (default 16k_zh)"),
            ParamSpec("params", .stringMap, doc: "tencent: other query parameters of the service, passed as given (the options below are checked parameters of their own)"),
            ParamSpec("filter_dirty", .int(0...2), doc: "tencent: profanity: 0 keep (service default), 1 remove, 2 replace with *"),
            ParamSpec("filter_modal", .int(0...2), doc: "tencent: filler words: 0 keep (service default), 1 partly, 2 strictly removed"),
            ParamSpec("filter_punc", .int(0...1), doc: "tencent: 1 removes the sentence-final full stop"),
            ParamSpec("convert_num_mode", .choice(["0", "1", "3"]), doc: "tencent: numbers: 0 as words, 1 smart digits (service default), 3 mathematical digits"),
            ParamSpec("word_info", .int(0...2), doc: "tencent: word timings in `transcript` events (`words`): 1 without, 2 with punctuation"),
            ParamSpec("hotword_id", .string, doc: "tencent: hotword table id"),
            ParamSpec("hotword_list", .string, doc: "tencent: temporary hotwords `word|weight,...` (weight 1-11 or 100, at most 128)"),
            ParamSpec("customization_id", .string, doc: "tencent: self-learning model id"),
            ParamSpec("vad_silence_time", .int(240...2000), doc: "tencent: silence ending a sentence, ms (service default 1000; needs needvad 1)"),
            ParamSpec("noise_threshold", .double(-1...1), doc: "tencent: noise threshold (service default 0; higher: more is noise)"),
            ParamSpec("reinforce_hotword", .int(0...1), doc: "tencent: 1 forces homophones of hotwords to the hotword"),
            ParamSpec("needvad", .int(0...1), doc: "tencent: server-side sentence segmentation (default 1 here)"),
            ParamSpec("max_speak_time", .int(5000...90000), doc: "tencent: force a sentence break after this many ms"),
            ParamSpec("idle_end_ms", .int(0...5800), doc: "tencent: after this much time without audio (pauses between utterances) the connection ends cleanly and the next audio opens a new one; 0 = never (default 4000; the service drops connections idle 15 s and warns past 6 s)"),
            ParamSpec("handshake_timeout_ms", .int(100...120_000), doc: "tencent: deadline for the connection and the service's first answer (default 10000)"),
            ParamSpec("final_timeout_ms", .int(100...600_000), doc: "tencent: deadline for the final result after the end of the audio (default 15000)"),
            ParamSpec("ca_file", .string, doc: "tencent: PEM file of CA certificates to trust instead of the system's"),
            ParamSpec("hold_ms", .int(0...600_000), doc: "tencent: audio held while reconnecting and not yet recognized (default 30000); older audio is dropped and counted"),
            ParamSpec("reconnect_attempts", .int(0...1000), doc: "tencent: consecutive reconnection attempts after a dropped connection before giving up (default 6)"),
        ]

        /// The engine model: `engine_model_type`, or ``TencentASRConfiguration/defaultEngineModelType``.
        public var model: String { engineModelType ?? TencentASRConfiguration.defaultEngineModelType }

        /// Mono s16 at the model's rate (8 kHz for `8k_*` models, else 16 kHz).
        public var inputFormat: AudioFormat {
            AudioFormat(sampleRate: TencentASRConfiguration.sampleRate(engineModelType: model), channels: 1)
        }

        /// Problems found without opening anything (credentials are only looked for when the node
        /// starts, so a graph validates without them).
        public func problems() -> [String] {
            var problems: [String] = []
            if let e = endpoint, !e.isEmpty, TencentEndpoint(e) == nil {
                problems.append("endpoint \"\(e)\": expected ws://host[:port][/prefix] or wss://...")
            }
            if let ca = caFile, !FileManager.default.isReadableFile(atPath: ca) {
                problems.append("ca_file \"\(ca)\": no such readable file")
            }
            if !(model.hasPrefix("16k_") || model.hasPrefix("8k_")) {
                problems.append("engine_model_type \"\(model)\": expected a 16k_* or 8k_* model such as 16k_zh")
            }
            for key in (params ?? [:]).keys.sorted() where TencentASRConfiguration.reservedParameters.contains(key) {
                problems.append("params.\(key): set by the client itself and cannot be overridden")
            }
            for key in (params ?? [:]).keys.sorted() where serviceParameters[key] != nil {
                problems.append("params.\(key): also given as the parameter `\(key)`; give it once")
            }
            if let list = hotwordList, let problem = Self.hotwordListProblem(list) { problems.append(problem) }
            if vadSilenceTime != nil, needvad == 0 { problems.append("vad_silence_time needs needvad: 1") }
            return problems
        }

        /// Checks `word|weight,word|weight,...` as the service documents it.
        static func hotwordListProblem(_ list: String) -> String? {
            let entries = list.split(separator: ",", omittingEmptySubsequences: false)
            if entries.count > 128 { return "hotword_list: \(entries.count) entries; the service takes at most 128" }
            for e in entries {
                let parts = e.split(separator: "|", omittingEmptySubsequences: false)
                guard parts.count == 2, !parts[0].isEmpty, parts[0].count <= 30, let w = Int(parts[1]), (1...11).contains(w) || w == 100 else {
                    return "hotword_list: entry \"\(e.prefix(40))\": expected word|weight with a word of at most 30 characters and a weight 1-11 or 100"
                }
            }
            return nil
        }
    }

    /// The engine's entry in ``ASREngines``.
    public static let descriptor = ASREngineDescriptor(
        name: "tencent",
        summary: "Tencent Cloud real-time speech recognition (WebSocket API v2)",
        configuration: Configuration.self,
        make: { c, _, env in TencentASREngine(configuration: try TencentASRConfiguration(parameters: c, environment: env.variables)) })
}
