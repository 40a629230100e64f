import Nodes

/// What a call does with each RTP datagram that reaches its port, as a pure state machine: symmetric RTP
/// (the first valid packet's source becomes where the call's audio goes), the stream's SSRC latched, and
/// packets from another address or with another SSRC ignored and counted. A sender that restarts its
/// stream (a new SSRC from the latched address, ``restartAfter`` packets in a row) is followed.
struct RTPInbound: Sendable {
    enum Verdict: Sendable, Equatable {
        case audio(RTPPacket)
        case telephoneEvent(RTPPacket)
        /// Comfort noise (RFC 3389): the sender is silent; nothing to play.
        case comfortNoise
        case wrongAddress
        case wrongSSRC
        case unknownPayloadType(UInt8)
        case malformed
    }

    struct Counters: Sendable, Equatable {
        var audio = 0, events = 0, comfortNoise = 0, wrongAddress = 0, wrongSSRC = 0, unknownPayload = 0, malformed = 0
    }

    var payloadType: UInt8
    var telephoneEvent: UInt8?
    var comfortNoise: UInt8?
    /// The latched source (`host:port`), nil until the first valid packet.
    private(set) var source: String?
    private(set) var ssrc: UInt32?
    private(set) var counters = Counters()
    private var candidate: (ssrc: UInt32, count: Int)?
    let restartAfter = 25

    init(payloadType: UInt8, telephoneEvent: UInt8?, comfortNoise: UInt8?) {
        self.payloadType = payloadType
        self.telephoneEvent = telephoneEvent
        self.comfortNoise = comfortNoise
    }

    /// A re-INVITE changed the media: latch again.
    mutating func relatch() {
        source = nil
        ssrc = nil
        candidate = nil
    }

    mutating func classify(_ bytes: [UInt8], from: String) -> Verdict {
        guard let packet = try? RTPPacket(parsing: bytes) else { counters.malformed += 1; return .malformed }
        let pt = packet.payloadType
        guard pt == payloadType || pt == telephoneEvent || pt == comfortNoise || pt == 13 else {
            counters.unknownPayload += 1
            return .unknownPayloadType(pt)
        }
        if let source, source != from { counters.wrongAddress += 1; return .wrongAddress }
        if let ssrc, ssrc != packet.ssrc {
            let n = candidate?.ssrc == packet.ssrc ? (candidate?.count ?? 0) + 1 : 1
            candidate = (packet.ssrc, n)
            guard n >= restartAfter else { counters.wrongSSRC += 1; return .wrongSSRC }
            self.ssrc = packet.ssrc
        }
        candidate = nil
        source = source ?? from
        ssrc = ssrc ?? packet.ssrc
        if pt == payloadType { counters.audio += 1; return .audio(packet) }
        if pt == telephoneEvent { counters.events += 1; return .telephoneEvent(packet) }
        counters.comfortNoise += 1
        return .comfortNoise
    }
}
