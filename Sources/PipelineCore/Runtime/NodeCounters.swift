import Synchronization

/// Named counters of one node.
public final class NodeCounters: Sendable {
    private let values = LockedValue<[String: UInt64]>([:])
    private let levels = LockedValue<[String: Double]>([:])
    init() {}
    func add(_ name: String, _ n: UInt64) { values.withLock { $0[name, default: 0] += n } }
    func set(_ name: String, _ v: Double) { levels.withLock { $0[name] = v } }
    /// A snapshot.
    public var snapshot: [String: UInt64] { values.withLock { $0 } }
    /// The gauges' last values.
    public var gauges: [String: Double] { levels.withLock { $0 } }
}

