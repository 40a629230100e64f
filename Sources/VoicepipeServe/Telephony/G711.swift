/// G.711 µ-law (8-bit logarithmic samples of 14-bit linear audio), as North American and Japanese
/// telephone networks carry it (RTP payload type 0, PCMU; Twilio Media Streams).
enum MuLaw {
    private static let bias = 0x84
    private static let clip = 32635

    static func encode(_ sample: Int16) -> UInt8 {
        var s = Int(sample)
        let sign = s < 0 ? 0x80 : 0
        if s < 0 { s = -s }
        s = min(s, clip) + bias
        var exponent = 7
        var mask = 0x4000
        while s & mask == 0 && exponent > 0 {
            exponent -= 1
            mask >>= 1
        }
        let mantissa = (s >> (exponent + 3)) & 0x0f
        return ~UInt8(sign | exponent << 4 | mantissa)
    }

    static func decode(_ byte: UInt8) -> Int16 {
        let u = Int(~byte)
        let exponent = (u >> 4) & 0x07
        let magnitude = (((u & 0x0f) << 3) + bias) << exponent
        return Int16(u & 0x80 != 0 ? bias - magnitude : magnitude - bias)
    }
}

/// G.711 A-law (8-bit logarithmic samples of 13-bit linear audio), as the rest of the world's telephone
/// networks carry it (RTP payload type 8, PCMA). Every other bit of the code is inverted on the wire (0x55).
enum ALaw {
    /// Upper ends of the eight segments, in 13-bit magnitude.
    private static let segmentEnds = [0x1f, 0x3f, 0x7f, 0xff, 0x1ff, 0x3ff, 0x7ff, 0xfff]

    static func encode(_ sample: Int16) -> UInt8 {
        var magnitude = Int(sample)
        let toggle: Int
        if magnitude >= 0 {
            toggle = 0xd5           // sign bit set for positive samples, then the even-bit inversion
        } else {
            toggle = 0x55
            magnitude = -magnitude - 1
        }
        magnitude >>= 3
        guard let segment = segmentEnds.firstIndex(where: { magnitude <= $0 }) else { return UInt8(0x7f ^ toggle) }
        let step = segment < 2 ? 1 : segment
        let code = segment << 4 | (magnitude >> step) & 0x0f
        return UInt8(code ^ toggle)
    }

    static func decode(_ byte: UInt8) -> Int16 {
        let a = Int(byte ^ 0x55)
        var t = (a & 0x0f) << 4
        let segment = (a & 0x70) >> 4
        switch segment {
        case 0: t += 8
        case 1: t += 0x108
        default: t = (t + 0x108) << (segment - 1)
        }
        return Int16(a & 0x80 != 0 ? t : -t)
    }
}
