import DigitalHuman

/// Cuts 16 kHz mono s16 audio into `SEND_AUDIO` packets of a fixed size (6,400 bytes = 200 ms by
/// default), numbering them from 1 per utterance and flagging the packet that ends an utterance.
///
/// A pure state machine: feed it audio with ``push(_:endsUtterance:)`` and send what it returns.
///
/// ```swift
/// var p = AudioPacketizer(packetBytes: 6400)
/// let packets = p.push(bytes, endsUtterance: slice.isLast)   // [IVHCommand.audio(...)]
/// ```
public struct AudioPacketizer: Sendable {
    /// Bytes per packet.
    public let packetBytes: Int
    private var buffer: [UInt8] = []
    private var reqID: String?
    private var seq = 0
    private let makeID: @Sendable () -> String

    /// Creates a packetizer; `makeID` names each utterance (`ReqId`).
    public init(packetBytes: Int = 6400, makeID: @escaping @Sendable () -> String = { IVHJSON.requestID() }) {
        precondition(packetBytes > 0 && packetBytes % 2 == 0, "packet size must be a positive even number of bytes")
        self.packetBytes = packetBytes
        self.makeID = makeID
    }

    /// True while an utterance has started and not yet been ended.
    public var utteranceOpen: Bool { reqID != nil }

    /// Bytes waiting for a full packet.
    public var pendingBytes: Int { buffer.count }

    /// Adds PCM bytes; returns the packets now complete. With `endsUtterance`, everything left is
    /// sent (a last, shorter packet) and then a separate, empty packet with `IsFinal: true`, as the
    /// audio-driving protocol requires.
    public mutating func push(_ bytes: [UInt8], endsUtterance: Bool) -> [IVHCommand] {
        buffer.append(contentsOf: bytes)
        var out: [IVHCommand] = []
        while buffer.count >= packetBytes {
            out.append(packet(Array(buffer[0..<packetBytes]), final: false))
            buffer.removeFirst(packetBytes)
        }
        if endsUtterance {
            if !buffer.isEmpty { out.append(packet(buffer, final: false)) }
            if utteranceOpen { out.append(packet([], final: true)) }
            buffer.removeAll()
            reqID = nil
            seq = 0
        }
        return out
    }

    /// Ends the open utterance, if any (end of stream).
    public mutating func finish() -> [IVHCommand] {
        guard utteranceOpen || !buffer.isEmpty else { return [] }
        return push([], endsUtterance: true)
    }

    private mutating func packet(_ pcm: [UInt8], final: Bool) -> IVHCommand {
        if reqID == nil { reqID = makeID(); seq = 0 }
        seq += 1
        return .audio(reqID: reqID!, seq: seq, pcm: pcm, isFinal: final)
    }
}

extension AudioPacketizer {
    /// Little-endian bytes of s16 samples.
    public static func bytes(_ samples: [Int16]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: samples.count * 2)
        for (i, s) in samples.enumerated() {
            let u = UInt16(bitPattern: s)
            out[2 * i] = UInt8(u & 0xff)
            out[2 * i + 1] = UInt8(u >> 8)
        }
        return out
    }
}
