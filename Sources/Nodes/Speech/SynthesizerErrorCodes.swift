import PipelineCore

/// The speech services' own error codes: Tencent's synthesizer and Wyoming's.
extension NodeErrorCode {
    public static let tencentDisconnected: NodeErrorCode = "tencent_disconnected"
    public static let tencentTimeout: NodeErrorCode = "tencent_timeout"
    public static let tencentUnreachable: NodeErrorCode = "tencent_unreachable"
    public static let wyomingAudioFormat: NodeErrorCode = "wyoming_audio_format"
    public static let wyomingDisconnected: NodeErrorCode = "wyoming_disconnected"
    public static let wyomingTimeout: NodeErrorCode = "wyoming_timeout"
    public static let wyomingUnreachable: NodeErrorCode = "wyoming_unreachable"
}
