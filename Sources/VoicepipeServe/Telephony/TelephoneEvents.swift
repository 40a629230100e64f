/// RFC 4733 telephone events (DTMF digits in RTP): each event is a run of packets with one RTP timestamp,
/// the duration growing, the last three with the end bit. A digit is reported once, at its end (or, when
/// every end packet was lost, when the next event begins or the stream ends).
struct TelephoneEventDetector: Sendable {
    struct Digit: Sendable, Equatable {
        var digit: String
        var durationMs: Int
    }

    private var current: (timestamp: UInt32, event: UInt8, duration: Int)?
    private var lastEnded: UInt32?
    /// Payloads that were not 4 bytes or more, or named events that are not digits (counted, ignored).
    private(set) var ignored = 0

    /// The digit names of events 0…16 (0–9, *, #, A–D, flash).
    static let names = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9", "*", "#", "A", "B", "C", "D", "flash"]

    static func parse(_ payload: [UInt8]) -> (event: UInt8, end: Bool, volume: UInt8, duration: Int)? {
        guard payload.count >= 4 else { return nil }
        return (payload[0], payload[1] & 0x80 != 0, payload[1] & 0x3f, Int(payload[2]) << 8 | Int(payload[3]))
    }

    /// One telephone-event packet; the digits it completes.
    mutating func packet(timestamp: UInt32, payload: [UInt8], clock: Int = 8000) -> [Digit] {
        guard let p = Self.parse(payload), Int(p.event) < Self.names.count else { ignored += 1; return [] }
        if timestamp == lastEnded { return [] }       // a repeated end packet
        var out: [Digit] = []
        if let c = current, c.timestamp != timestamp {
            out.append(Digit(digit: Self.names[Int(c.event)], durationMs: c.duration * 1000 / clock))
            current = nil
        }
        current = (timestamp, p.event, max(p.duration, current?.duration ?? 0))
        if p.end, let c = current {
            out.append(Digit(digit: Self.names[Int(c.event)], durationMs: c.duration * 1000 / clock))
            lastEnded = timestamp
            current = nil
        }
        return out
    }

    /// The stream ended: an event whose end packets never came.
    mutating func finish(clock: Int = 8000) -> [Digit] {
        defer { current = nil }
        return current.map { [Digit(digit: Self.names[Int($0.event)], durationMs: $0.duration * 1000 / clock)] } ?? []
    }

    /// SIP INFO `application/dtmf-relay` (`Signal=5` and `Duration=160` lines) and `application/dtmf` (the digit alone).
    static func info(contentType: String, body: String) -> Digit? {
        let type = contentType.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased() ?? ""
        if type == "application/dtmf" {
            let d = body.trimmingCharacters(in: .whitespacesAndNewlines).uppercased()
            return names.contains(d) ? Digit(digit: d, durationMs: 0) : nil
        }
        guard type == "application/dtmf-relay" else { return nil }
        var digit: String?, duration = 0
        for line in body.split(whereSeparator: { $0.isNewline }) {
            let kv = line.split(separator: "=", maxSplits: 1).map { $0.trimmingCharacters(in: .whitespaces) }
            guard kv.count == 2 else { continue }
            switch kv[0].lowercased() {
            case "signal":
                let s = kv[1].uppercased()
                if names.contains(s) { digit = s } else if let n = Int(s), (0..<names.count).contains(n) { digit = names[n] }
            case "duration": duration = Int(kv[1]) ?? 0
            default: break
            }
        }
        return digit.map { Digit(digit: $0, durationMs: duration) }
    }
}
