import NIOWebSocket

/// A WebSocket session's life (``ServeSession``) as a pure value: accepting → running → ending(outcome)
/// → draining(outcome) → closed(outcome). No lock, no clock and no I/O of its own: every event is a
/// `mutating` function that returns the ``Action``s the session performs, in order, once it has
/// released its lock.
///
/// Rules, in one place:
/// - The first event that ends the client's audio names the outcome: the client's end (`completed`), a
///   disconnect, a shutdown, a limit (`max_bytes`, `max_duration_s`), the idle timeout, a refused
///   message (`error`). Later ones do not change it; a graph that fails turns `completed` into `error`.
/// - A disconnect or a shutdown before the graph runs takes effect as it starts.
/// - A disconnect stops the graph at once and forgets what waits for the client; a shutdown or a limit
///   only ends the audio (the results so far are still sent).
/// - Once the graph has finished, the client takes the answer audio still waiting (routes that answer,
///   connection open); then the outcome is recorded — exactly once — then the protocol's last messages
///   and a normal close, or the graph's failure and its close.
/// - The connection is closed once: a failure's close, the normal close, or the client leaving.
struct SessionLifecycle: Sendable, Equatable {
    /// How a session ended; the raw values are the metrics' `outcome` labels and the `finished` event's.
    enum Outcome: String, Sendable, Equatable, CaseIterable {
        case completed, disconnected, shutdown, limit, idle, error
    }

    /// An error the client is told before the connection closes (in the route's protocol).
    struct Failure: Sendable, Equatable {
        var code: Int
        var name: String
        var message: String
        var close: WebSocketErrorCode
    }

    enum Phase: Sendable, Equatable {
        /// Before the graph runs (the protocol's checks, admission, the graph built); a disconnect or a
        /// shutdown asked for meanwhile is `pending`.
        case accepting(pending: Outcome?)
        /// The client's audio goes into the graph.
        case running
        /// The client's audio has ended, for `outcome`'s reason: the graph finishes.
        case ending(Outcome)
        /// The graph has finished: the client takes the answer audio that waits for it (or stalls).
        case draining(Outcome)
        /// Over and recorded (nil: refused before it was a session, nothing recorded).
        case closed(Outcome?)
    }

    /// What the session does after releasing its lock, in order.
    enum Action: Sendable, Equatable {
        /// No more of the client's audio goes into the graph (the messages already waiting still do).
        case endAudio
        /// Stop the graph at once.
        case stopGraph
        /// The client is gone: what waits to be written is forgotten.
        case forgetOutput
        /// Wait until the client has taken what waits (or stalls), then report ``outputDone()``.
        case drainOutput
        /// Record the outcome: metrics and the `finished` event.
        case record(Outcome)
        /// The protocol's last messages (queued before the close).
        case sendFinished
        /// The protocol's error message, then the close it calls for (the audio ends with it).
        case fail(Failure)
        /// The close frame, then the connection closes (the audio ends with it).
        case close(WebSocketErrorCode)
    }

    private(set) var phase: Phase = .accepting(pending: nil)
    /// The connection is open and no close was sent: messages may still be queued for the client.
    private(set) var connectionOpen = true
    /// The session's route sends answer audio (which the client takes before the close).
    let answers: Bool

    init(answers: Bool) {
        self.answers = answers
    }

    // MARK: Reading

    /// The outcome so far (`completed` until something else happens).
    var outcome: Outcome {
        switch phase {
        case .accepting(let pending): pending ?? .completed
        case .running: .completed
        case .ending(let o), .draining(let o): o
        case .closed(let o): o ?? .completed
        }
    }

    /// True while the client's audio still goes into the graph (the limits are watched).
    var takesAudio: Bool {
        switch phase {
        case .accepting(let pending): pending == nil
        case .running: true
        case .ending, .draining, .closed: false
        }
    }

    var isClosed: Bool {
        if case .closed = phase { return true }
        return false
    }

    // MARK: Events before the graph runs

    /// The protocol's checks or the admission refused the session (its message already queued): the
    /// connection closes with `code` (nil: the failure's own); nothing is recorded.
    mutating func refused(failure: Failure? = nil, close code: WebSocketErrorCode = .normalClosure) -> [Action] {
        guard case .accepting = phase else { return [] }
        phase = .closed(nil)
        return closeConnection(failure.map { Action.fail($0) } ?? Action.close(code))
    }

