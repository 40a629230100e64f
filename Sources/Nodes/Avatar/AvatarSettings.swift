import DigitalHuman
import Foundation
import PipelineCore

/// The `avatar` node's settings, resolved once from its ``AvatarNode/Configuration`` and the environment.
struct AvatarSettings: Sendable {
    var api: IVHConfiguration
    var newSession: IVHNewSessionRequest
    var bargeIn: Bool
    var interruptText: Bool
    var heartbeat: Duration
    var packetBytes: Int
    var heldPackets: Int
    var readyTimeout: Duration
    var pollInterval: Duration
    var closeTimeout: Duration
    var drainTimeout: Duration
    var maxReconnects: Int
    var startDelay: Duration
    var spaceParam: [String: ParamValue]?
    var imageParam: [String: ParamValue]?

    /// Resolves the node's configuration; `appkey` and `access_token` fall back to `IVH_APPKEY` and
    /// `IVH_ACCESS_TOKEN` in `environment` (the variables the graph was loaded with).
    init(configuration c: AvatarNode.Configuration, environment: [String: String]) throws {
        let appkey = c.appkey.flatMap { $0.isEmpty ? nil : $0 } ?? environment["IVH_APPKEY"] ?? ""
        let token = c.accessToken.flatMap { $0.isEmpty ? nil : $0 } ?? environment["IVH_ACCESS_TOKEN"] ?? ""
        guard !appkey.isEmpty else { throw NodeError(.ivhConfiguration, "no appkey: set the avatar node's appkey parameter or IVH_APPKEY") }
        guard !token.isEmpty else { throw NodeError(.ivhConfiguration, "no access token: set the avatar node's access_token parameter or IVH_ACCESS_TOKEN") }
        let caFile = c.caFile.flatMap { $0.isEmpty ? nil : $0 }
        api = IVHConfiguration(baseURL: c.baseURL, appkey: appkey, accessToken: token,
                               caFile: caFile, timeout: .milliseconds(Int64(c.timeoutS * 1000)))
        guard let driver = IVHDriverType(name: c.driverType) else {
            throw NodeError(.badParameter, "driver_type must be text, audio or voice (1, 2, 3)")
        }
        newSession = IVHNewSessionRequest(userID: c.userID, protocolName: c.protocolName,
                                          driverType: driver, virtualmanProjectID: c.virtualmanProjectID,
                                          protocolOptions: c.protocolOptions ?? [:])
        newSession.sessionID = c.sessionID
        newSession.userInfo = c.userInfo
        startDelay = .milliseconds(c.startDelayMs)
        spaceParam = c.spaceParam
        imageParam = c.imageParam
        bargeIn = c.bargeIn
        interruptText = c.interruptText
        heartbeat = .milliseconds(Int64(c.heartbeatS * 1000))
        packetBytes = c.packetBytes
        let packetMs = max(1, packetBytes / 32)
        heldPackets = max(1, c.heldMs / packetMs)
        readyTimeout = .milliseconds(Int64(c.readyTimeoutS * 1000))
        pollInterval = .milliseconds(c.pollMs)
        closeTimeout = .milliseconds(Int64(c.closeTimeoutS * 1000))
        drainTimeout = .milliseconds(Int64(c.heldMs) + 2000)
        maxReconnects = c.maxReconnects
    }
}

extension AvatarNode {
    /// Configuration of `avatar`. Credentials left out here are taken from the environment when the
    /// node is made (see ``appkey`` and ``accessToken``).
    public struct Configuration: NodeConfiguration {
        /// API gateway (`base_url`).
        public var baseURL: String
        /// Project appkey; `nil` = `$IVH_APPKEY`.
        public var appkey: String?
        /// Project access token (the signing key); `nil` = `$IVH_ACCESS_TOKEN`.
        public var accessToken: String?
        /// UserId of the session (`user_id`).
        public var userID: String
        /// `text`, `audio`, `voice` or `1`, `2`, `3`.
        public var driverType: String
        /// Video stream protocol (`protocol`).
        public var protocolName: String
        /// `ProtocolOption` fields passed through.
        public var protocolOptions: [String: ParamValue]?
        /// Digital-human project id (`virtualman_project_id`).
        public var virtualmanProjectID: String?
        /// Interrupt the avatar when the user starts speaking.
        public var bargeIn: Bool
        /// Send texts with `Interrupt: true`.
        public var interruptText: Bool
        /// PEM file of CA certificates trusted besides the system store.
        public var caFile: String?
        /// Seconds between `SEND_HEARTBEAT` commands.
        public var heartbeatS: Double
        /// Bytes per `SEND_AUDIO` packet.
        public var packetBytes: Int
        /// Audio held while the command channel is down, in milliseconds.
        public var heldMs: Int
        /// How long to wait for a preparing session, in seconds.
        public var readyTimeoutS: Double
        /// Session status polling interval while preparing, in milliseconds.
        public var pollMs: Int
        /// Time limit of the `closesession` request, in seconds.
        public var closeTimeoutS: Double
        /// Time limit of other HTTPS requests, in seconds.
        public var timeoutS: Double
        /// Consecutive failed channel openings before the node fails.
        public var maxReconnects: Int
        /// newsession `SessionId`.
        public var sessionID: String?
        /// newsession `ExtraInfo.UserInfo`.
        public var userInfo: String?
        /// Delay before startsession.
        public var startDelayMs: Int
        /// configsession `SpaceParam`.
        public var spaceParam: [String: ParamValue]?
        /// configsession `ImageParam`.
        public var imageParam: [String: ParamValue]?

