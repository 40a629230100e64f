/// An error from the digital-human API: a non-zero `Header.Code`, a transport failure or a
/// response that could not be read.
public struct IVHError: Error, Sendable, CustomStringConvertible {
    /// What kind of failure.
    public enum Kind: Sendable, Hashable {
        /// The server answered with a non-zero `Header.Code`.
        case api(Int)
        /// HTTP status other than 2xx without a readable body.
        case http(Int)
        /// Connection, TLS or timeout failure.
        case transport
        /// The response was not the JSON the protocol describes.
        case badResponse
        /// Credentials missing.
        case configuration
    }

    /// The kind of failure.
    public var kind: Kind
    /// The server's message or a description of the failure (never contains credentials).
    public var message: String
    /// The API operation (`newsession`, `commandchannel`, ...).
    public var operation: String

    /// Creates an error.
    public init(_ kind: Kind, _ message: String, operation: String) {
        self.kind = kind
        self.message = message
        self.operation = operation
    }

    /// The `Header.Code`, when the server gave one.
    public var code: Int? { if case .api(let c) = kind { c } else { nil } }

    /// Stable code for events and ``NodeError``: `ivh_100008`, `ivh_http_502`, `ivh_transport`, ...
    public var stableCode: String {
        switch kind {
        case .api(let c): "ivh_\(c)"
        case .http(let s): "ivh_http_\(s)"
        case .transport: "ivh_transport"
        case .badResponse: "ivh_bad_response"
        case .configuration: "ivh_configuration"
        }
    }

    public var description: String {
        switch kind {
        case .api(let c):
            let meaning = IVHResultCode.meaning(c)
            let extra = message.isEmpty || message == meaning.text ? "" : " (server: \(message))"
            return "\(operation): code \(c) — \(meaning.text)\(extra). \(meaning.action)"
        case .http(let s): return "\(operation): HTTP status \(s) \(message)"
        case .transport: return "\(operation): \(message)"
        case .badResponse: return "\(operation): unreadable response: \(message)"
        case .configuration: return "\(operation): \(message)"
        }
    }
}

/// Documented meanings of `Header.Code` values of the interactive digital-human API.
public enum IVHResultCode {
    /// What a code means and what to do about it.
    public struct Meaning: Sendable, Hashable {
        /// What happened.
        public var text: String
        /// What to do.
        public var action: String
    }

    /// The code that means success.
    public static let success = 0

    /// The published table.
    public static let table: [Int: Meaning] = [
        100000: .init(text: "internal error", action: "Retry, or contact support."),
        -101000: .init(text: "internal error", action: "Retry, or contact support."),
        -101001: .init(text: "not enough rendering capacity", action: "Retry later, or contact support."),
        -101002: .init(text: "image download failed", action: "Retry, or contact support."),
        -111001: .init(text: "updating stream parameters failed", action: "Retry, or contact support."),
        -111002: .init(text: "connection closed abnormally", action: "Retry, or contact support."),
        -111003: .init(text: "loading the avatar model failed", action: "Retry, or contact support."),
        -111004: .init(text: "creating the stream timed out", action: "Retry, or contact support."),
        -111005: .init(text: "driving the avatar with text or audio failed", action: "Read the message; contact support for system errors."),
        100001: .init(text: "invalid request parameters", action: "Check field formats, lengths and types against the protocol."),
        100002: .init(text: "invalid parameter value", action: "Check the parameter values against the protocol."),
        100003: .init(text: "invalid request parameters", action: "Check field formats, lengths and types against the protocol."),
        100005: .init(text: "no permission for this operation or session", action: "Check that the session belongs to this appkey's account and that the account may use it."),
        100009: .init(text: "resource does not exist", action: "Check the ids used; they may be outside this account's permissions."),
        100013: .init(text: "no valid hour package or balance", action: "Check the account's packages and balance."),
        100016: .init(text: "avatar asset not found", action: "Check the avatar asset key."),
        100008: .init(text: "over quota (concurrency limit reached)", action: "Close unused sessions (`voicepipe avatar sessions`) or raise the quota."),
        100012: .init(text: "requests too frequent", action: "Send less often."),
        100014: .init(text: "concurrency quota insufficient or expired", action: "Check the quota and its validity period."),
        100015: .init(text: "avatar has expired", action: "Check the avatar's validity period."),
        110001: .init(text: "request body too large", action: "Audio is sent too fast or in too large packets, or the text is too long; keep packets at 200 ms."),
        110002: .init(text: "risk control triggered", action: "The content was refused by content safety; a dialogue pauses while it holds."),
        110004: .init(text: "speech request failed", action: "Retry, or contact support."),
        110005: .init(text: "record already exists (requests repeated too fast)", action: "Send the request once; wait for its answer before repeating it."),
        110006: .init(text: "no such session (record does not exist)", action: "Check the session id; it may already be closed."),
        110007: .init(text: "digital-human project expired", action: "Check the project's (virtualman key's) validity period."),
        110008: .init(text: "image download failed while changing stream parameters", action: "Retry, or use a smaller background image (under 1 MB)."),
        110013: .init(text: "session closed", action: "Create a new session; `voicepipe avatar status ID` shows why it closed."),
        110014: .init(text: "session not ready", action: "Wait for status 1 and start the session before driving it."),
        110015: .init(text: "command sent at the wrong time and ignored", action: "Follow the command ordering rules."),
        110016: .init(text: "command sent to a session that was not started", action: "Start the session before driving it."),
        110018: .init(text: "session does not exist", action: "Check the session id; it may already be closed."),
        110021: .init(text: "TRTC service in arrears or out of time", action: "Check the TRTC account."),
        110022: .init(text: "session closed by a new session with the same user id", action: "Use a distinct user_id per pipeline."),
        801004: .init(text: "operating too frequently", action: "Send less often."),
        801005: .init(text: "text failed the content safety check", action: "Change the text."),
    ]

    /// The meaning of `code` (a generic one for codes not in the table).
    public static func meaning(_ code: Int) -> Meaning {
        table[code] ?? Meaning(text: "unknown error code", action: "See the digital-human API error code list.")
    }
}