    /// The graph could not be built: recorded as an error, then the failure sent.
    mutating func failedToStart(_ failure: Failure) -> [Action] {
        guard case .accepting = phase else { return [] }
        phase = .closed(.error)
        return [.record(.error)] + closeConnection(.fail(failure))
    }

    /// The graph runs and the client's audio goes in.
    mutating func started() -> [Action] {
        guard case .accepting(let pending) = phase else { return [] }
        guard let pending else {
            phase = .running
            return []
        }
        phase = .ending(pending)
        return pending == .disconnected ? [.endAudio, .stopGraph] : [.endAudio]
    }

    // MARK: Events while the audio runs

    /// The client's audio ended: its end message, a close frame, or the inbox ended by another event
    /// (which then named the outcome).
    mutating func audioEnded() -> [Action] {
        guard case .running = phase else { return [] }
        phase = .ending(.completed)
        return []
    }

    /// The connection is gone.
    mutating func disconnected() -> [Action] {
        let wasOpen = connectionOpen
        connectionOpen = false
        switch phase {
        case .accepting(let pending):
            phase = .accepting(pending: pending ?? .disconnected)
            return wasOpen ? [.forgetOutput] : []
        case .running:
            phase = .ending(.disconnected)
            return [.forgetOutput, .endAudio, .stopGraph]
        case .ending:
            // The results are for no one now.
            return [.forgetOutput, .stopGraph]
        case .draining:
            return [.forgetOutput]
        case .closed:
            return []
        }
    }

    /// The server's drain is over: the audio ends, the results so far are sent.
    mutating func shutdown() -> [Action] {
        switch phase {
        case .accepting(.none):
            phase = .accepting(pending: .shutdown)
            return []
        case .running:
            phase = .ending(.shutdown)
            return [.endAudio]
        default:
            return []
        }
    }

    /// `max_bytes` or `max_duration_s`: the audio ends, the results so far are sent.
    mutating func limitReached() -> [Action] {
        guard case .running = phase else { return [] }
        phase = .ending(.limit)
        return [.endAudio]
    }

    /// No audio for `idle_timeout_ms`: the client is told, the graph stops.
    mutating func idle(_ failure: Failure) -> [Action] {
        guard case .running = phase else { return [] }
        phase = .ending(.idle)
        return closeConnection(.fail(failure)) + [.stopGraph, .endAudio]
    }

    /// A text message the protocol refuses: the client is told; the graph finishes what it has.
    mutating func refusedMessage(_ failure: Failure) -> [Action] {
        guard case .running = phase else { return [] }
        phase = .ending(.error)
        return closeConnection(.fail(failure)) + [.endAudio]
    }

    /// A message over `max_frame_bytes`: the client is told and the connection closes; the audio ends
    /// with it (the outcome is what that end makes it).
    mutating func messageTooLarge(_ failure: Failure) -> [Action] {
        if case .closed = phase { return [] }
        return closeConnection(.fail(failure))
    }

    // MARK: Events at the end

    /// The graph and everything around it have finished (`failure`: the graph failed).
    mutating func graphFinished(failure: Failure?) -> [Action] {
        let outcome: Outcome
        switch phase {
        case .running: outcome = .completed
        case .ending(let o): outcome = o
        case .accepting, .draining, .closed: return []
        }
        if let failure {
            let o: Outcome = outcome == .completed ? .error : outcome
            phase = .closed(o)
            return [.record(o)] + closeConnection(.fail(failure))
        }
        if answers && connectionOpen {
            phase = .draining(outcome)
            return [.drainOutput]
        }
        return finish(outcome)
    }

    /// The client took everything that waited, or stalled, or left.
    mutating func outputDone() -> [Action] {
        guard case .draining(let outcome) = phase else { return [] }
        return finish(outcome)
    }

    private mutating func finish(_ outcome: Outcome) -> [Action] {
        phase = .closed(outcome)
        guard connectionOpen else { return [.record(outcome)] }
        return [.record(outcome), .sendFinished] + closeConnection(.close(.normalClosure))
    }

    /// `action` (a fail or a close) if the connection is still open; it is closed from then on.
    private mutating func closeConnection(_ action: Action) -> [Action] {
        guard connectionOpen else { return [] }
        connectionOpen = false
        return [action]
    }
}
