import AsyncHTTPClient
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOSSL
import PipelineCore

/// Where and how to reach the digital-human aPaaS API.
public struct IVHConfiguration: Sendable {
    /// `https://gw.tvs.qq.com` by default; `http://` only for local tests.
    public var baseURL: String
    /// The project's appkey.
    public var appkey: String
    /// The project's access token (the signing key). Never logged.
    public var accessToken: String
    /// PEM file of extra CA certificates trusted besides the system store (private gateways, tests).
    public var caFile: String?
    /// Time limit of one HTTPS request.
    public var timeout: Duration
    /// Seconds since 1970 for the `timestamp` parameter (injected by tests).
    public var now: @Sendable () -> Int

    /// The public gateway.
    public static let defaultBaseURL = "https://gw.tvs.qq.com"

    /// Creates a configuration.
    public init(baseURL: String = IVHConfiguration.defaultBaseURL, appkey: String, accessToken: String, caFile: String? = nil,
                timeout: Duration = .seconds(10), now: @escaping @Sendable () -> Int = { Int(Date().timeIntervalSince1970) }) {
        self.baseURL = baseURL.hasSuffix("/") ? String(baseURL.dropLast()) : baseURL
        self.appkey = appkey
        self.accessToken = accessToken
        self.caFile = caFile
        self.timeout = timeout
        self.now = now
    }

    /// The WebSocket origin matching ``baseURL`` (`https` → `wss`, `http` → `ws`).
    public var webSocketBaseURL: String {
        if baseURL.hasPrefix("https://") { return "wss://" + baseURL.dropFirst(8) }
        if baseURL.hasPrefix("http://") { return "ws://" + baseURL.dropFirst(7) }
        return baseURL
    }

    /// TLS settings: the system trust store, plus the certificates of ``caFile`` when given.
    /// Throws when the CA file cannot be read.
    public func tlsConfiguration() throws -> TLSConfiguration {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let caFile, !caFile.isEmpty {
            guard FileManager.default.isReadableFile(atPath: caFile) else {
                throw IVHError(.configuration, "ca_file '\(caFile)' cannot be read", operation: "tls")
            }
            do {
                let certs = try NIOSSLCertificate.fromPEMFile(caFile)
                guard !certs.isEmpty else { throw IVHError(.configuration, "ca_file '\(caFile)' holds no PEM certificate", operation: "tls") }
                tls.additionalTrustRoots = [.certificates(certs)]
            } catch let e as IVHError {
                throw e
            } catch {
                throw IVHError(.configuration, "ca_file '\(caFile)' is not a PEM certificate file: \(error)", operation: "tls")
            }
        }
        return tls
    }

    /// Checks that credentials are present.
    public func validate() throws {
        if appkey.isEmpty { throw IVHError(.configuration, "no appkey: set the node's appkey parameter or IVH_APPKEY", operation: "configuration") }
        if accessToken.isEmpty { throw IVHError(.configuration, "no access token: set access_token or IVH_ACCESS_TOKEN", operation: "configuration") }
    }
}

/// The HTTPS operations of the stream service, under `/v2/ivh/streammanager/streamservice/`.
public enum IVHOperation: String, Sendable, CaseIterable {
    case newSession = "newsession"
    case startSession = "startsession"
    case command = "command"
    case closeSession = "closesession"
    case statSession = "statsession"
    case listSessions = "listsessionofuin"
    case queryConfig = "getconfig"
    case configSession = "configsession"

    /// Path prefix of the HTTPS operations.
    public static let prefix = "/v2/ivh/streammanager/streamservice/"
    /// Path of the WebSocket command channel.
    public static let commandChannelPath = "/v2/ws/ivh/streammanager/streamservice/commandchannel"

    /// The request path.
    public var path: String { Self.prefix + rawValue }
}

/// How the avatar is driven (`DriverType`).
public enum IVHDriverType: Int, Sendable, CaseIterable {
    /// Text: the service speaks the text it is sent.
    case text = 1
    /// Audio with voice conversion.
    case audio = 2
    /// Audio in the original voice.
    case voice = 3

    /// Parses `text`, `audio`, `voice` or `1`, `2`, `3`.
    public init?(name: String) {
        switch name.lowercased() {
        case "text", "1": self = .text
        case "audio", "2": self = .audio
        case "voice", "3": self = .voice
        default: return nil
        }
    }

    /// True when the type accepts `SEND_AUDIO`.
    public var acceptsAudio: Bool { self != .text }
}

