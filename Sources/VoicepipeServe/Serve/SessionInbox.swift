import NIOCore
import PipelineCore

/// The rules of ``SessionInbox`` with no lock and no continuation of its own: what a connection has
/// received and its session has not yet taken, bounded by back-pressure instead of drops.
///
/// The connection (NIO's event loop, which cannot wait) always delivers; when more than `limitBytes` or
/// `limitMessages` wait, the inbox asks it to stop reading from the socket, and to read again once what
/// waits is down to half of both. Nothing is dropped: a client that sends faster than the graph takes
/// finds its socket full (TCP's flow control), and the server holds at most the limit plus what one read
/// of the socket brings.
///
/// `Consumer` is whatever the storage parks: a continuation in ``SessionInbox``, a number in the tests.
struct SessionInboxStateMachine<Element, Consumer> {
    /// What the caller does after releasing the lock.
    struct Actions {
        /// The parked consumer to resume, with its element (`nil`: the end).
        var consumer: (Consumer, Element?)?
        /// Whether reading from the socket should change (the new value), else nil.
        var reading: Bool?
    }

    enum NextOutcome {
        case element(Element)
        /// Finished and empty.
        case finished
        /// Nothing waits: park with ``park(_:)``.
        case mustWait
    }

    let limitBytes: Int
    let limitMessages: Int
    private var items: [(element: Element, bytes: Int)] = []
    private var head = 0
    /// Bytes and messages waiting.
    private(set) var bytes = 0
    var count: Int { items.count - head }
    /// The most bytes that waited at once.
    private(set) var peakBytes = 0
    /// Times reading stopped because too much waited.
    private(set) var pauses = 0
    /// Whether the connection should read from its socket.
    private(set) var reading = true
    private(set) var finished = false
    private var consumer: Consumer?

    init(limitBytes: Int, limitMessages: Int) {
        self.limitBytes = max(1, limitBytes)
        self.limitMessages = max(1, limitMessages)
    }

    private var over: Bool { bytes > limitBytes || count > limitMessages }
    private var lowEnough: Bool { bytes <= limitBytes / 2 && count <= limitMessages / 2 }

    /// The connection delivers one message of `bytes` bytes (ignored once finished).
    mutating func push(_ element: Element, bytes n: Int) -> Actions {
        var actions = Actions()
        guard !finished else { return actions }
        if let c = consumer {
            consumer = nil
            actions.consumer = (c, element)
            return actions
        }
        items.append((element, n))
        bytes += n
        peakBytes = max(peakBytes, bytes)
        if reading && over {
            reading = false
            pauses += 1
            actions.reading = false
        }
        return actions
    }

    /// No more messages will be delivered (what waits is still taken). `discard`: what waits is dropped too.
    mutating func finish(discard: Bool = false) -> Actions {
        var actions = Actions()
        if discard {
            items.removeAll()
            head = 0
            bytes = 0
        }
        if finished { return actions }
        finished = true
        // What comes now is not taken: reading goes on, so that the connection sees its close.
        if !reading {
            reading = true
            actions.reading = true
        }
        if let c = consumer {
            consumer = nil
            actions.consumer = (c, nil)
        }
        return actions
    }

    /// The consumer takes the next message without waiting.
    mutating func next() -> (NextOutcome, Actions) {
        var actions = Actions()
        guard head < items.count else { return (finished ? .finished : .mustWait, actions) }
        let item = items[head]
        head += 1
        bytes -= item.bytes
        if head > 64 && head * 2 > items.count {
            items.removeFirst(head)
            head = 0
        }
        if !reading && !finished && lowEnough {
            reading = true
            actions.reading = true
        }
        return (.element(item.element), actions)
    }

