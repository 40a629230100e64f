import PipelineCore

/// Whisper's own error codes: its library, its model, a decoder state and a decode that failed.
extension NodeErrorCode {
    public static let whisperDecode: NodeErrorCode = "whisper_decode"
    public static let whisperLibraryMissing: NodeErrorCode = "whisper_library_missing"
    public static let whisperModel: NodeErrorCode = "whisper_model"
    public static let whisperState: NodeErrorCode = "whisper_state"
}
