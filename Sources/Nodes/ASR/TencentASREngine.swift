import Foundation
import PipelineCore

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

        enum CodingKeys: String, CodingKey {
            case appID = "app_id", secretID = "secret_id", secretKey, endpoint, engineModelType, params, caFile, holdMs, reconnectAttempts
        }

        /// The parameters that only `engine: tencent` uses.
        public static let parameters = [
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
            return problems
        }
    }

    /// The engine's entry in ``ASREngines``.
    public static let descriptor = ASREngineDescriptor(
        name: "tencent",
        summary: "Tencent Cloud real-time speech recognition (WebSocket API v2)",
        configuration: Configuration.self,
        make: { c, _, env in TencentASREngine(configuration: try TencentASRConfiguration(parameters: c, environment: env.variables)) })
}
