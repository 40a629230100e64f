import Foundation
import PipelineCore

/// Settings of the `tencent` engine of the `asr` node, resolved once when the node is made from its
/// parameters (``TencentASREngine/Configuration``) and the node's environment variables.
///
/// Credentials come from the node's `app_id`, `secret_id` and `secret_key` parameters, falling
/// back to `TENCENTCLOUD_APPID`, `TENCENTCLOUD_SECRET_ID` and `TENCENTCLOUD_SECRET_KEY`. They are
/// never logged: ``TencentASRRequest/redactedURL`` is the only form of a URL fit for a log.
public struct TencentASRConfiguration: Sendable {
    /// Tencent Cloud AppID (the last path component of the URL).
    public var appID: String
    /// SecretId (the `secretid` query parameter).
    public var secretID: String
    /// SecretKey (signs the request; never sent).
    public var secretKey: String
    /// Where to connect: scheme, host, optional port and path prefix.
    public var endpoint: TencentEndpoint
    /// `engine_model_type`, e.g. `16k_zh`, `8k_zh`, `16k_en`.
    public var engineModelType: String
    /// Extra query parameters (`needvad`, `vad_silence_time`, `hotword_id`, ...).
    public var extraParameters: [String: String]
    /// A PEM file of CA certificates to trust instead of the system store (private deployments).
    public var caFile: String?
    /// Reconnection after a dropped connection.
    public var reconnect: TencentReconnectPolicy
    /// Audio held while disconnected (and sent but not yet recognized), in milliseconds; older
    /// audio is dropped and counted beyond this.
    public var maxHeldMs: Int
    /// Audio per binary message, in milliseconds (40 ms = 1,280 bytes at 16 kHz).
    public var chunkMs: Int
    /// How long to wait for the server's `final: 1` after `{"type": "end"}`.
    public var finalTimeout: Duration
    /// How long to wait for the server's answer (`code` 0 or an error) after connecting.
    public var handshakeTimeout: Duration
    /// After this long without audio to send, the connection is ended cleanly (`{"type": "end"}`,
    /// final result) and the next audio opens a new one; zero: never. The service drops a
    /// connection that receives no audio for 15 s (4008) and warns that gaps over 6 s may break
    /// recognition, so a quiet room must not hold a connection open.
    public var idleEnd: Duration = .milliseconds(TencentASRConfiguration.defaultIdleEndMs)
    /// `idle_end_ms` when not given.
    public static let defaultIdleEndMs = 4000

    /// The model when `engine_model_type` is not given.
    public static let defaultEngineModelType = "16k_zh"
    /// Audio held while reconnecting when `hold_ms` is not given, in milliseconds.
    public static let defaultMaxHeldMs = 30_000

    /// Query parameters the client sets itself; `params:` may not override them.
    public static let reservedParameters: Set<String> = ["secretid", "timestamp", "expired", "nonce", "voice_id", "voice_format", "signature"]

    /// Creates a configuration.
    public init(appID: String, secretID: String, secretKey: String, endpoint: TencentEndpoint = .default,
                engineModelType: String = TencentASRConfiguration.defaultEngineModelType, extraParameters: [String: String] = [:], caFile: String? = nil,
                reconnect: TencentReconnectPolicy = TencentReconnectPolicy(), maxHeldMs: Int = TencentASRConfiguration.defaultMaxHeldMs, chunkMs: Int = 40,
                finalTimeout: Duration = .seconds(15), handshakeTimeout: Duration = .seconds(10)) {
        self.appID = appID
        self.secretID = secretID
        self.secretKey = secretKey
        self.endpoint = endpoint
        self.engineModelType = engineModelType
        self.extraParameters = extraParameters
        self.caFile = caFile
        self.reconnect = reconnect
        self.maxHeldMs = maxHeldMs
        self.chunkMs = chunkMs
        self.finalTimeout = finalTimeout
        self.handshakeTimeout = handshakeTimeout
    }

    /// The sample rate the model expects: 8 kHz for `8k_*` models, else 16 kHz.
    public static func sampleRate(engineModelType: String) -> Int { engineModelType.hasPrefix("8k_") ? 8000 : 16000 }

