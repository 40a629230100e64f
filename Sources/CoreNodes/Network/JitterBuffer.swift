import PipelineCore

/// An adaptive playout buffer as a pure state machine: packets go in with their arrival time, and
/// at each playout tick it says what to play. It performs no I/O and reads no clock, so it is tested
/// synchronously; ``JitterBufferNode`` drives it with the pipeline's clock.
///
/// Timing model. Packets carry a media timestamp (`Frame.pts`, ns) and a duration. The buffer plays
/// the packet whose pts is `p` at local time `p + offset`. The offset follows
/// `minimum transit + target`, where the transit of a packet is `arrival - pts` (the minimum over
/// the last ``Configuration/transitWindow`` packets tracks the fastest path and clock drift), and the
/// target delay is `jitterFactor` × the RFC 3550 interarrival jitter estimate (A.8) plus a late
/// penalty (one frame per packet that came too late, decaying with a half-life of ~140 packets),
/// clamped to `min...max`. When the target grows by a frame, one concealment frame is inserted (the stream
/// stretches); when the offset exceeds the target by ``Configuration/shrinkThreshold``, one frame is
/// skipped, preferring a missing one.
///
/// Clock drift. The sender's media clock and the local clock differ by some ppm; left alone, the
/// fastest transit creeps and the buffer corrects it in whole frames (a stretch every minute at
/// 300 ppm, audible as a gap). With ``Configuration/compensatesDrift`` the buffer estimates the drift
/// (``ClockSkewEstimator``, from the fastest transit per second of arrival) and moves the play time by
/// it at every tick, so playout follows the sender's clock and stretches and skips are left for jitter.
/// Frames then leave at the sender's rate: the playback sink's own rate matching turns that into the
/// device's rate.
///
/// ```swift
/// var jb = JitterBuffer(configuration: try .init(minMs: 20, maxMs: 200, frameMs: 20))
/// _ = jb.insert(frame, arrival: now)
/// while let due = jb.nextTickTime, due <= now { switch jb.tick() { ... } }
/// ```
public struct JitterBuffer: Sendable {
    /// Delay bounds and estimator settings, checked at construction.
    public struct Configuration: Sendable, Hashable {
        /// Smallest target delay beyond the fastest transit.
        public var minDelayNanos: Int64
        /// Largest target delay.
        public var maxDelayNanos: Int64
        /// Nominal packet interval, used for concealment frames and adaptation steps.
        public var frameNanos: Int64
        /// Target = factor × jitter estimate (before clamping).
        public var jitterFactor: Double = 4
        /// Packets over which the minimum transit is taken.
        public var transitWindow: Int = 100
        /// Excess delay that makes the buffer skip a frame.
        public var shrinkThreshold: Int64
        /// Consecutive late packets after which the buffer restarts on the incoming stream.
        public var resyncAfterLate: Int = 10
        /// Follow the sender's clock: move the play time by the estimated drift at every tick.
        public var compensatesDrift = true

        /// Creates a configuration; throws when the bounds make no sense.
        public init(minMs: Int, maxMs: Int, frameMs: Int = 20) throws(ConfigurationError) {
            guard frameMs > 0 else { throw ConfigurationError("frame_ms must be positive") }
            guard minMs >= 0, maxMs >= minMs else {
                throw ConfigurationError("need 0 <= min_ms <= max_ms (got min_ms \(minMs), max_ms \(maxMs))")
            }
            minDelayNanos = Int64(minMs) * 1_000_000
            maxDelayNanos = Int64(maxMs) * 1_000_000
            frameNanos = Int64(frameMs) * 1_000_000
            shrinkThreshold = 2 * frameNanos
        }
    }

    /// A configuration that cannot work.
    public struct ConfigurationError: Error, Sendable, Hashable, CustomStringConvertible {
        /// What is wrong.
        public var message: String
        init(_ message: String) { self.message = message }
        public var description: String { message }
    }

    /// What happened to an inserted packet.
    public enum InsertOutcome: Sendable, Hashable {
        /// Queued for playout.
        case buffered
        /// The first packet: playout starts at ``JitterBuffer/nextTickTime``.
        case started
        /// A copy of a packet already buffered or played; dropped.
        case duplicate
        /// Its playout time has passed; dropped.
        case late
        /// Too many late packets in a row, or a jump too far ahead: the buffer restarted on this packet.
        case resynchronized
    }

