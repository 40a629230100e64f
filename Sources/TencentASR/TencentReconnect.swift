/// When and how often the `tencent` engine reconnects after a dropped connection.
///
/// Delays double from ``initialDelay`` up to ``maxDelay``; after ``maxAttempts`` consecutive
/// failed attempts the engine gives up. Only a connection that delivered a recognition result
/// resets the count (a server that accepts the handshake and then fails every time is still
/// failing), and no more than ``maxPerWindow`` reconnections happen within ``window`` whatever
/// the results.
public struct TencentReconnectPolicy: Sendable, Hashable {
    /// Delay before the first reconnection attempt.
    public var initialDelay: Duration
    /// Upper bound of the delay.
    public var maxDelay: Duration
    /// Consecutive failed attempts before giving up.
    public var maxAttempts: Int
    /// The sliding window of ``maxPerWindow``.
    public var window: Duration = .seconds(60)
    /// Most reconnections within ``window``.
    public var maxPerWindow: Int { max(10, 3 * maxAttempts) }

    /// Creates a policy; `maxAttempts` must be at least 1.
    public init(initialDelay: Duration = .milliseconds(250), maxDelay: Duration = .seconds(8), maxAttempts: Int = 6) {
        precondition(maxAttempts >= 1, "maxAttempts must be at least 1")
        self.initialDelay = initialDelay
        self.maxDelay = maxDelay
        self.maxAttempts = maxAttempts
    }

    /// The delay before attempt `n` (1-based).
    public func delay(attempt n: Int) -> Duration {
        var d = initialDelay
        for _ in 1..<max(n, 1) {
            d = d * 2
            if d >= maxDelay { return maxDelay }
        }
        return min(d, maxDelay)
    }
}

/// The reconnection state machine: counts consecutive failures and says what to do next.
public struct TencentReconnectState: Sendable {
    /// What to do after a connection ended without finishing the stream.
    public enum Action: Sendable, Equatable {
        /// Wait, then connect again (attempt numbers from 1).
        case reconnect(after: Duration, attempt: Int)
        /// Too many consecutive failures.
        case giveUp(attempts: Int)
    }

    /// The policy.
    public let policy: TencentReconnectPolicy
    /// Consecutive failed attempts so far.
    public private(set) var failures = 0
    private var recent: [Duration] = []

    /// Creates the state.
    public init(policy: TencentReconnectPolicy) { self.policy = policy }

    /// The server accepted a connection. This alone does not reset the failure count.
    public mutating func connected() {}

    /// The connection delivered a recognition result: the failure count starts again.
    public mutating func progressed() { failures = 0 }

    /// A connection failed or dropped at `now` (any monotonic time line; `nil`: no window check).
    public mutating func connectionLost(at now: Duration? = nil) -> Action {
        failures += 1
        if failures > policy.maxAttempts { return .giveUp(attempts: failures - 1) }
        if let now {
            recent.removeAll { now - $0 >= policy.window }
            if recent.count >= policy.maxPerWindow { return .giveUp(attempts: recent.count) }
            recent.append(now)
        }
        return .reconnect(after: policy.delay(attempt: failures), attempt: failures)
    }
}

/// Audio waiting to be sent to the service, and audio sent on the current connection that the
/// service has not yet confirmed with a final result.
///
/// Bounded by ``capacity`` samples in total: when full, the oldest audio is dropped and counted
/// in ``droppedSamples``. When a connection is lost, the unconfirmed audio goes back to the
/// front of the queue so the next connection recognizes it again and no speech is lost.
///
/// Times are in samples; "connection time" is the position in the audio sent on the current
/// connection, which is what the server's `start_time`/`end_time` count from.
public struct TencentAudioBacklog: Sendable {
    /// A run of audio.
    public struct Chunk: Sendable, Equatable {
        /// Samples (mono s16).
        public var samples: [Int16]
        /// Media position of the first sample, in samples since the start of the stream.
        public var mediaStart: Int64
        /// Connection position of the first sample once sent.
        public var connectionStart: Int64 = 0

        /// Creates a chunk.
        public init(samples: [Int16], mediaStart: Int64) {
            self.samples = samples
            self.mediaStart = mediaStart
        }
    }