        enum CodingKeys: String, CodingKey {
            case baseURL = "base_url", appkey, accessToken, userID = "user_id", driverType, protocolName = "protocol", protocolOptions
            case virtualmanProjectID = "virtualman_project_id", bargeIn, interruptText, caFile, heartbeatS, packetBytes, heldMs
            case readyTimeoutS, pollMs, closeTimeoutS, timeoutS, maxReconnects
            case sessionID = "session_id", userInfo, startDelayMs, spaceParam, imageParam
        }

        /// The parameters of `avatar`.
        public static let parameters = [
            ParamSpec("base_url", .string, default: .string(IVHConfiguration.defaultBaseURL), doc: "API gateway (wss:// for the channel is derived)"),
            ParamSpec("appkey", .string, secret: true, doc: "project appkey (default: $IVH_APPKEY)"),
            ParamSpec("access_token", .string, secret: true, doc: "project access token, the signing key (default: $IVH_ACCESS_TOKEN)"),
            ParamSpec("user_id", .string, default: "voicepipe", doc: "UserId of the session (a new session with the same id closes the old one)"),
            ParamSpec("driver_type", .choice(["text", "audio", "voice", "1", "2", "3"]), default: "voice",
                      doc: "text (1): text only; audio (2): audio, converted voice; voice (3): audio in the original voice, text too"),
            ParamSpec("protocol", .choice(["rtmp", "trtc", "webrtc"]), default: "webrtc", doc: "video stream protocol"),
            ParamSpec("protocol_options", .stringMap, doc: "ProtocolOption fields passed through with their YAML types (RtmpPushAddr, TrtcAppId, TrtcRoomId: 123, TrtcUseExternalApp: true, ...)"),
            ParamSpec("virtualman_project_id", .string, doc: "digital-human project id (VirtualmanProjectId)"),
            ParamSpec("barge_in", .bool, default: false, doc: "interrupt the avatar (empty text, Interrupt: true) when the user starts speaking"),
            ParamSpec("interrupt_text", .bool, default: false, doc: "send texts with Interrupt: true (force past non-interruptible sentences)"),
            ParamSpec("ca_file", .string, doc: "PEM file of CA certificates trusted besides the system store"),
            ParamSpec("heartbeat_s", .double(1...600), default: 30.0, doc: "seconds between SEND_HEARTBEAT commands"),
            ParamSpec("packet_bytes", .int(320...32000), default: 6400, doc: "bytes per SEND_AUDIO packet (6400 = 200 ms), sent at real time"),
            ParamSpec("held_ms", .int(200...60000), default: 2000, doc: "audio held while the command channel is down; older packets are dropped and counted"),
            ParamSpec("ready_timeout_s", .double(1...600), default: 120.0, doc: "how long to wait for a preparing session"),
            ParamSpec("poll_ms", .int(100...60000), default: 2000, doc: "session status polling interval while preparing"),
            ParamSpec("close_timeout_s", .double(0.1...60), default: 3.0, doc: "time limit of the closesession request"),
            ParamSpec("timeout_s", .double(0.1...120), default: 10.0, doc: "time limit of other HTTPS requests"),
            ParamSpec("max_reconnects", .int(0...10000), default: 20, doc: "consecutive failed channel openings before the node fails"),
            ParamSpec("session_id", .string, doc: "SessionId to create the session with (private deployments; the SaaS service assigns one)"),
            ParamSpec("user_info", .string, doc: "ExtraInfo.UserInfo of newsession: initial information about the user"),
            ParamSpec("start_delay_ms", .int(0...600_000), default: 0, doc: "call startsession this long after the session is ready (the SDK starts once the player shows its first frame); a frame on the `start` input starts it earlier"),
            ParamSpec("space_param", .map, doc: "configsession SpaceParam once the session runs: { BackgroundUrl, ImagePosition: -0.5..0.5, ImagePositionVertical: -0.5..0.25, ImageZoom }"),
            ParamSpec("image_param", .map, doc: "configsession ImageParam (3D avatars) once the session runs"),
        ]

        /// `packet_bytes` must be even (whole 16-bit samples).
        public func problems() -> [String] {
            var problems: [String] = []
            if packetBytes % 2 != 0 { problems.append("packet_bytes must be even (16-bit samples)") }
            return problems
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "avatar", summary: "Drives a Tencent interactive digital human (IVH) with audio slices or text",
        family: "services",
        inputs: [
            PortSpec("in", [.audio], required: false,
                     doc: "16 kHz mono audio (slices of 200 ms from the slicer); speech-start marks trigger barge-in"),
            PortSpec("text", [.text], required: false, doc: "text to speak (e.g. the asr node's text port)"),
            PortSpec("start", [.event, .text], required: false, doc: "when linked, startsession waits for its first frame (e.g. the player's first-frame event), or start_delay_ms"),
        ],
        outputs: [.events],
        configuration: Configuration.self,
        format: FormatRule(output: { _, _ in nil }, accepts: { _, f in
            f.sampleRate == 16000 && f.channels == 1 ? nil : "avatar needs 16 kHz mono audio, got \(f); add a resample node (rate: 16000, channels: 1)"
        }),
        make: { c, env in AvatarNode(settings: try AvatarSettings(configuration: c, environment: env.variables)) })
}
