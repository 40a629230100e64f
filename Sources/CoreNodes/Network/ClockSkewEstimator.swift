/// Estimates how fast a sender's media clock runs against the local clock, from packet transit
/// times alone (`arrival − media time`, both in ns), as RTP receivers must: no clock is shared.
///
/// Network delay only ever adds to the transit, so the fastest packet of each block of arrival time
/// is the best sample of the clocks' offset. The estimate is the least-squares slope of those block
/// minima over the last ``blocks`` blocks, in parts per million (positive: the sender's clock is
/// slow, its packets drift later; negative: it is fast). Nothing is reported (``ppm`` is nil) before
/// ``minimumBlocks`` blocks, and the slope is clamped to ±``maxPPM``, beyond which a difference is a
/// timeline jump rather than drift.
struct ClockSkewEstimator: Sendable {
    /// Length of a block of arrival time.
    var blockNanos: Int64 = 1_000_000_000
    /// Blocks kept for the fit (older ones fall out: the estimate follows temperature changes).
    var blocks = 60
    /// Blocks needed before an estimate is given.
    var minimumBlocks = 5
    /// Largest drift believed, in ppm.
    var maxPPM = 1000.0

    private var minima: [(arrival: Int64, transit: Int64)] = []
    private var blockStart: Int64?
    private var blockMin: (arrival: Int64, transit: Int64)?
    /// The current estimate, ppm; nil until enough blocks were seen.
    private(set) var ppm: Double?

    /// Takes one packet's arrival time and transit (ns).
    mutating func add(arrival: Int64, transit: Int64) {
        if let start = blockStart, arrival - start >= blockNanos, let m = blockMin {
            minima.append(m)
            if minima.count > blocks { minima.removeFirst(minima.count - blocks) }
            blockStart = arrival
            blockMin = nil
            fit()
        }
        if blockStart == nil { blockStart = arrival }
        if transit < blockMin?.transit ?? .max { blockMin = (arrival, transit) }
    }

    private mutating func fit() {
        guard minima.count >= minimumBlocks else { return }
        // Centre both axes on the first point so the sums stay small.
        let x0 = Double(minima[0].arrival), y0 = Double(minima[0].transit)
        let n = Double(minima.count)
        var sx = 0.0, sy = 0.0, sxx = 0.0, sxy = 0.0
        for m in minima {
            let x = Double(m.arrival) - x0, y = Double(m.transit) - y0
            sx += x; sy += y; sxx += x * x; sxy += x * y
        }
        let d = n * sxx - sx * sx
        guard d > 0 else { return }
        let slope = (n * sxy - sx * sy) / d
        ppm = max(-maxPPM, min(maxPPM, slope * 1e6))
    }
}
