import Foundation
import NIOHTTP1
import NIOWebSocket
import PipelineCore

/// What a WebSocket route's wire protocol decides for one session: whether the opening request is
/// accepted, what the client is told when the graph starts, for each event and at the end, and how an
/// error reads. ``ServeSession`` does the rest the same way for every protocol (the graph, the audio,
/// the outbox, the limits). One value per session, created by ``ServeConfiguration/FrontEnd/sessionProtocol()``.
protocol SessionProtocol: Sendable {
    /// Checks the opening request; a refusal is sent to the client and the connection closes.
    mutating func accept(head: HTTPRequestHead, captures: [String: String], route: ServeConfiguration.Route) -> SessionRefusal?
    /// The session's id on the event bus when the protocol names one (Tencent's `voice_id`).
    var sessionID: String? { get }
    /// The messages once the session's graph runs.
    mutating func opened() -> [String]
    /// The messages for one event of the graph (none for events the protocol does not carry).
    mutating func messages(for event: Event) -> [String]
    /// The messages after the graph has finished and its last events are sent (not when the client left).
    mutating func finished() -> [String]
    /// Whether a text message other than the end of the audio ends the session with an error.
    var refusesUnknownText: Bool { get }
    /// The protocol's error message, and the close that follows it.
    func failure(code: Int, name: String, message: String, close: WebSocketErrorCode) -> (text: String, close: WebSocketErrorCode)
}

/// An opening request the protocol refuses: `code` for the metrics and the log, `text` for the client.
struct SessionRefusal: Error {
    var code: String
    var message: String
    var text: String
}

extension ServeConfiguration.FrontEnd {
    /// A fresh protocol state for one WebSocket session of a route of this kind. (Wyoming routes have
    /// their own TCP listener, ``WyomingFrontEnd``, and open no WebSocket session.)
    func sessionProtocol() -> any SessionProtocol {
        switch self {
        case .tencentASR: TencentSessionProtocol()
        case .websocket, .wyoming, .audiosocket, .twilio, .sip: EventLinesProtocol()
        }
    }
}

/// `protocol: websocket`: every event as one JSON line (the `jsonl-sink` format); errors are `error`
/// events of node `serve`, then the close with the given code.
struct EventLinesProtocol: SessionProtocol {
    mutating func accept(head: HTTPRequestHead, captures: [String: String], route: ServeConfiguration.Route) -> SessionRefusal? { nil }
    var sessionID: String? { nil }
    mutating func opened() -> [String] { [] }
    mutating func messages(for event: Event) -> [String] { [event.jsonLine()] }
    mutating func finished() -> [String] { [] }
    var refusesUnknownText: Bool { false }
    func failure(code: Int, name: String, message: String, close: WebSocketErrorCode) -> (text: String, close: WebSocketErrorCode) {
        (Event(.error, node: "serve", fields: [("code", .string(name)), ("message", .string(message))]).jsonLine(), close)
    }
}

/// `protocol: tencent-asr`: Tencent Cloud's real-time ASR v2 as its clients expect it (``TencentFrontEnd``):
/// the signed request checked, `{"code":0,...}` when the graph runs, result messages for transcripts,
/// `final: 1` at the end; errors are the service's codes, after which the connection closes normally.
struct TencentSessionProtocol: SessionProtocol {
    private var voiceID = ""
    private var results = TencentFrontEnd.State()

    mutating func accept(head: HTTPRequestHead, captures: [String: String], route: ServeConfiguration.Route) -> SessionRefusal? {
        voiceID = captures["voice_id"] ?? ""
        switch TencentFrontEnd.check(head: head, captures: captures, route: route) {
        case .failure(let problem):
            voiceID = problem.voiceID
            return SessionRefusal(code: "\(problem.code)", message: problem.message,
                                  text: Self.json(["code": problem.code, "message": problem.message, "voice_id": problem.voiceID]))
        case .success(let v):
            voiceID = v
            return nil
        }
    }

    var sessionID: String? { voiceID.isEmpty ? nil : voiceID }

    mutating func opened() -> [String] {
        [Self.json(["code": 0, "message": "success", "voice_id": voiceID])]
    }

    mutating func messages(for event: Event) -> [String] {
        TencentFrontEnd.messages(for: event, voiceID: voiceID, state: &results).map(Self.json)
    }

    mutating func finished() -> [String] {
        results.messages += 1
        return [Self.json(["code": 0, "message": "success", "voice_id": voiceID, "message_id": "\(voiceID)_\(results.messages)", "final": 1])]
    }

    var refusesUnknownText: Bool { true }

    func failure(code: Int, name: String, message: String, close: WebSocketErrorCode) -> (text: String, close: WebSocketErrorCode) {
        (Self.json(["code": code, "message": message, "voice_id": voiceID]), .normalClosure)
    }

    /// One JSON object, keys sorted (the order Tencent's own messages are compared in does not matter to clients).
    static func json(_ object: [String: Any]) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}
