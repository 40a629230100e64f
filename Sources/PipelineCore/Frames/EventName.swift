/// The name of an event: what `jsonl-sink` writes as `"event"` and what consumers match on.
///
/// The names shared across node families are declared here, once, so that the node emitting an event and
/// the code reading it (another node, the server, a test) share one constant and a misspelling does not
/// compile; a family's own names (the digital human's `avatar_…`) are declared with the family.
/// Plugins and apps may use their own names as string literals; nothing on the wire changes.
public struct EventName: RawRepresentable, Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral {
    public var rawValue: String
    public init(rawValue: String) { self.rawValue = rawValue }
    public init(_ rawValue: String) { self.rawValue = rawValue }
    public init(stringLiteral value: String) { rawValue = value }
    public var description: String { rawValue }
}

extension EventName {
    public static let aecStats: EventName = "aec_stats"
    public static let bargeIn: EventName = "barge_in"
    public static let captureStarted: EventName = "capture_started"
    public static let captureStopped: EventName = "capture_stopped"
    public static let connected: EventName = "connected"
    public static let deviceLost: EventName = "device_lost"
    public static let deviceRestored: EventName = "device_restored"
    public static let disconnected: EventName = "disconnected"
    public static let drainTimeout: EventName = "drain_timeout"
    /// A telephone keypad digit from a caller (`digit`; `duration_ms` when known).
    public static let dtmf: EventName = "dtmf"
    public static let end: EventName = "end"
    public static let error: EventName = "error"
    public static let finished: EventName = "finished"
    public static let formatConverted: EventName = "format_converted"
    public static let interrupted: EventName = "interrupted"
    public static let jitterStats: EventName = "jitter_stats"
    public static let late: EventName = "late"
    public static let latency: EventName = "latency"
    public static let listenEnd: EventName = "listen_end"
    public static let overrun: EventName = "overrun"
    public static let peerFound: EventName = "peer_found"
    public static let peerLost: EventName = "peer_lost"
    public static let playbackStart: EventName = "playback_start"
    public static let responseEnd: EventName = "response_end"
    public static let responseStart: EventName = "response_start"
    public static let restart: EventName = "restart"
    public static let rtpListening: EventName = "rtp_listening"
    public static let rtpStats: EventName = "rtp_stats"
    public static let sentence: EventName = "sentence"
    public static let speechEnd: EventName = "speech_end"
    public static let speechStart: EventName = "speech_start"
    public static let started: EventName = "started"
    public static let stats: EventName = "stats"
    public static let text: EventName = "text"
    public static let transcript: EventName = "transcript"
    public static let ttsEnd: EventName = "tts_end"
    public static let ttsStart: EventName = "tts_start"
    public static let underrun: EventName = "underrun"
    public static let uploadDone: EventName = "upload_done"
    public static let utteranceEnd: EventName = "utterance_end"
    public static let utteranceStart: EventName = "utterance_start"
    public static let volume: EventName = "volume"
    public static let wake: EventName = "wake"
}

extension EventName {
    /// Compares with a name held as a string (a field read from JSON, a command-line filter).
    public static func == (a: EventName, b: String) -> Bool { a.rawValue == b }
    public static func == (a: String, b: EventName) -> Bool { a == b.rawValue }
}