/// A session as the service describes it.
public struct IVHSession: Sendable, Hashable {
    /// Session id.
    public var id: String
    /// 1 running (ready), 2 closed, 3 preparing, 4 failed, 5 timed out.
    public var status: Int
    /// Play address of the video stream (when ready).
    public var playURL: String
    /// User id the session was created for (lists only).
    public var userID: String?
    /// `speak_start` / `speak_over` or the newer status names (status only).
    public var speakStatus: String?
    /// Driver type (lists only).
    public var driverType: Int?
    /// Whether the session has been started (lists and status, when given).
    public var isStarted: Bool?

    /// Creates a description.
    public init(id: String, status: Int, playURL: String, userID: String? = nil, speakStatus: String? = nil, driverType: Int? = nil, isStarted: Bool? = nil) {
        self.id = id
        self.status = status
        self.playURL = playURL
        self.userID = userID
        self.speakStatus = speakStatus
        self.driverType = driverType
        self.isStarted = isStarted
    }

    /// Words for ``status``.
    public var statusName: String {
        switch status {
        case 1: "running"
        case 2: "closed"
        case 3: "preparing"
        case 4: "failed"
        case 5: "timed out"
        default: "unknown (\(status))"
        }
    }
}

/// What ``IVHClient/newSession(_:)`` sends.
public struct IVHNewSessionRequest: Sendable {
    /// Caller-chosen user id (a new session with the same id closes the previous one).
    public var userID: String
    /// `rtmp`, `trtc` or `webrtc`.
    public var protocolName: String
    /// Text, audio or original-voice driving.
    public var driverType: IVHDriverType
    /// Project id on the digital-human platform (optional for the stream service).
    public var virtualmanProjectID: String?
    /// `ProtocolOption` fields (e.g. `RtmpPushAddr`, `TrtcRoomId`), passed through with their
    /// types: a number stays a JSON number, a boolean a JSON boolean.
    public var protocolOptions: [String: ParamValue]
    /// A caller-chosen SessionId (private deployments; the SaaS service assigns one).
    public var sessionID: String?
    /// `ExtraInfo.UserInfo`: initial information about the user, for dialogue avatars.
    public var userInfo: String?

    /// Creates a request.
    public init(userID: String, protocolName: String = "webrtc", driverType: IVHDriverType, virtualmanProjectID: String? = nil, protocolOptions: [String: ParamValue] = [:]) {
        self.userID = userID
        self.protocolName = protocolName
        self.driverType = driverType
        self.virtualmanProjectID = virtualmanProjectID
        self.protocolOptions = protocolOptions
    }
}

/// HTTPS client of the interactive digital-human stream service.
///
/// ```swift
/// let client = try IVHClient(IVHConfiguration(appkey: key, accessToken: token))
/// defer { Task { try? await client.shutdown() } }
/// let s = try await client.newSession(.init(userID: "kiosk-1", driverType: .text))
/// try await client.startSession(s.id)
/// try await client.closeSession(s.id)
/// ```
///
/// Every request is signed (see ``IVHSignature``); a non-zero `Header.Code` throws ``IVHError``.
/// Call ``shutdown()`` when done.
public final class IVHClient: Sendable {
    /// The configuration.
    public let configuration: IVHConfiguration
    private let http: HTTPClient

    /// Creates a client (reads the CA file, opens nothing yet).
    public init(_ configuration: IVHConfiguration) throws {
        try configuration.validate()
        self.configuration = configuration
        let tls = try configuration.tlsConfiguration()
        var c = HTTPClient.Configuration(tlsConfiguration: tls)
        c.timeout = .init(connect: .seconds(5), read: .seconds(15))
        http = HTTPClient(eventLoopGroupProvider: .singleton, configuration: c)
    }

    /// Releases connections. Call once; the client is unusable afterwards.
    public func shutdown() async throws { try await http.shutdown() }

    /// The signed URL of `operation` at the current time.
    public func url(_ operation: IVHOperation) -> String {
        configuration.baseURL + operation.path + "?" + IVHSignature.query(appkey: configuration.appkey, accessToken: configuration.accessToken, timestamp: configuration.now())
    }

    /// The signed URL of the command channel for `sessionID`.
    public func commandChannelURL(sessionID: String) -> String {
        configuration.webSocketBaseURL + IVHOperation.commandChannelPath + "?"
            + IVHSignature.query(appkey: configuration.appkey, accessToken: configuration.accessToken, timestamp: configuration.now(), requestID: sessionID)
    }