    /// Most samples held (pending plus unconfirmed).
    public let capacity: Int
    /// Samples dropped because the backlog was full.
    public private(set) var droppedSamples: Int64 = 0
    /// Samples sent on the current connection.
    public private(set) var connectionPosition: Int64 = 0
    private var pending: [Chunk] = []
    private var pendingHead = 0
    private var unconfirmed: [Chunk] = []
    private var anchors: [(connection: Int64, media: Int64)] = []
    private var lastSentMediaEnd: Int64?

    /// Creates an empty backlog.
    public init(capacity: Int) {
        precondition(capacity > 0, "capacity must be positive")
        self.capacity = capacity
    }

    /// Samples waiting to be sent.
    public var pendingSamples: Int { pending[pendingHead...].reduce(0) { $0 + $1.samples.count } }
    /// Samples sent and not yet confirmed.
    public var unconfirmedSamples: Int { unconfirmed.reduce(0) { $0 + $1.samples.count } }
    /// True when nothing waits to be sent.
    public var isEmpty: Bool { pendingHead >= pending.count }

    /// Queues audio; returns the number of samples dropped to make room.
    @discardableResult
    public mutating func append(_ chunk: Chunk) -> Int {
        guard !chunk.samples.isEmpty else { return 0 }
        pending.append(chunk)
        return enforceCapacity()
    }

    /// The next chunk to send, now counted as sent on the current connection.
    public mutating func next() -> Chunk? {
        guard pendingHead < pending.count else { return nil }
        var c = pending[pendingHead]
        pendingHead += 1
        if pendingHead > 64, pendingHead * 2 > pending.count {
            pending.removeFirst(pendingHead)
            pendingHead = 0
        }
        c.connectionStart = connectionPosition
        if lastSentMediaEnd != c.mediaStart {
            anchors.append((connectionPosition, c.mediaStart))   // a gap in media time: a new mapping
        }
        lastSentMediaEnd = c.mediaStart + Int64(c.samples.count)
        connectionPosition += Int64(c.samples.count)
        unconfirmed.append(c)
        return c
    }

    /// The server finished an utterance up to connection position `end`: audio before it
    /// need not be sent again.
    public mutating func confirm(through end: Int64) {
        while let first = unconfirmed.first, first.connectionStart + Int64(first.samples.count) <= end {
            unconfirmed.removeFirst()
        }
    }

    /// Maps a connection position (from a server result) to a media position.
    public func mediaPosition(connection position: Int64) -> Int64 {
        guard let a = anchors.last(where: { $0.connection <= position }) ?? anchors.first else { return position }
        return a.media + (position - a.connection)
    }

    /// The connection ended cleanly with a final result: nothing needs sending again, and
    /// positions start again for the next connection.
    public mutating func connectionEnded() {
        unconfirmed = []
        anchors = []
        lastSentMediaEnd = nil
        connectionPosition = 0
    }

    /// The connection ended: unconfirmed audio goes back in front of the queue, and positions
    /// start again for the next connection. Returns the samples dropped to stay within capacity.
    @discardableResult
    public mutating func connectionLost() -> Int {
        pending = unconfirmed + Array(pending[pendingHead...])
        pendingHead = 0
        unconfirmed = []
        anchors = []
        lastSentMediaEnd = nil
        connectionPosition = 0
        return enforceCapacity()
    }

    private mutating func enforceCapacity() -> Int {
        var total = pendingSamples + unconfirmedSamples
        var dropped = 0
        // Forget sent-but-unconfirmed audio first (the server has it; it only cannot be
        // replayed after a drop), then drop the oldest pending audio.
        while total > capacity, !unconfirmed.isEmpty {
            total -= unconfirmed.removeFirst().samples.count
        }
        while total > capacity, pendingHead < pending.count {
            let excess = total - capacity
            let n = pending[pendingHead].samples.count
            if n <= excess {
                pendingHead += 1
                total -= n
                dropped += n
            } else {
                pending[pendingHead].samples.removeFirst(excess)
                pending[pendingHead].mediaStart += Int64(excess)
                total -= excess
                dropped += excess
            }
        }
        droppedSamples += Int64(dropped)
        return dropped
    }
}
