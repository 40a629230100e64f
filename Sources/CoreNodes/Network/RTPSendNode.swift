import PipelineCore

/// `rtp-send`: sends Opus or AAC packets as RTP over UDP (RFC 3550) to `host:port`, IPv4 or IPv6. The
/// payload format follows the codec of the input: Opus per RFC 7587, AAC per RFC 3640 (`mpeg4-generic`,
/// AAC-hbr, see ``RTPMPEG4Payload``).
///
/// - The RTP clock is 48 kHz for Opus whatever the encoder's input rate, and the sampling rate for AAC:
///   the timestamp is the frame's `pts` converted to clock units, offset by a random initial value.
/// - SSRC (unless `ssrc` is given) and the initial sequence number are random.
/// - Opus: the marker bit is set on the first packet and on the first packet after a gap: DTX packets
///   (1–2 bytes, which carry no audio) are not sent, and a jump in `pts` beyond the frame's duration
///   counts as a gap too. AAC: the marker bit is set on every packet that ends an access unit (RFC 3640).
/// - Sending never blocks: a datagram the system cannot queue is dropped and counted (`send_dropped`);
///   other send errors (no route, refused) are counted as `send_errors` and reported once as an
///   `error` event, and the call goes on.
/// - With `host: ""` the peer is found by DNS-SD instead (see ``PeerDiscoveryLink``): the node
///   advertises `service` with its `receive_port`, invites what it finds and sends to the peer while
///   the call is up (`peer_found`, `peer_lost`, `connected`, `disconnected` events).
public actor RTPSendNode: Node {
    private let host: String
    private let port: Int
    private let payloadType: UInt8
    private let ssrc: UInt32
    private var sequence: UInt16
    private let timestampBase: UInt32
    private let discovery: PeerDiscoveryLink.Settings?

    init(configuration c: Configuration) {
        host = c.host
        port = c.port
        discovery = c.host.isEmpty
            ? PeerDiscoveryLink.Settings(service: c.service, name: c.name ?? Self.hostName(), receivePort: c.receivePort, controlPort: c.controlPort)
            : nil
        payloadType = UInt8(c.payloadType)
        var rng = SystemRandomNumberGenerator()
        ssrc = c.ssrc.map { UInt32(truncatingIfNeeded: $0) } ?? rng.next()
        sequence = rng.next()
        timestampBase = rng.next()
    }

    private static func hostName() -> String {
        var buffer = [CChar](repeating: 0, count: 256)
        guard gethostname(&buffer, buffer.count) == 0 else { return "voicepipe" }
        let name = String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
        return name.isEmpty ? "voicepipe" : "voicepipe on \(name)"
    }

    public func run(_ context: NodeContext) async throws {
        let worker = BlockingWorker(name: "rtp-send-\(context.id)")
        defer { worker.shutdown() }
        let (host, port) = (self.host, self.port)
        var fixed: UDPAddress?
        let socket: UDPSocket
        var link: PeerDiscoveryLink?
        do {
            if discovery != nil {
                socket = try await worker.run { try UDPSocket(family: AF_INET) }
            } else {
                let (a, s) = try await worker.run {
                    let a = try UDPAddress.resolve(host: host, port: port)
                    return (a, try UDPSocket(family: a.family))
                }
                fixed = a
                socket = s
            }
        } catch let e as UDPError {
            throw NodeError(NodeErrorCode(e.code), "rtp-send: \(e.message)")
        }
        defer { socket.close() }
        if let fixed { context.logger.info("sending RTP (pt \(payloadType), ssrc \(ssrc)) to \(fixed)") }
        var seenConnections = 0
        defer {
            if let l = link { l.stop() }
        }
        var nextPts: Int64?
        var marker = true
        var errorsReported = false
        var aac = false
        for await frame in context.input() {
            guard let encoded = frame.encoded else { continue }
            switch encoded.codec {
            case "opus": aac = false
            case "aac": aac = true
            default:
                context.count("wrong_codec")
                if !errorsReported {
                    errorsReported = true
                    try await context.emitError(code: "wrong_codec", message: "rtp-send carries opus or aac, got \(encoded.codec); skipped")
                }
                continue
            }
            if let settings = discovery, link == nil {
                let l = PeerDiscoveryLink(settings: settings)
                let codec = encoded.codec
                try await worker.run { try l.start(codec: codec, context: context) }
                link = l
            }
            let address: UDPAddress
            if let fixed {
                address = fixed
            } else if let l = link, let peer = l.current {
                address = peer
                if l.connections != seenConnections { seenConnections = l.connections; marker = true }
            } else {
                context.count("no_peer")
                nextPts = frame.pts + encoded.durationNanos
                continue
            }
            if let expected = nextPts, frame.pts > expected + encoded.durationNanos / 2 { marker = true }
            nextPts = frame.pts + encoded.durationNanos
            if !aac && encoded.payload.count <= 2 {
                // Empty (lost-frame marker) or DTX: nothing worth sending; the next packet starts a talkspurt.
                marker = true
                context.count("dtx_skipped")
                continue
            }
            if encoded.payload.isEmpty { continue }
            let clock = aac ? Int64(encoded.format?.sampleRate ?? 48_000) : 48_000
            // Nearest tick: pts in whole nanoseconds is a truncated 1,024/44,100 s grid.
            let ticks = frame.pts / 1_000_000_000 * clock + ((frame.pts % 1_000_000_000) * clock + 500_000_000) / 1_000_000_000
            let timestamp = timestampBase &+ UInt32(truncatingIfNeeded: ticks)
            let payloads: [(payload: [UInt8], marker: Bool)]
            if aac {
                guard encoded.payload.count <= RTPMPEG4Payload.maxUnit else {
                    context.count("oversized")
                    continue
                }
                payloads = RTPMPEG4Payload.packetize(encoded.payload)
            } else {
                payloads = [(encoded.payload, marker)]
            }
            marker = false
            for p in payloads {
                let packet = RTPPacket(marker: p.marker, payloadType: payloadType, sequenceNumber: sequence,
                                       timestamp: timestamp, ssrc: ssrc, payload: p.payload)
                sequence &+= 1
                try await send(packet, socket: socket, to: address, context: context, errorsReported: &errorsReported)
            }
        }
    }

    private func send(_ packet: RTPPacket, socket: UDPSocket, to address: UDPAddress, context: NodeContext,
                      errorsReported: inout Bool) async throws {
        let err = socket.send(packet.serialized(), to: address)
        if err == 0 {
            context.count("packets_sent")
        } else if err == EAGAIN || err == EWOULDBLOCK || err == ENOBUFS {
            context.count("send_dropped")
        } else {
            context.count("send_errors")
            if !errorsReported {
                errorsReported = true
                try await context.emitError(code: "send_failed", message: "rtp-send to \(address): \(String(cString: strerror(err)))")
            }
        }
    }

    /// Configuration of `rtp-send`.
    public struct Configuration: NodeConfiguration {
        /// Peer address or name (IPv6 as `::1` or `[::1]`).
        public var host: String
        /// Peer UDP port.
        public var port: Int
        /// RTP payload type.
        public var payloadType: Int
        /// Synchronization source; `nil` = random.
        public var ssrc: Int?
        /// DNS-SD service type (discovery, `host: ""`).
        public var service: String
        /// Instance name advertised (discovery); `nil` = "voicepipe on HOSTNAME".
        public var name: String?
        /// Our RTP receive port, advertised (discovery).
        public var receivePort: Int
        /// UDP port of the invitation channel (discovery; 0 = any free one).
        public var controlPort: Int
        /// The parameters of `rtp-send`.
        public static let parameters = [
            ParamSpec("host", .string, default: "127.0.0.1", doc: "peer address or name (IPv6 as ::1 or [::1]); \"\" = find the peer by DNS-SD"),
            ParamSpec("port", .int(1...65535), default: 5004, doc: "peer UDP port"),
            ParamSpec("payload_type", .int(0...127), default: 96, doc: "RTP payload type (dynamic, 96...127)"),
            ParamSpec("ssrc", .int(0...4_294_967_295), doc: "synchronization source (default: random)"),
            ParamSpec("service", .string, default: "_voicepipe-intercom._udp", doc: "discovery (host \"\"): DNS-SD service type advertised and browsed"),
            ParamSpec("name", .string, doc: "discovery: instance name advertised (default: \"voicepipe on HOSTNAME\")"),
            ParamSpec("receive_port", .int(1...65535), default: 5006, doc: "discovery: our RTP receive port (rtp-receive's), advertised to the peer"),
            ParamSpec("control_port", .int(0...65535), default: 0, doc: "discovery: UDP port of the invitation channel (0 = any free one)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "rtp-send", summary: "Sends Opus (RFC 7587) or AAC (RFC 3640) packets as RTP over UDP (RFC 3550), IPv4 or IPv6",
        family: "sinks",
        inputs: [PortSpec("in", [.encoded], codecs: ["opus", "aac"], doc: "Opus or AAC packets (from opus-encode or aac-encode)")],
        outputs: [],
        configuration: Configuration.self,
        format: .none,
        executor: .realtime,
        make: { c, _ in RTPSendNode(configuration: c) })
}

#if canImport(Glibc)
import Glibc
#endif
