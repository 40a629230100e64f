import Foundation
import PipelineCore

/// The `avatar` node's parameters, checked and typed once.
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

    /// Reads the configuration; `appkey` and `access_token` fall back to `IVH_APPKEY` and
    /// `IVH_ACCESS_TOKEN` in `environment`.
    init(config c: NodeConfig, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        let appkey = c.string("appkey").flatMap { $0.isEmpty ? nil : $0 } ?? environment["IVH_APPKEY"] ?? ""
        let token = c.string("access_token").flatMap { $0.isEmpty ? nil : $0 } ?? environment["IVH_ACCESS_TOKEN"] ?? ""
        guard !appkey.isEmpty else { throw NodeError("ivh_configuration", "no appkey: set the avatar node's appkey parameter or IVH_APPKEY") }
        guard !token.isEmpty else { throw NodeError("ivh_configuration", "no access token: set the avatar node's access_token parameter or IVH_ACCESS_TOKEN") }
        let caFile = c.string("ca_file").flatMap { $0.isEmpty ? nil : $0 }
        api = IVHConfiguration(baseURL: c.string("base_url", default: IVHConfiguration.defaultBaseURL), appkey: appkey, accessToken: token,
                               caFile: caFile, timeout: .milliseconds(Int64(c.double("timeout_s", default: 10) * 1000)))
        guard let driver = IVHDriverType(name: c.string("driver_type", default: "voice")) else {
            throw NodeError("bad_parameter", "driver_type must be text, audio or voice (1, 2, 3)")
        }
        newSession = IVHNewSessionRequest(userID: c.string("user_id", default: "voicepipe"), protocolName: c.string("protocol", default: "webrtc"),
                                          driverType: driver, virtualmanProjectID: c.string("virtualman_project_id"),
                                          protocolOptions: c.stringMap("protocol_options"))
        bargeIn = c.bool("barge_in", default: false)
        interruptText = c.bool("interrupt_text", default: false)
        heartbeat = .milliseconds(Int64(c.double("heartbeat_s", default: 30) * 1000))
        packetBytes = c.int("packet_bytes", default: 6400)
        let packetMs = max(1, packetBytes / 32)
        heldPackets = max(1, c.int("held_ms", default: 2000) / packetMs)
        readyTimeout = .milliseconds(Int64(c.double("ready_timeout_s", default: 120) * 1000))
        pollInterval = .milliseconds(c.int("poll_ms", default: 2000))
        closeTimeout = .milliseconds(Int64(c.double("close_timeout_s", default: 3) * 1000))
        drainTimeout = .milliseconds(Int64(c.int("held_ms", default: 2000)) + 2000)
        maxReconnects = c.int("max_reconnects", default: 20)
    }
}

extension AvatarNode {
    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "avatar", summary: "Drives a Tencent interactive digital human (IVH) with audio slices or text",
        family: "services",
        inputs: [
            PortSpec("in", [.audio], required: false,
                     doc: "16 kHz mono audio (slices of 200 ms from the slicer); speech-start marks trigger barge-in"),
            PortSpec("text", [.text], required: false, doc: "text to speak (e.g. the asr node's text port)"),
        ],
        outputs: [.events],
        parameters: [
            ParamSpec("base_url", .string, default: .string(IVHConfiguration.defaultBaseURL), doc: "API gateway (wss:// for the channel is derived)"),
            ParamSpec("appkey", .string, secret: true, doc: "project appkey (default: $IVH_APPKEY)"),
            ParamSpec("access_token", .string, secret: true, doc: "project access token, the signing key (default: $IVH_ACCESS_TOKEN)"),
            ParamSpec("user_id", .string, default: .string("voicepipe"), doc: "UserId of the session (a new session with the same id closes the old one)"),
            ParamSpec("driver_type", .choice(["text", "audio", "voice", "1", "2", "3"]), default: .string("voice"),
                      doc: "text (1): text only; audio (2): audio, converted voice; voice (3): audio in the original voice, text too"),
            ParamSpec("protocol", .choice(["rtmp", "trtc", "webrtc"]), default: .string("webrtc"), doc: "video stream protocol"),
            ParamSpec("protocol_options", .stringMap, doc: "ProtocolOption fields passed through (RtmpPushAddr, TrtcAppId, ...)"),
            ParamSpec("virtualman_project_id", .string, doc: "digital-human project id (VirtualmanProjectId)"),
            ParamSpec("barge_in", .bool, default: .bool(false), doc: "interrupt the avatar (empty text, Interrupt: true) when the user starts speaking"),
            ParamSpec("interrupt_text", .bool, default: .bool(false), doc: "send texts with Interrupt: true (force past non-interruptible sentences)"),
            ParamSpec("ca_file", .string, doc: "PEM file of CA certificates trusted besides the system store"),
            ParamSpec("heartbeat_s", .double(1...600), default: .double(30), doc: "seconds between SEND_HEARTBEAT commands"),
            ParamSpec("packet_bytes", .int(320...32000), default: .int(6400), doc: "bytes per SEND_AUDIO packet (6400 = 200 ms), sent at real time"),
            ParamSpec("held_ms", .int(200...60000), default: .int(2000), doc: "audio held while the command channel is down; older packets are dropped and counted"),
            ParamSpec("ready_timeout_s", .double(1...600), default: .double(120), doc: "how long to wait for a preparing session"),
            ParamSpec("poll_ms", .int(100...60000), default: .int(2000), doc: "session status polling interval while preparing"),
            ParamSpec("close_timeout_s", .double(0.1...60), default: .double(3), doc: "time limit of the closesession request"),
            ParamSpec("timeout_s", .double(0.1...120), default: .double(10), doc: "time limit of other HTTPS requests"),
            ParamSpec("max_reconnects", .int(0...10000), default: .int(20), doc: "consecutive failed channel openings before the node fails"),
        ],
        format: FormatRule(output: { _, _ in nil }, accepts: { _, f in
            f.sampleRate == 16000 && f.channels == 1 ? nil : "avatar needs 16 kHz mono audio, got \(f); add a resample node (rate: 16000, channels: 1)"
        }),
        check: { c in
            var problems: [String] = []
            if c.int("packet_bytes", default: 6400) % 2 != 0 { problems.append("packet_bytes must be even (16-bit samples)") }
            return problems
        },
        make: { config in AvatarNode(settings: try AvatarSettings(config: config)) })
}
