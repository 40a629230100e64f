/// An RTP packet (RFC 3550 §5.1): the fixed header, optional CSRCs and header extension, and the payload.
///
/// ```swift
/// let p = RTPPacket(payloadType: 96, sequenceNumber: 1, timestamp: 960, ssrc: 0x1234, payload: bytes)
/// let wire = p.serialized()
/// let back = try RTPPacket(parsing: wire)
/// ```
public struct RTPPacket: Sendable, Hashable {
    /// Marker bit; for audio, set on the first packet of a talkspurt (after silence or DTX).
    public var marker: Bool
    /// Payload type, 0...127 (96...127 are dynamic, as used for Opus).
    public var payloadType: UInt8
    /// Sequence number, +1 per packet sent, wrapping at 2^16.
    public var sequenceNumber: UInt16
    /// Media timestamp in clock units (48 kHz for Opus, whatever the encoder's input rate).
    public var timestamp: UInt32
    /// Synchronization source.
    public var ssrc: UInt32
    /// Contributing sources (kept when parsing; normally empty).
    public var csrcs: [UInt32]
    /// Payload bytes (padding and header extension removed).
    public var payload: [UInt8]

    /// RTP version carried in the header; only 2 exists.
    public static let version: UInt8 = 2
    /// Size of the fixed header.
    public static let fixedHeaderSize = 12

    /// Creates a packet.
    public init(marker: Bool = false, payloadType: UInt8, sequenceNumber: UInt16, timestamp: UInt32, ssrc: UInt32,
                csrcs: [UInt32] = [], payload: [UInt8]) {
        self.marker = marker
        self.payloadType = payloadType
        self.sequenceNumber = sequenceNumber
        self.timestamp = timestamp
        self.ssrc = ssrc
        self.csrcs = csrcs
        self.payload = payload
    }

    /// Why a datagram is not a usable RTP packet.
    public enum ParseError: Error, Sendable, Hashable {
        case tooShort
        case badVersion(UInt8)
        case badPadding
        case badExtension
    }

    /// Parses a datagram; header extensions are skipped and padding removed.
    public init(parsing bytes: some Collection<UInt8>) throws(ParseError) {
        let b = Array(bytes)
        guard b.count >= Self.fixedHeaderSize else { throw .tooShort }
        let v = b[0] >> 6
        guard v == Self.version else { throw .badVersion(v) }
        let hasPadding = b[0] & 0x20 != 0
        let hasExtension = b[0] & 0x10 != 0
        let csrcCount = Int(b[0] & 0x0F)
        marker = b[1] & 0x80 != 0
        payloadType = b[1] & 0x7F
        sequenceNumber = UInt16(b[2]) << 8 | UInt16(b[3])
        timestamp = Self.read32(b, 4)
        ssrc = Self.read32(b, 8)
        var offset = Self.fixedHeaderSize
        guard b.count >= offset + 4 * csrcCount else { throw .tooShort }
        csrcs = (0..<csrcCount).map { Self.read32(b, Self.fixedHeaderSize + 4 * $0) }
        offset += 4 * csrcCount
        if hasExtension {
            guard b.count >= offset + 4 else { throw .badExtension }
            let words = Int(UInt16(b[offset + 2]) << 8 | UInt16(b[offset + 3]))
            offset += 4 + 4 * words
            guard b.count >= offset else { throw .badExtension }
        }
        var end = b.count
        if hasPadding {
            let pad = Int(b[b.count - 1])
            guard pad >= 1, end - pad >= offset else { throw .badPadding }
            end -= pad
        }
        payload = Array(b[offset..<end])
    }

    /// The packet as sent on the wire (no padding, no extension).
    public func serialized() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(Self.fixedHeaderSize + 4 * csrcs.count + payload.count)
        out.append(Self.version << 6 | UInt8(min(csrcs.count, 15)))
        out.append((marker ? 0x80 : 0) | (payloadType & 0x7F))
        out.append(UInt8(sequenceNumber >> 8)); out.append(UInt8(sequenceNumber & 0xFF))
        Self.append32(timestamp, to: &out)
        Self.append32(ssrc, to: &out)
        for c in csrcs.prefix(15) { Self.append32(c, to: &out) }
        out.append(contentsOf: payload)
        return out
    }

    private static func read32(_ b: [UInt8], _ i: Int) -> UInt32 {
        UInt32(b[i]) << 24 | UInt32(b[i + 1]) << 16 | UInt32(b[i + 2]) << 8 | UInt32(b[i + 3])
    }

    private static func append32(_ v: UInt32, to out: inout [UInt8]) {
        out.append(UInt8(v >> 24)); out.append(UInt8((v >> 16) & 0xFF))
        out.append(UInt8((v >> 8) & 0xFF)); out.append(UInt8(v & 0xFF))
    }
}
