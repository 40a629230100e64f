import Synchronization

/// Delivers every event of a pipeline to its subscribers (bounded; drops counted).
public final class EventBus: Sendable {
    private struct State {
        var subscribers: [UInt64: AsyncStream<Event>.Continuation] = [:]
        var next: UInt64 = 0
        var dropped: UInt64 = 0
    }
    private let state = LockedValue(State())
    init() {}

    /// Events dropped because a subscriber fell more than its buffer behind.
    public var dropped: UInt64 { state.withLock { $0.dropped } }

    func publish(_ event: Event) {
        let subs = state.withLock { Array($0.subscribers.values) }
        guard !subs.isEmpty else { return }
        var drops: UInt64 = 0
        for s in subs {
            if case .dropped = s.yield(event) { drops += 1 }
        }
        if drops > 0 { state.withLock { $0.dropped += drops } }
    }

    func subscribe(buffer: Int) -> AsyncStream<Event> {
        let (stream, continuation) = AsyncStream<Event>.makeStream(bufferingPolicy: .bufferingOldest(buffer))
        let id = state.withLock { s -> UInt64 in
            s.next += 1
            s.subscribers[s.next] = continuation
            return s.next
        }
        continuation.onTermination = { [weak self] _ in
            _ = self?.state.withLock { $0.subscribers.removeValue(forKey: id) }
        }
        return stream
    }

    func finishAll() {
        let subs = state.withLock { s -> [AsyncStream<Event>.Continuation] in
            let v = Array(s.subscribers.values); s.subscribers = [:]; return v
        }
        for s in subs { s.finish() }
    }
}

