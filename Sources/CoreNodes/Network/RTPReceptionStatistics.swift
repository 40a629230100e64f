/// Per-source reception statistics of RFC 3550 (appendix A.1 and A.8), as a pure value:
/// extended sequence numbers, unique packets received, expected and lost, duplicates, reordering and
/// the interarrival jitter estimate.
///
/// ```swift
/// var stats = RTPReceptionStatistics()
/// switch stats.record(sequenceNumber: p.sequenceNumber, timestamp: p.timestamp, arrival: nowIn48kUnits) {
/// case .inOrder(let ext), .reordered(let ext): deliver(p, ext)
/// case .duplicate, .outOfRange: break
/// }
/// ```
public struct RTPReceptionStatistics: Sendable {
    /// What a packet is, relative to those seen before.
    public enum Classification: Sendable, Hashable {
        /// The highest sequence number so far (possibly after a gap); carries the extended number.
        case inOrder(Int64)
        /// Older than the highest seen but not seen before: it was overtaken.
        case reordered(Int64)
        /// Seen before.
        case duplicate
        /// Too far from the current sequence (a restart of the sender, or garbage); two consecutive
        /// such packets restart the statistics at the new sequence.
        case outOfRange
    }

    /// Largest forward jump accepted as loss (RFC 3550 A.1 `MAX_DROPOUT`).
    public static let maxDropout: Int64 = 3000
    /// Largest backward jump accepted as reordering (`MAX_MISORDER`).
    public static let maxMisorder: Int64 = 100

    /// Unique packets received.
    public private(set) var received: Int64 = 0
    /// Packets received more than once (each extra copy counts).
    public private(set) var duplicated: Int64 = 0
    /// Packets that arrived after a packet with a higher sequence number.
    public private(set) var reordered: Int64 = 0
    /// Interarrival jitter in timestamp units (RFC 3550 A.8).
    public private(set) var jitter: Double = 0
    /// Extended sequence number of the first packet, once there is one.
    public private(set) var baseSequence: Int64?
    /// Highest extended sequence number.
    public private(set) var maxSequence: Int64 = 0

    private var window = [Int64](repeating: -1, count: 1024)
    private var lastTransit: UInt32?
    private var badSequence: UInt16?

    /// Empty statistics.
    public init() {}

    /// Packets expected from the first to the highest sequence number.
    public var expected: Int64 { baseSequence.map { maxSequence - $0 + 1 } ?? 0 }
    /// Packets never received (expected minus unique received; never negative).
    public var lost: Int64 { max(0, expected - received) }

    /// Records a packet. `arrival` is the arrival time in the same units as `timestamp`.
    public mutating func record(sequenceNumber seq: UInt16, timestamp: UInt32, arrival: Int64) -> Classification {
        let ext: Int64
        if baseSequence != nil {
            let delta = Int64(Int16(bitPattern: seq &- UInt16(truncatingIfNeeded: maxSequence)))
            let candidate = maxSequence + delta
            if delta > Self.maxDropout || delta < -Self.maxMisorder {
                if let bad = badSequence, seq == bad &+ 1 {
                    // Two in a row: the sender restarted; start over from here.
                    self = RTPReceptionStatistics()
                    return record(sequenceNumber: seq, timestamp: timestamp, arrival: arrival)
                }
                badSequence = seq
                return .outOfRange
            }
            badSequence = nil
            ext = candidate
        } else {
            ext = Int64(seq)
            baseSequence = ext
            maxSequence = ext
        }
        let slot = Int(ext & 1023)
        if window[slot] == ext {
            duplicated += 1
            return .duplicate
        }
        window[slot] = ext
        received += 1
        updateJitter(timestamp: timestamp, arrival: arrival)
        if received > 1 && ext < maxSequence {
            reordered += 1
            if let base = baseSequence, ext < base { baseSequence = ext }
            return .reordered(ext)
        }
        maxSequence = ext
        return .inOrder(ext)
    }

    private mutating func updateJitter(timestamp: UInt32, arrival: Int64) {
        // Transit in timestamp units, modulo 2^32 like the RTP timestamp itself.
        let transit = UInt32(truncatingIfNeeded: arrival) &- timestamp
        if let last = lastTransit {
            let d = Double(abs(Int64(Int32(bitPattern: transit &- last))))
            jitter += (d - jitter) / 16
        }
        lastTransit = transit
    }
}
