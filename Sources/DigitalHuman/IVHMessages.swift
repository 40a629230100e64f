import Foundation
import PipelineCore

/// A command sent on the WebSocket command channel.
public enum IVHCommand: Sendable, Hashable {
    /// `SEND_AUDIO`: 16 kHz 16-bit mono PCM (little endian); `seq` from 1 per utterance;
    /// `isFinal` on the packet that ends the utterance.
    case audio(reqID: String, seq: Int, pcm: [UInt8], isFinal: Bool)
    /// `SEND_TEXT`: speak `text`; an empty text with `interrupt` silences the avatar.
    case text(String, interrupt: Bool)
    /// `SEND_HEARTBEAT` (`PING`), keeps the channel and session alive.
    case heartbeat

    /// The command name.
    public var name: String {
        switch self {
        case .audio: "SEND_AUDIO"
        case .text: "SEND_TEXT"
        case .heartbeat: "SEND_HEARTBEAT"
        }
    }

    /// The JSON text sent for `sessionID`: `{"Header":{},"Payload":{"ReqId":..,"SessionId":..,"Command":..,"Data":{..}}}`.
    public func json(sessionID: String) -> String {
        var payload: [String: Any] = ["SessionId": sessionID, "Command": name]
        switch self {
        case .audio(let reqID, let seq, let pcm, let isFinal):
            payload["ReqId"] = reqID
            payload["Data"] = ["Audio": Data(pcm).base64EncodedString(), "Seq": seq, "IsFinal": isFinal] as [String: Any]
        case .text(let text, let interrupt):
            payload["ReqId"] = IVHJSON.requestID()
            payload["Data"] = ["Text": text, "Interrupt": interrupt] as [String: Any]
        case .heartbeat:
            payload["ReqId"] = IVHJSON.requestID()
            payload["Data"] = ["Text": "PING"]
        }
        return IVHJSON.text(["Header": [String: Any](), "Payload": payload])
    }

    /// Duration of an audio packet (16 kHz mono s16: 32 bytes per ms); zero for other commands.
    public var audioDuration: Duration {
        if case .audio(_, _, let pcm, _) = self { return .microseconds(Int64(pcm.count) * 1000 / 32) }
        return .zero
    }
}

/// A message the server pushes on the command channel, decoded.
public enum IVHPush: Sendable, Hashable {
    /// Type 1: the input text as the service understood it.
    case inputText(String)
    /// Type 2: the text the avatar is about to speak.
    case speechText(String, speechID: Int?)
    /// Type 3: speaking status (`speak_start`, `speak_over`, or the newer names such as `TextStart`).
    case speakStatus(String, speechID: Int?)
    /// Type 5: risk-control notice.
    case riskNotice(String)
    /// Type 7: input text discarded because the current sentence cannot be interrupted.
    case discardedText(String)
    /// A non-zero `Header.Code` on the channel.
    case error(code: Int, message: String)
    /// Anything else (kept for logging).
    case other(type: Int?)

    /// The documented fields of a push beyond its kind and text, as event fields: `text_pro`,
    /// `uninterrupt`, `muted`, `interaction_type`, `interaction_content`, `chat_status`,
    /// `interrupt_result`, `interrupt_message`, `final_type`, `req_id`, `type`; and `payload`, the
    /// whole payload, for pushes of a type without an event of its own.
    public static func details(_ text: String, includePayload: Bool = false) -> [String: EventValue] {
        guard let root = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else { return [:] }
        let p = root["Payload"] as? [String: Any] ?? root
        var out: [String: EventValue] = [:]
        let names = ["TextPro": "text_pro", "Uninterrupt": "uninterrupt", "Muted": "muted", "InteractionType": "interaction_type",
                     "InteractionContent": "interaction_content", "ChatStatus": "chat_status", "InterruptResult": "interrupt_result",
                     "InterruptMessage": "interrupt_message", "FinalType": "final_type", "ReqId": "req_id", "Type": "type"]
        for (key, name) in names { if let v = p[key] { out[name] = IVHJSON.eventValue(v) } }
        // InteractionContent is often a JSON document in a string: keep its structure.
        if case .string(let s)? = out["interaction_content"], let d = s.data(using: .utf8),
           let parsed = try? JSONSerialization.jsonObject(with: d, options: [.fragmentsAllowed]) {
            out["interaction_content"] = IVHJSON.eventValue(parsed)
        }
        if includePayload { out["payload"] = IVHJSON.eventValue(p) }
        return out
    }

    /// Decodes one text message (`{"Header":{..},"Payload":{..}}`, or the payload alone).
    public static func decode(_ text: String) -> IVHPush? {
        guard let root = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else { return nil }
        if let header = root["Header"] as? [String: Any], let code = IVHJSON.int(header["Code"]), code != 0 {
            return .error(code: code, message: header["Message"] as? String ?? "")
        }
        let p = root["Payload"] as? [String: Any] ?? root
        let type = IVHJSON.int(p["Type"])
        let text = p["TextDisplay"] as? String ?? p["Text"] as? String ?? ""
        let speech = IVHJSON.int(p["SpeechId"])
        switch type {
        case 1: return .inputText(p["Text"] as? String ?? "")
        case 2: return .speechText(text, speechID: speech)
        case 3: return .speakStatus(p["SpeakStatus"] as? String ?? "", speechID: speech)
        case 5: return .riskNotice(p["Text"] as? String ?? p["Message"] as? String ?? "")
        case 7: return .discardedText(p["Text"] as? String ?? "")
        default: return .other(type: type)
        }
    }
}
