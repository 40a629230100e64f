import Foundation
import NIOHTTP1
import Nodes
import PipelineCore
import TencentASR

/// Tencent Cloud real-time ASR v2, server side: what a client written against the published API
/// (`wss://asr.cloud.tencent.com/asr/v2/<appid>?<signed query>`) expects of the service.
///
/// - The query must carry `secretid`, `timestamp`, `expired`, `nonce`, `voice_id`, `engine_model_type`
///   and `signature`: HMAC-SHA1 with the key's secret over `asr.cloud.tencent.com/asr/v2/<appid>?<the other
///   parameters sorted by name, values as given>`, base64 — what Tencent's clients sign whatever address
///   they connect to — or over the request's own host name. A wrong signature or secretid is 4002, an
///   expired one 4002 (and one whose `timestamp` is 90 days or more before `expired`), an appid without keys 4003, a missing parameter 4001.
/// - Results: the first `transcript` of a sentence is `slice_type` 0, later partials 1, the final 2;
///   `index` counts sentences from 0; `start_time`/`end_time` in ms; `voice_text_str`.
enum TencentFrontEnd {
    struct Problem: Error {
        var code: Int
        var message: String
        var voiceID: String
    }

    /// Per-connection result numbering.
    struct State: Sendable {
        var messages = 0
        var nextIndex = 0
        /// The open sentence: the pipeline's (voice_id, seq) and its index here.
        var open: (key: String, index: Int)?
    }

    static let signedHost = "asr.cloud.tencent.com"
    /// The longest a signature may be valid (`expired - timestamp`), as the service allows.
    static let maxValiditySeconds = 90 * 86_400
    static let required = ["secretid", "timestamp", "expired", "nonce", "voice_id", "engine_model_type", "signature"]

    /// Checks the request; returns its voice_id.
    static func check(head: HTTPRequestHead, captures: [String: String], route: ServeConfiguration.Route, now: Date = Date()) -> Result<String, Problem> {
        let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
        let path = String(parts[0])
        var query: [String: String] = [:]
        for (k, v) in TencentSignature.parseQuery(parts.count > 1 ? String(parts[1]) : "") { query[k] = v }
        let voiceID = query["voice_id"] ?? ""
        if let missing = required.first(where: { (query[$0] ?? "").isEmpty }) {
            return .failure(Problem(code: 4001, message: "missing parameter \(missing)", voiceID: voiceID))
        }
        let appid = captures["appid"] ?? ""
        guard let keys = route.keys[appid], !keys.isEmpty else {
            return .failure(Problem(code: 4003, message: "appid \(appid) is not served here", voiceID: voiceID))
        }
        guard let key = keys.first(where: { $0.secretID == query["secretid"] }) else {
            return .failure(Problem(code: 4002, message: "signature verification failed: unknown secretid", voiceID: voiceID))
        }
        guard let expired = Int(query["expired"] ?? ""), let timestamp = Int(query["timestamp"] ?? "") else {
            return .failure(Problem(code: 4001, message: "timestamp and expired must be integers (Unix seconds)", voiceID: voiceID))
        }
        let nowSeconds = Int(now.timeIntervalSince1970)
        if expired <= nowSeconds {
            return .failure(Problem(code: 4002, message: "signature expired at \(expired) (now \(nowSeconds))", voiceID: voiceID))
        }
        if timestamp > nowSeconds + 300 {
            return .failure(Problem(code: 4002, message: "timestamp \(timestamp) is in the future", voiceID: voiceID))
        }
        // The service's freshness window: expired later than timestamp, and less than 90 days after
        // it; so a URL signed long ago (timestamp 0) cannot be replayed whatever its expired says.
        if expired <= timestamp {
            return .failure(Problem(code: 4002, message: "expired \(expired) must be later than timestamp \(timestamp)", voiceID: voiceID))
        }
        if expired - timestamp >= maxValiditySeconds {
            return .failure(Problem(code: 4002, message: "timestamp \(timestamp) is too old: expired - timestamp must be under 90 days", voiceID: voiceID))
        }
        let given = query["signature"] ?? ""
        let ownHost = bareHost(head.headers.first(name: "Host") ?? "")
        let valid = Set([signedHost, ownHost]).contains { host in
            TencentSignature.sign(TencentSignature.signedText(host: host, path: path, parameters: query), secretKey: key.secretKey) == given
        }
        guard valid else {
            return .failure(Problem(code: 4002, message: "signature verification failed", voiceID: voiceID))
        }
        let model = query["engine_model_type"] ?? ""
        let rate = model.hasPrefix("8k") ? 8000 : 16000
        guard rate == route.format.sampleRate else {
            return .failure(Problem(code: 4001, message: "engine_model_type \(model) needs \(rate) Hz audio; this route takes \(route.format.sampleRate) Hz", voiceID: voiceID))
        }
        if let format = query["voice_format"], format != "1" {
            return .failure(Problem(code: 4001, message: "voice_format \(format) is not served here; send PCM (voice_format=1)", voiceID: voiceID))
        }
        return .success(voiceID)
    }

    /// The host name of a Host header, without port or brackets.
    static func bareHost(_ host: String) -> String {
        if host.hasPrefix("["), let end = host.firstIndex(of: "]") { return String(host[host.index(after: host.startIndex)..<end]) }
        return String(host.split(separator: ":", maxSplits: 1).first ?? "")
    }

    /// The result messages for a pipeline event (only `transcript` events give any).
    static func messages(for event: Event, voiceID: String, state: inout State) -> [[String: Any]] {
        guard event.name == .transcript else { return [] }
        let key = "\(event["voice_id"]?.stringValue ?? "")/\(event["seq"]?.intValue ?? 0)"
        let final = event["final"].map { v -> Bool in if case .bool(let b) = v { b } else { false } } ?? false
        let text = event["text"]?.stringValue ?? ""
        let start = event["start_ms"]?.intValue ?? 0
        let end = event["end_ms"]?.intValue ?? start
        var out: [[String: Any]] = []
        func result(_ slice: Int, index: Int) {
            state.messages += 1
            out.append(["code": 0, "message": "success", "voice_id": voiceID, "message_id": "\(voiceID)_\(state.messages)",
                        "result": ["slice_type": slice, "index": index, "start_time": start, "end_time": end,
                                   "voice_text_str": text, "word_size": 0, "word_list": [Any]()] as [String: Any]])
        }
        if let open = state.open, open.key == key {
            result(final ? 2 : 1, index: open.index)
            if final { state.open = nil }
        } else {
            let index = state.nextIndex
            state.nextIndex += 1
            result(0, index: index)
            if final { result(2, index: index) }
            state.open = final ? nil : (key, index)
        }
        return out
    }
}