    /// What to play at a tick.
    public enum Action: Sendable {
        /// The packet due now. `outputPts` is the position on the continuous output timeline.
        case play(Frame, outputPts: Int64)
        /// Nothing to play for `durationNanos`: the decoder must conceal. `next` is the following
        /// packet when it is already buffered (its in-band FEC could rebuild this one).
        /// `stretch` is true when the gap was inserted to grow the delay rather than for a lost packet.
        case conceal(durationNanos: Int64, outputPts: Int64, next: Frame?, stretch: Bool)
    }

    /// Counters since the start.
    public struct Statistics: Sendable, Hashable {
        /// Packets played.
        public var played = 0
        /// Concealment frames for packets missing at their playout time.
        public var concealed = 0
        /// Concealment frames inserted to grow the delay.
        public var stretched = 0
        /// Frames skipped to shrink the delay (missing or dropped).
        public var skipped = 0
        /// Packets dropped because they came after their playout time.
        public var late = 0
        /// Duplicate packets dropped.
        public var duplicates = 0
        /// Restarts on a new timeline.
        public var resyncs = 0
    }

    /// The configuration.
    public private(set) var configuration: Configuration
    /// Counters.
    public private(set) var statistics = Statistics()
    /// RFC 3550 interarrival jitter estimate, ns.
    public private(set) var jitterNanos: Double = 0
    /// Estimated drift of the sender's clock against the local one, ppm (positive: the sender is
    /// slow); nil until a few seconds of packets were seen.
    public var driftPPM: Double? { skew.ppm }

    private var buffer: [Frame] = []           // sorted by pts
    private var playPts: Int64 = 0             // pts due at the next tick
    private var offset: Int64 = 0              // play time of pts p is p + offset
    private var started = false
    private var ticked = false
    private var outputPts: Int64 = 0
    private var transits: [Int64] = []
    private var transitIndex = 0
    private var lastTransit: Int64?
    private var played: [Int64] = []           // recently played pts, for duplicate detection
    private var consecutiveLate = 0
    private var latePenaltyNanos: Double = 0   // + one frame per late packet, decaying (half-life ~140 packets)
    private var skew = ClockSkewEstimator()
    private var driftCarry: Double = 0         // fraction of a nanosecond of drift not yet applied

    /// A buffer with nothing in it; playout starts with the first packet.
    public init(configuration: Configuration) {
        self.configuration = configuration
    }

    /// Local time at which ``tick()`` must be called next; `nil` before the first packet.
    public var nextTickTime: Int64? { started ? playPts + offset : nil }

    /// Packets waiting.
    public var count: Int { buffer.count }

    /// True when nothing waits.
    public var isEmpty: Bool { buffer.isEmpty }

    /// Current target delay beyond the fastest transit, ns.
    public var targetDelayNanos: Int64 {
        let t = Int64(configuration.jitterFactor * jitterNanos + latePenaltyNanos)
        return min(max(t, configuration.minDelayNanos), configuration.maxDelayNanos)
    }

    /// Current delay of playout beyond the fastest transit, ns.
    public var currentDelayNanos: Int64 { offset - minTransit }

    private var half: Int64 { configuration.frameNanos / 2 }
    private var minTransit: Int64 { transits.min() ?? 0 }

    /// Inserts a packet (an encoded frame whose `pts` orders the stream) that arrived at local time `arrival` (ns).
    public mutating func insert(_ frame: Frame, arrival: Int64) -> InsertOutcome {
        let pts = frame.pts
        adoptFrameDuration(frame.durationNanos)
        if started {
            if buffer.contains(where: { abs($0.pts - pts) < half }) || played.contains(where: { abs($0 - pts) < half }) {
                statistics.duplicates += 1
                return .duplicate
            }
            measure(pts: pts, arrival: arrival)
            if pts < playPts - half && !ticked {
                // Nothing played yet and an earlier packet shows up: start from it, one slot later.
                offset += playPts - pts
                playPts = pts
            }
            if pts < playPts - half {
                consecutiveLate += 1
                if consecutiveLate >= configuration.resyncAfterLate { restart(frame, arrival: arrival); return .resynchronized }
                statistics.late += 1
                latePenaltyNanos = min(latePenaltyNanos + Double(configuration.frameNanos), Double(configuration.maxDelayNanos))
                return .late
            }
            consecutiveLate = 0
            if pts > playPts + configuration.maxDelayNanos + 1_000_000_000 {
                restart(frame, arrival: arrival)
                return .resynchronized
            }
            let index = buffer.firstIndex(where: { $0.pts > pts }) ?? buffer.endIndex
            buffer.insert(frame, at: index)
            return .buffered
        }
        started = true
        measure(pts: pts, arrival: arrival)
        playPts = pts
        offset = minTransit + targetDelayNanos
        buffer = [frame]
        return .started
    }