    /// Sends `{"Header": {}, "Payload": payload}` and returns the response's `Payload`.
    func call(_ operation: IVHOperation, _ payload: [String: Any], timeout: Duration? = nil) async throws -> [String: Any] {
        let body = try JSONSerialization.data(withJSONObject: ["Header": [String: Any](), "Payload": payload])
        var request = HTTPClientRequest(url: url(operation))
        request.method = .POST
        request.headers.add(name: "Content-Type", value: "application/json;charset=utf-8")
        request.body = .bytes(ByteBuffer(data: body))
        let response: HTTPClientResponse
        let bytes: ByteBuffer
        do {
            let limit = timeout ?? configuration.timeout
            let ms = max(1, Int64(limit.components.seconds * 1000) + limit.components.attoseconds / 1_000_000_000_000_000)
            response = try await http.execute(request, timeout: .milliseconds(ms))
            bytes = try await response.body.collect(upTo: 4 << 20)
        } catch let e as CancellationError {
            throw e
        } catch {
            throw IVHError(.transport, "request to \(configuration.baseURL) failed: \(error)", operation: operation.rawValue)
        }
        let data = Data(buffer: bytes)
        guard let root = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            if !(200..<300).contains(Int(response.status.code)) {
                throw IVHError(.http(Int(response.status.code)), response.status.reasonPhrase, operation: operation.rawValue)
            }
            throw IVHError(.badResponse, String(decoding: data.prefix(200), as: UTF8.self), operation: operation.rawValue)
        }
        let header = root["Header"] as? [String: Any] ?? [:]
        let code = IVHJSON.int(header["Code"]) ?? 0
        if code != IVHResultCode.success {
            throw IVHError(.api(code), header["Message"] as? String ?? "", operation: operation.rawValue)
        }
        if !(200..<300).contains(Int(response.status.code)) {
            throw IVHError(.http(Int(response.status.code)), response.status.reasonPhrase, operation: operation.rawValue)
        }
        return root["Payload"] as? [String: Any] ?? [:]
    }

    /// Creates a session (`newsession`). The result's status may be 3 (preparing): poll ``status(_:)``.
    public func newSession(_ r: IVHNewSessionRequest) async throws -> IVHSession {
        var payload: [String: Any] = ["ReqId": IVHJSON.requestID(), "UserId": r.userID, "Protocol": r.protocolName, "DriverType": r.driverType.rawValue]
        if let p = r.virtualmanProjectID, !p.isEmpty { payload["VirtualmanProjectId"] = p }
        if !r.protocolOptions.isEmpty { payload["ProtocolOption"] = r.protocolOptions.mapValues(IVHJSON.object) }
        if let id = r.sessionID, !id.isEmpty { payload["SessionId"] = id }
        if let info = r.userInfo, !info.isEmpty { payload["ExtraInfo"] = ["UserInfo": info] }
        let p = try await call(.newSession, payload)
        guard let id = p["SessionId"] as? String, !id.isEmpty else {
            throw IVHError(.badResponse, "newsession returned no SessionId", operation: "newsession")
        }
        return IVHSession(id: id, status: IVHJSON.int(p["SessionStatus"]) ?? 1, playURL: p["PlayStreamAddr"] as? String ?? "")
    }

    /// Starts a ready session (`startsession`); only started sessions accept commands.
    public func startSession(_ id: String) async throws {
        _ = try await call(.startSession, ["ReqId": IVHJSON.requestID(), "SessionId": id])
    }

    /// Closes a session (`closesession`), stopping the stream and releasing its concurrency slot.
    public func closeSession(_ id: String, timeout: Duration? = nil) async throws {
        _ = try await call(.closeSession, ["ReqId": IVHJSON.requestID(), "SessionId": id], timeout: timeout)
    }

    /// The status of a session (`statsession`).
    public func status(_ id: String) async throws -> IVHSession {
        let p = try await call(.statSession, ["ReqId": IVHJSON.requestID(), "SessionId": id])
        return IVHSession(id: id, status: IVHJSON.int(p["SessionStatus"]) ?? 0, playURL: p["PlayStreamAddr"] as? String ?? "",
                          speakStatus: p["SpeakStatus"] as? String, isStarted: p["IsSessionStarted"] as? Bool)
    }

    /// The account's sessions in progress.
    public func listSessions() async throws -> [IVHSession] {
        let p = try await call(.listSessions, ["ReqId": IVHJSON.requestID()])
        let list = p["Sessions"] as? [[String: Any]] ?? []
        return list.map { s in
            IVHSession(id: s["SessionId"] as? String ?? "", status: IVHJSON.int(s["SessionStatus"]) ?? 0,
                       playURL: s["PlayStreamAddr"] as? String ?? "", userID: s["UserId"] as? String,
                       driverType: IVHJSON.int(s["DriverType"]), isStarted: s["IsSessionStarted"] as? Bool)
        }
    }

    /// Sends text over HTTPS (`command`, `SEND_TEXT`); an empty text with `interrupt` silences the avatar.
    public func sendText(sessionID: String, text: String, interrupt: Bool = false) async throws {
        _ = try await call(.command, ["ReqId": IVHJSON.requestID(), "SessionId": sessionID, "Command": "SEND_TEXT",
                                      "Data": ["Text": text, "Interrupt": interrupt] as [String: Any]])
    }

    /// Changes a running session's layout (`configsession`): `SpaceParam` (BackgroundUrl,
    /// ImagePosition, ImagePositionVertical, ImageZoom) for 2D avatars, `ImageParam` for 3D ones.
    public func configureSession(_ id: String, spaceParam: [String: ParamValue]?, imageParam: [String: ParamValue]?) async throws {
        var payload: [String: Any] = ["ReqId": IVHJSON.requestID(), "SessionId": id]
        if let s = spaceParam { payload["SpaceParam"] = s.mapValues(IVHJSON.object) }
        if let i = imageParam { payload["ImageParam"] = i.mapValues(IVHJSON.object) }
        _ = try await call(.configSession, payload)
    }

    /// The project's configuration as JSON text (the response `Payload`).
    public func queryConfiguration() async throws -> String {
        let p = try await call(.queryConfig, ["ReqId": IVHJSON.requestID()])
        let data = try JSONSerialization.data(withJSONObject: p, options: [.sortedKeys, .prettyPrinted])
        return String(decoding: data, as: UTF8.self)
    }
}

