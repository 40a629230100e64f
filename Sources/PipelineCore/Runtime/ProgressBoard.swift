import Synchronization

/// Progress of finite sources.
public final class ProgressBoard: Sendable {
    /// Position and total, in seconds of media.
    public struct Entry: Sendable {
        public var position: Double
        public var total: Double?
    }
    private let entries = LockedValue<[String: Entry]>([:])
    init() {}
    func update(_ id: String, position: Double, total: Double?) {
        entries.withLock { $0[id] = Entry(position: position, total: total) }
    }
    /// A snapshot by node id.
    public var snapshot: [String: Entry] { entries.withLock { $0 } }
}