    /// The action for the slot due at ``nextTickTime``; advances to the next slot.
    /// Call only after the buffer has started.
    public mutating func tick() -> Action {
        precondition(started, "tick() before the first packet")
        ticked = true
        if configuration.compensatesDrift, let ppm = skew.ppm {
            // The next slot is due one frame of the sender's clock later: frame × (1 + drift) locally.
            driftCarry += ppm * 1e-6 * Double(configuration.frameNanos)
            let whole = driftCarry.rounded(.towardZero)
            offset += Int64(whole)
            driftCarry -= whole
        }
        let desired = minTransit + targetDelayNanos
        // Grow the delay: play a gap now and keep the same packet for the next tick.
        if desired - offset >= configuration.frameNanos {
            offset += configuration.frameNanos
            statistics.stretched += 1
            return emitGap(next: buffer.first, stretch: true)
        }
        dropStale()
        // Shrink the delay: skip the slot due now (free when it is missing anyway).
        if offset - desired >= configuration.shrinkThreshold {
            let duration = due().map(\.durationNanos) ?? configuration.frameNanos
            if let i = dueIndex() { remember(buffer[i].pts); buffer.remove(at: i) }
            playPts += duration
            offset -= duration
            statistics.skipped += 1
            dropStale()
        }
        if let i = dueIndex() {
            let frame = buffer.remove(at: i)
            remember(frame.pts)
            let duration = frame.durationNanos > 0 ? frame.durationNanos : configuration.frameNanos
            // Re-anchor on the packet's own timestamp so odd sizes cannot drift the grid.
            playPts = frame.pts + duration
            let out = outputPts
            outputPts += duration
            statistics.played += 1
            return .play(frame, outputPts: out)
        }
        playPts += configuration.frameNanos
        statistics.concealed += 1
        return emitGap(next: buffer.first.flatMap { abs($0.pts - playPts) < half ? $0 : nil }, stretch: false)
    }

    private mutating func emitGap(next: Frame?, stretch: Bool) -> Action {
        let out = outputPts
        outputPts += configuration.frameNanos
        return .conceal(durationNanos: configuration.frameNanos, outputPts: out, next: next, stretch: stretch)
    }

    private func dueIndex() -> Int? {
        guard let first = buffer.first, abs(first.pts - playPts) < half else { return nil }
        return 0
    }

    private func due() -> Frame? { dueIndex().map { buffer[$0] } }

    /// Drops buffered packets whose slot has passed (they can only be there after a skip).
    private mutating func dropStale() {
        while let first = buffer.first, first.pts < playPts - half {
            buffer.removeFirst()
            statistics.late += 1
        }
    }

    private mutating func remember(_ pts: Int64) {
        played.append(pts)
        if played.count > 64 { played.removeFirst(played.count - 64) }
    }

    private mutating func measure(pts: Int64, arrival: Int64) {
        let transit = arrival - pts
        latePenaltyNanos *= 0.995
        if let last = lastTransit {
            let d = Double(abs(transit - last))
            jitterNanos += (d - jitterNanos) / 16
        }
        lastTransit = transit
        skew.add(arrival: arrival, transit: transit)
        if transits.count < configuration.transitWindow {
            transits.append(transit)
        } else {
            transits[transitIndex] = transit
            transitIndex = (transitIndex + 1) % configuration.transitWindow
        }
    }

    /// Packets of another length than the configured `frameNanos` (AAC's 1,024 samples: 21.3 ms at
    /// 48 kHz; Opus at 40 or 60 ms) set the concealment length and adaptation step, so gaps and
    /// stretches keep the stream's own grid.
    private mutating func adoptFrameDuration(_ duration: Int64) {
        guard duration > 0, abs(duration - configuration.frameNanos) > configuration.frameNanos / 20 else { return }
        configuration.frameNanos = duration
        configuration.shrinkThreshold = 2 * duration
    }

    private mutating func restart(_ frame: Frame, arrival: Int64) {
        let keepJitter = jitterNanos
        let keepStats = statistics
        let out = outputPts
        self = JitterBuffer(configuration: configuration)
        jitterNanos = keepJitter
        statistics = keepStats
        statistics.resyncs += 1
        outputPts = out
        _ = insert(frame, arrival: arrival)
    }
}
