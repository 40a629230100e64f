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

    /// The engine's entry in ``ASREngines``.
    public static let descriptor = ASREngineDescriptor(
        name: "tencent",
        summary: "Tencent Cloud real-time speech recognition (WebSocket API v2)",
        parameters: ["app_id", "secret_id", "secret_key", "endpoint", "engine_model_type", "params", "ca_file"],
        inputFormat: { config in
            AudioFormat(sampleRate: TencentASRConfiguration.sampleRate(engineModelType: config.string("engine_model_type") ?? "16k_zh"), channels: 1)
        },
        check: { TencentASRConfiguration.check($0) },
        make: { TencentASREngine(configuration: try TencentASRConfiguration(config: $0)) })
}
