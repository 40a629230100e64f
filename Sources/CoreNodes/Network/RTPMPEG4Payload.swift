/// RTP payload format for AAC (RFC 3640, `mpeg4-generic`, mode AAC-hbr): an AU-headers section
/// (a 16-bit length in bits, then per access unit a 13-bit size and a 3-bit index / index-delta, both 0
/// for consecutive units), then the access units. The RTP clock is the sampling rate; the marker bit is
/// set on every packet that ends an access unit. An access unit larger than `maxPayload` is fragmented
/// over packets that each carry its full size in their one AU header.
///
/// The SDP/caps a peer needs: `encoding-name=MPEG4-GENERIC, mode=AAC-hbr, sizelength=13, indexlength=3,
/// indexdeltalength=3, streamtype=5, config=<AudioSpecificConfig in hex>`.
public enum RTPMPEG4Payload {
    /// Largest payload before an access unit is fragmented (fits a 1,500-byte MTU with IP/UDP/RTP headers).
    public static let maxPayload = 1400
    /// Largest access unit the 13-bit size field can describe.
    public static let maxUnit = 8191

    /// Payloads (with `marker`) carrying one access unit.
    public static func packetize(_ unit: [UInt8]) -> [(payload: [UInt8], marker: Bool)] {
        precondition(unit.count <= maxUnit, "AAC access unit of \(unit.count) bytes exceeds RFC 3640's 13-bit size")
        let header: [UInt8] = [0x00, 0x10, UInt8(unit.count >> 5), UInt8((unit.count & 0x1F) << 3)]
        let room = maxPayload - header.count
        if unit.count <= room { return [(header + unit, true)] }
        var out: [(payload: [UInt8], marker: Bool)] = []
        var offset = 0
        while offset < unit.count {
            let end = min(unit.count, offset + room)
            out.append((header + unit[offset..<end], end == unit.count))
            offset = end
        }
        return out
    }

    /// Why a payload was refused.
    public enum Problem: Error, Equatable {
        case malformed(String)
    }

    /// Reassembles access units from payloads in arrival order; keeps a fragmented unit between packets.
    public struct Depacketizer: Sendable {
        public init() {}
        private var fragment: [UInt8] = []
        private var fragmentSize = 0
        private var fragmentTimestamp: UInt32 = 0

        /// The complete access units in `payload` (with their index in the packet: unit `i` starts at
        /// timestamp + i × 1,024). A fragment that does not continue the held one discards it.
        public mutating func units(in payload: [UInt8], marker: Bool, timestamp: UInt32) throws(Problem) -> [[UInt8]] {
            guard payload.count >= 2 else { throw .malformed("payload shorter than the AU-headers-length field") }
            let headerBits = Int(payload[0]) << 8 | Int(payload[1])
            guard headerBits > 0, headerBits % 16 == 0 else {
                throw .malformed("AU-headers-length of \(headerBits) bits is not a whole number of 16-bit AAC-hbr headers")
            }
            let count = headerBits / 16
            let dataStart = 2 + count * 2
            guard payload.count >= dataStart else { throw .malformed("payload shorter than its \(count) AU headers") }
            var sizes: [Int] = []
            for i in 0..<count {
                let h = Int(payload[2 + 2 * i]) << 8 | Int(payload[3 + 2 * i])
                sizes.append(h >> 3)
            }
            let data = payload[dataStart...]
            if count == 1, sizes[0] > data.count {
                // A fragment of a larger unit.
                if fragment.isEmpty || fragmentSize != sizes[0] || fragmentTimestamp != timestamp {
                    fragment = []
                    fragmentSize = sizes[0]
                    fragmentTimestamp = timestamp
                }
                fragment += data
                guard fragment.count <= fragmentSize else {
                    fragment = []
                    throw .malformed("fragments add up to more than the access unit's \(fragmentSize) bytes")
                }
                if fragment.count == fragmentSize {
                    defer { fragment = [] }
                    return [fragment]
                }
                if marker {
                    fragment = []
                    throw .malformed("last fragment leaves the access unit short")
                }
                return []
            }
            // A held fragment whose end never came (its last packet was lost) is dropped.
            fragment = []
            guard sizes.reduce(0, +) <= data.count else {
                throw .malformed("AU sizes add up to \(sizes.reduce(0, +)) bytes but the packet carries \(data.count)")
            }
            var units: [[UInt8]] = []
            var offset = data.startIndex
            for s in sizes {
                units.append(Array(data[offset..<offset + s]))
                offset += s
            }
            return units
        }
    }
}
