import PipelineCore

extension EventName {
    /// `tts`: the selected engine could not start and `fallback` speaks instead (`engine`, `fallback`, `reason`).
    public static let ttsFallback: EventName = "tts_fallback"
    /// `tts`: part of a text was not spoken (`text`: what was left out, `reason`).
    public static let ttsSkipped: EventName = "tts_skipped"
}

/// Something a synthesizer has to tell beyond its audio: that it fell back to another engine, that it
/// left letters out. The `tts` node emits each as an event.
struct SynthesisNotice: Sendable {
    let name: EventName
    let fields: [(String, EventValue)]
}

/// A synthesizer with notices: the `tts` node takes them (``takeNotices()``) after ``SpeechSynthesizer/start()``
/// and after each sentence, and emits them as events in order.
protocol ReportingSynthesizer: SpeechSynthesizer {
    /// The notices since the last call, oldest first.
    func takeNotices() -> [SynthesisNotice]
}