/// JSON helpers of the digital-human protocol.
public enum IVHJSON {
    /// An integer from a JSON number or numeric string; `nil` for fractions, numbers beyond
    /// ±2^53 and anything else a peer might send (never a trap).
    public static func int(_ v: Any?) -> Int? {
        let limit = 1 << 53
        let value: Int?
        switch v {
        case let i as Int: value = i
        case let d as Double: value = d.isFinite ? Int(exactly: d) : nil
        case let n as NSNumber: value = n.doubleValue.isFinite ? Int(exactly: n.doubleValue) : nil
        case let s as String: value = Int(s)
        default: value = nil
        }
        guard let value, (-limit...limit).contains(value) else { return nil }
        return value
    }

    /// A JSON value from a peer as an event value (depth and size bounded; numbers keep their kind).
    public static func eventValue(_ v: Any, depth: Int = 0) -> EventValue {
        guard depth < 16 else { return .string("…") }
        switch v {
        case let s as String: return .string(s)
        case let n as NSNumber:
            if String(cString: n.objCType) == "c" { return .bool(n.boolValue) }   // JSON true / false
            if let i = int(n) { return .int(Int64(i)) }
            return n.doubleValue.isFinite ? .double(n.doubleValue) : .null
        case let a as [Any]: return .array(a.prefix(1000).map { eventValue($0, depth: depth + 1) })
        case let o as [String: Any]:
            var m: [String: EventValue] = [:]
            for (k, x) in o.prefix(1000) { m[k] = eventValue(x, depth: depth + 1) }
            return .object(m)
        default: return .null
        }
    }

    /// A parameter value as a JSON object for `JSONSerialization`, keeping its type.
    public static func object(_ v: ParamValue) -> Any {
        switch v {
        case .string(let s): s
        case .int(let i): i
        case .double(let d): d
        case .bool(let b): b
        case .list(let l): l.map(object)
        case .map(let m): m.mapValues(object)
        case .null: NSNull()
        }
    }

    /// A 32-character request id (a UUID without dashes).
    public static func requestID() -> String {
        UUID().uuidString.replacingOccurrences(of: "-", with: "").lowercased()
    }

    /// Compact JSON text of an object.
    public static func text(_ object: [String: Any]) -> String {
        guard let d = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: d, as: UTF8.self)
    }
}
