/// Why speech or an utterance ended: carried in-band on the frame marked `speechEnd` (and on a flow's
/// last slice) and reported as `reason` on `speech_end` and `utterance_end`.
///
/// ```swift
/// Event(name: "speech_end", fields: [("media_ms", .int(1200))] + EndReason.turnModel(probability: 0.93).fields)
/// ```
public enum EndReason: Sendable, Hashable {
    /// The VAD's hang-over: `stop_ms` (or, with a turn model, `max_pause_ms`) of silence.
    case silence
    /// The end-of-turn model judged the turn complete, with this probability.
    case turnModel(probability: Double)
    /// The utterance reached the slicer's `max_utterance_ms` and was split.
    case maxUtterance
    /// The VAD's `end_on_silence_ms` ended the stream.
    case endOnSilence
    /// The input ended.
    case endOfStream
    /// No speech followed a wake word within `listen_timeout_ms`.
    case wakeTimeout
    /// A new utterance (or a wake word) began before this one ended.
    case interrupted

    /// The name reported in events (`silence`, `turn_model`, ...).
    public var name: String {
        switch self {
        case .silence: "silence"
        case .turnModel: "turn_model"
        case .maxUtterance: "max_utterance"
        case .endOnSilence: "end_on_silence"
        case .endOfStream: "end_of_stream"
        case .wakeTimeout: "wake_timeout"
        case .interrupted: "interrupted"
        }
    }

    /// The event fields: `reason`, and `probability` for `turn_model`.
    public var fields: [(String, EventValue)] {
        if case .turnModel(let p) = self {
            return [("reason", .string(name)), ("probability", .double((p * 1000).rounded() / 1000))]
        }
        return [("reason", .string(name))]
    }
}

/// A wake word heard at a frame: set by `wake` on the first frame after the detection, so the
/// `slicer` starts a flow there.
public struct WakeMark: Sendable, Hashable {
    /// The word's name (its model's name, e.g. `hey_jarvis`).
    public var word: String
    /// The classifier's score (0...1).
    public var score: Double

    /// Creates a mark.
    public init(word: String, score: Double) {
        self.word = word
        self.score = score
    }
}