    /// The consumer told ``NextOutcome/mustWait`` parks. Returns `.some(value)` to resume at once with
    /// (`nil` inside: the end), `nil` when parked.
    mutating func park(_ c: Consumer) -> (resumeWith: Element??, Actions) {
        let (outcome, actions) = next()
        switch outcome {
        case .element(let e): return (.some(e), actions)
        case .finished: return (.some(nil), actions)
        case .mustWait:
            precondition(consumer == nil, "a session's inbox has one consumer")
            consumer = c
            return (nil, actions)
        }
    }

    /// The parked consumer's task was cancelled: it resumes with the end.
    mutating func cancelConsumer() -> Consumer? {
        defer { consumer = nil }
        return consumer
    }

    /// What the metrics count since the last call: the times reading stopped, and the most bytes that
    /// waited at once (the next call's peak starts from what waits now).
    mutating func takeStatistics() -> (pauses: Int, peakBytes: Int) {
        defer {
            pauses = 0
            peakBytes = bytes
        }
        return (pauses, peakBytes)
    }
}

/// The messages a connection (a WebSocket session, a Twilio or AudioSocket call, a Wyoming connection) has
/// received, taken in order by the task that feeds its graph: ``SessionInboxStateMachine`` behind a lock,
/// with the continuation of the waiting consumer and the connection's reading switched by `setReading`
/// (on or off, called outside the lock). Signals of the server's own (a drain, a timeout) may be pushed
/// too, with no bytes: they come in order after what the connection sent before them.
final class SessionInbox<Element: Sendable>: Sendable {
    private typealias Machine = SessionInboxStateMachine<Element, CheckedContinuation<Element?, Never>>
    private let state: LockedValue<Machine>
    private let setReading: @Sendable (SessionInbox<Element>) -> Void

    /// `setReading` is called when reading from the socket should change; it reads ``reading`` for the
    /// value to apply (so that changes applied late or out of order still end at the latest one).
    init(limitBytes: Int, limitMessages: Int, setReading: @escaping @Sendable (SessionInbox<Element>) -> Void) {
        state = LockedValue(Machine(limitBytes: limitBytes, limitMessages: limitMessages))
        self.setReading = setReading
    }

    /// An inbox that stops `channel` reading from its socket (its `autoRead`) while too much waits.
    convenience init(limitBytes: Int, limitMessages: Int, channel: any Channel) {
        self.init(limitBytes: limitBytes, limitMessages: limitMessages) { [channel] inbox in
            // Applied on the event loop, to the value the inbox wants then (so late or reordered calls end right).
            channel.eventLoop.execute {
                _ = channel.setOption(ChannelOptions.autoRead, value: inbox.reading)
            }
        }
    }

    /// Whether the connection should read from its socket now.
    var reading: Bool { state.withLock { $0.reading } }

    /// The times reading stopped and the most bytes that waited, since the last call (for the metrics).
    func takeStatistics() -> (pauses: Int, peakBytes: Int) { state.withLock { $0.takeStatistics() } }

    func push(_ element: Element, bytes: Int) {
        perform(state.withLock { $0.push(element, bytes: bytes) })
    }

    func finish(discard: Bool = false) {
        perform(state.withLock { $0.finish(discard: discard) })
    }

    /// The next message, waiting for one; nil once finished and empty (or cancelled).
    func next() async -> Element? {
        let (outcome, actions) = state.withLock { $0.next() }
        perform(actions)
        switch outcome {
        case .element(let e): return e
        case .finished: return nil
        case .mustWait: break
        }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Element?, Never>) in
                let (resume, actions) = state.withLock { $0.park(c) }
                perform(actions)
                if let resume { c.resume(returning: resume) }
                if Task.isCancelled, let c = state.withLock({ $0.cancelConsumer() }) { c.resume(returning: nil) }
            }
        } onCancel: {
            state.withLock { $0.cancelConsumer() }?.resume(returning: nil)
        }
    }

    private func perform(_ actions: Machine.Actions) {
        if let (c, e) = actions.consumer { c.resume(returning: e) }
        if actions.reading != nil { setReading(self) }
    }
}