    /// The audio format sent to the service (mono s16 at the model's rate).
    public var audioFormat: AudioFormat { AudioFormat(sampleRate: Self.sampleRate(engineModelType: engineModelType), channels: 1) }

    /// Builds the signed request for one connection.
    public func request(voiceID: String, timestamp: Int, nonce: Int) -> TencentASRRequest {
        var params: [String: String] = ["needvad": "1"]
        for (k, v) in extraParameters where !Self.reservedParameters.contains(k) { params[k] = v }
        params["secretid"] = secretID
        params["timestamp"] = String(timestamp)
        params["expired"] = String(timestamp + 24 * 3600)
        params["nonce"] = String(nonce)
        params["engine_model_type"] = engineModelType
        params["voice_id"] = voiceID
        params["voice_format"] = "1"
        let path = endpoint.pathPrefix + "/asr/v2/" + appID
        // The signed host is the bare host name, without a port, as the official SDKs sign it.
        let text = TencentSignature.signedText(host: endpoint.host, path: path, parameters: params)
        let signature = TencentSignature.sign(text, secretKey: secretKey)
        let query = TencentSignature.canonicalQuery(params, encode: true) + "&signature=" + TencentSignature.percentEncode(signature)
        var redacted = params
        redacted["secretid"] = "***"
        let redactedQuery = TencentSignature.canonicalQuery(redacted, encode: true) + "&signature=***"
        let base = endpoint.scheme + "://" + endpoint.hostHeader + path
        return TencentASRRequest(url: base + "?" + query, redactedURL: base + "?" + redactedQuery, voiceID: voiceID,
                                 hostHeader: endpoint.hostHeader, path: path, signedText: text)
    }
}

/// A signed connection URL.
public struct TencentASRRequest: Sendable {
    /// The URL to connect to (holds the secret id and signature: never log it).
    public var url: String
    /// The URL with `secretid` and `signature` replaced by `***`, for logs.
    public var redactedURL: String
    /// The connection's voice id.
    public var voiceID: String
    /// The `Host` header value the signature covers.
    public var hostHeader: String
    /// The URL path.
    public var path: String
    /// The text that was signed.
    public var signedText: String
}

/// Where the `tencent` engine connects: `wss://asr.cloud.tencent.com` by default.
public struct TencentEndpoint: Sendable, Hashable {
    /// `ws` or `wss`.
    public var scheme: String
    /// Host name or address.
    public var host: String
    /// Port, when the URL gives one (then it is part of the `Host` header, as sent).
    public var port: Int?
    /// Path before `/asr/v2/<appid>` (empty for the public service).
    public var pathPrefix: String

    /// The public service.
    public static let `default` = TencentEndpoint(scheme: "wss", host: "asr.cloud.tencent.com", port: nil, pathPrefix: "")

    /// Creates an endpoint.
    public init(scheme: String, host: String, port: Int?, pathPrefix: String) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.pathPrefix = pathPrefix
    }

    /// Parses `ws://host[:port][/prefix]` or `wss://...` (also `http`/`https`, taken as `ws`/`wss`).
    public init?(_ string: String) {
        guard let range = string.range(of: "://") else { return nil }
        var scheme = string[..<range.lowerBound].lowercased()
        if scheme == "http" { scheme = "ws" }
        if scheme == "https" { scheme = "wss" }
        guard scheme == "ws" || scheme == "wss" else { return nil }
        let rest = string[range.upperBound...]
        let authority = rest.prefix { $0 != "/" && $0 != "?" }
        var path = String(rest.dropFirst(authority.count).prefix { $0 != "?" })
        while path.hasSuffix("/") { path.removeLast() }
        var host = String(authority)
        var port: Int?
        if let colon = authority.lastIndex(of: ":") {
            guard let p = Int(authority[authority.index(after: colon)...]), (1...65535).contains(p) else { return nil }
            port = p
            host = String(authority[..<colon])
        }
        guard !host.isEmpty else { return nil }
        self.init(scheme: scheme, host: host, port: port, pathPrefix: path)
    }

    /// The `Host` header as a WebSocket client sends it: `host`, or `host:port` when the URL has a port.
    public var hostHeader: String { port.map { "\(host):\($0)" } ?? host }
}
