import Foundation
import Synchronization

/// The age of frames taken from an edge (now minus ``Frame/created``), in milliseconds.
public struct AgeSummary: Sendable, Hashable {
    /// Frames measured.
    public var count: UInt64
    /// Median age.
    public var p50Ms: Double
    /// 99th percentile.
    public var p99Ms: Double
    /// Oldest frame seen.
    public var maxMs: Double
}

/// A log-scaled histogram of ages: 8 buckets per doubling from 1 µs to about 70 s (precision about
/// 9 %), exact maximum. Small and fixed-size, so every edge can keep one.
struct AgeHistogram: Sendable {
    static let bucketsPerOctave = 8.0
    static let bucketCount = 210
    private var buckets = [UInt32](repeating: 0, count: AgeHistogram.bucketCount)
    private(set) var count: UInt64 = 0
    private(set) var maxNanos: Int64 = 0

    mutating func merge(_ other: AgeHistogram) {
        for i in buckets.indices { buckets[i] &+= other.buckets[i] }
        count += other.count
        maxNanos = max(maxNanos, other.maxNanos)
    }

    mutating func record(nanos: Int64) {
        let n = max(0, nanos)
        count += 1
        if n > maxNanos { maxNanos = n }
        buckets[Self.bucket(n)] &+= 1
    }

    static func bucket(_ nanos: Int64) -> Int {
        let micros = Double(nanos) / 1000
        guard micros > 1 else { return 0 }
        return min(bucketCount - 1, Int(log2(micros) * bucketsPerOctave) + 1)
    }

    /// Upper bound of bucket `i`, in nanoseconds.
    static func upperNanos(_ i: Int) -> Double { i == 0 ? 1000 : 1000 * exp2(Double(i) / bucketsPerOctave) }

    func percentileNanos(_ q: Double) -> Double {
        guard count > 0 else { return 0 }
        let target = UInt64((Double(count) * q).rounded(.up))
        var seen: UInt64 = 0
        for (i, c) in buckets.enumerated() {
            seen += UInt64(c)
            if seen >= max(1, target) { return min(Self.upperNanos(i), Double(maxNanos)) }
        }
        return Double(maxNanos)
    }

    var summary: AgeSummary? {
        guard count > 0 else { return nil }
        return AgeSummary(count: count, p50Ms: percentileNanos(0.5) / 1e6, p99Ms: percentileNanos(0.99) / 1e6, maxMs: Double(maxNanos) / 1e6)
    }
}

/// The pipeline's clock as "time since the pipeline started", for stamping and measuring frames.
struct MediaClock: Sendable {
    let now: @Sendable () -> Duration

    init<C: Clock<Duration>>(_ clock: C) {
        let start = clock.now
        now = { start.duration(to: clock.now) }
    }
}

/// What a node last took from its inputs: the ``Frame/created`` its derived frames inherit.
final class AgeCarrier: Sendable {
    private let nanos = Atomic<Int64>(Int64.min)
    init() {}
    func take(_ frame: Frame) {
        if let c = frame.created { nanos.store(c.nanoseconds, ordering: .relaxed) }
    }
    var last: Duration? {
        let n = nanos.load(ordering: .relaxed)
        return n == Int64.min ? nil : .nanoseconds(n)
    }
}

/// A sink's latency budget: frames older than it are counted and reported as `late` events.
final class LatenessWatch: Sendable {
    let budget: Duration
    let clock: MediaClock
    let report: @Sendable (Duration) async -> Void

    init(budget: Duration, clock: MediaClock, report: @escaping @Sendable (Duration) async -> Void) {
        self.budget = budget
        self.clock = clock
        self.report = report
    }

    func check(_ frame: Frame) async {
        guard let c = frame.created else { return }
        await check(age: clock.now() - c)
    }

    func check(age: Duration) async {
        if age > budget { await report(age) }
    }
}

extension Duration {
    /// The duration in whole nanoseconds (saturating).
    var nanoseconds: Int64 {
        let (s, a) = components
        let (ns, o1) = s.multipliedReportingOverflow(by: 1_000_000_000)
        if o1 { return s < 0 ? Int64.min + 1 : Int64.max }
        let (t, o2) = ns.addingReportingOverflow(a / 1_000_000_000)
        return o2 ? Int64.max : t
    }

    /// The duration in milliseconds, as a double.
    var milliseconds: Double { Double(nanoseconds) / 1e6 }
}
