import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOWebSocket
import Nodes
import PipelineCore

/// One WebSocket connection of `voicepipe serve`: a fresh instance of the route's graph, fed with the
/// connection's audio (little-endian s16 PCM in the format of the graph's `app-source`) and answering
/// with its events, in the route's protocol:
///
/// - `websocket`: every event as one JSON object per text message (the `jsonl-sink` format); a text
///   message `{"type":"end"}` (or closing) ends the audio, the last events follow, then a normal close.
///   When the template has an `app-sink` fed audio (``ServeConfiguration/Answer``), that audio goes back
///   as binary messages (little-endian s16 PCM) with the notes ``SessionOutbox`` describes; the answer's
///   remaining audio is sent before the close.
/// - `tencent-asr`: Tencent's real-time ASR v2 (``TencentFrontEnd``): the signed query is checked, then
///   `{"code":0,...}`; `transcript` events become result messages (`slice_type` 0/1/2, `index`,
///   `voice_text_str`), `{"type":"end"}` is answered with the last results and `final: 1`; errors are the
///   service's codes (4002 signature, 4006 too many sessions, 4008 no audio for the idle time, ...).
///
/// A session ends cleanly on the client's end, at `max_duration_s` (the audio so far is finished) and at
/// shutdown; a disconnected client stops the graph at once. Nothing a session does affects another:
/// everything it writes goes through its ``SessionOutbox`` and is written only while the connection
/// takes it, so a client that does not read holds up neither its graph nor the server. What the client
/// sends waits in the session's ``SessionInbox`` (about two seconds of audio at most): a client that
/// sends faster than its graph takes finds the connection no longer reading, and nothing is dropped.
/// The session's life — what ends it, its outcome, what is sent before the close — is decided by one
/// ``SessionLifecycle`` value; the session only performs what it says.
final class ServeSession: Sendable {
    enum Inbound: Sendable {
        case binary(ByteBuffer)
        case text(ByteBuffer)
        case close
    }
    typealias Failure = SessionLifecycle.Failure

    let server: ServeServer
    let route: ServeConfiguration.Route
    let captures: [String: String]
    let channel: any Channel
    let head: HTTPRequestHead
    let opened = ContinuousClock.now
    /// What the client sent and the graph has not taken yet: about ``inboxSeconds`` of audio at most,
    /// beyond which the connection stops reading from its socket until the graph catches up.
    private let inbox: SessionInbox<Inbound>

    private struct State {
        /// Where the session is in its life, and what it does next (``SessionLifecycle``).
        var lifecycle: SessionLifecycle
        var pipeline: Pipeline?
        var bytes = 0
        var lastAudio = ContinuousClock.now
        var firstResultSent = false
        /// The route's wire protocol, for this session.
        var wire: any SessionProtocol
        /// What waits to be written, in order.
        var outbox: SessionOutbox
        /// When the client last took something (the outbox shrank).
        var lastProgress = ContinuousClock.now
        var warnedDrops = false
        /// The graph failed: the answer audio it left is not sent.
        var graphFailed = false
        /// What the console shows of this session, once its graph runs.
        var live: LiveSession?
    }
    private let state: LockedValue<State>
    /// Told when the client takes something, and when the lifecycle changes (the end of a session waits on it).
    private let progress = ChangeSignal()
    /// Told when the lifecycle changes (the limits' watch ends when the audio has ended).
    private let changed = ChangeSignal()

    /// The running graph, for the console (nil before it starts).
    var live: LiveSession? { state.withLock { $0.live } }

    /// At the end of a session, how long the client may take nothing before the answer audio it has not
    /// taken is dropped and the connection closed.
    static let stallLimit: Duration = .seconds(5)
    /// How much of the client's audio may wait for the graph before the connection stops reading (the
    /// carriers' calls and Wyoming's connections too).
    static let inboxSeconds = 2
    /// How many messages may wait (many tiny ones weigh more than their bytes).
    static let inboxMessages = 500

    init(server: ServeServer, route: ServeConfiguration.Route, head: HTTPRequestHead, captures: [String: String], channel: any Channel) {
        self.server = server
        self.route = route
        self.head = head
        self.captures = captures
        self.channel = channel
        state = LockedValue(State(lifecycle: SessionLifecycle(answers: route.answer != nil), wire: route.kind.sessionProtocol(),
                                  outbox: SessionOutbox(capacityMs: route.answer?.bufferMs ?? 20_000)))
        let limit = Self.inboxBytes(route.format)
        inbox = SessionInbox(limitBytes: limit, limitMessages: Self.inboxMessages, channel: channel)
    }

    /// ``inboxSeconds`` of 16-bit audio in `format`.
    static func inboxBytes(_ format: AudioFormat) -> Int { inboxSeconds * format.sampleRate * format.channels * 2 }

    private var logger: Logger { server.logger }

    /// Called once the upgrade is complete.
    func start() {
        Task { await self.run() }
    }

    func received(_ message: Inbound) {
        switch message {
        case .binary(let b), .text(let b): inbox.push(message, bytes: b.readableBytes)
        case .close: inbox.push(message, bytes: 0)
        }
    }

    func tooLarge() {
        server.metrics.error(route: route.name, code: "message_too_large")
        performNow(apply { $0.messageTooLarge(Failure(code: 4001, name: "message_too_large", message: "message larger than \(route.maxFrameBytes) bytes",
                                                     close: .messageTooLarge)) })
    }

    func disconnected() {
        performNow(apply { $0.disconnected() })
    }

    /// Shutdown after the drain grace period: end the audio; the last results are sent, then the close.
    func endForShutdown() {
        performNow(apply { $0.shutdown() })
    }

    // MARK: the lifecycle

    /// One event of the lifecycle, under the lock; returns what to do (after the lock).
    private func apply(_ event: (inout SessionLifecycle) -> [SessionLifecycle.Action]) -> [SessionLifecycle.Action] {
        let actions = state.withLock { event(&$0.lifecycle) }
        changed.notify()
        progress.notify()
        return actions
    }

    /// Performs what the lifecycle asked, in order (all but ``SessionLifecycle/Action/record(_:)`` and
    /// ``SessionLifecycle/Action/drainOutput``, which only the session's own task gets, in ``perform(_:bus:)``).
    private func performNow(_ actions: [SessionLifecycle.Action]) {
        for action in actions {
            switch action {
            case .endAudio:
                inbox.finish()
            case .stopGraph:
                // What the client sent and the graph has not taken is for no one now.
                inbox.finish(discard: true)
                state.withLock { $0.pipeline }?.stop()
            case .forgetOutput:
                state.withLock { $0.outbox.removeAll() }
            case .sendFinished:
                state.withLock { s in for m in s.wire.finished() { s.outbox.text(m) } }
            case .fail(let f):
                let close = state.withLock { s -> WebSocketErrorCode in
                    let failure = s.wire.failure(code: f.code, name: f.name, message: f.message, close: f.close)
                    s.outbox.text(failure.text)
                    return failure.close
                }
                closeConnection(close)
            case .close(let code):
                closeConnection(code)
            case .record, .drainOutput:
                assertionFailure("\(action) is performed by the session's task")
            }
        }
    }

    /// ``performNow(_:)``, and the outcome recorded, the answer audio drained.
    private func perform(_ actions: [SessionLifecycle.Action], bus: SessionEvents) async {
        for action in actions {
            switch action {
            case .record(let outcome):
                await record(outcome, bus: bus)
            case .drainOutput:
                await drainOutbox()
                await perform(apply { $0.outputDone() }, bus: bus)
            default:
                performNow([action])
            }
        }
    }

    /// The session's end in the metrics and on the bus.
    private func record(_ outcome: SessionLifecycle.Outcome, bus: SessionEvents) async {
        let (pipeline, bytes) = state.withLock { ($0.pipeline, $0.bytes) }
        let drops = pipeline?.edgeStats.reduce(0) { $0 + Int($1.dropped) } ?? 0
        let age = pipeline?.sinkAges.map(\.age.p99Ms).max()
        let seconds = pipeline == nil ? 0 : Self.seconds(ContinuousClock.now - opened)
        server.metrics.input(route: route.name, inbox.takeStatistics())
        server.metrics.sessionEnded(route: route.name, outcome: outcome.rawValue, seconds: seconds, drops: drops, mediaAgeP99Ms: age)
        await bus.finished(outcome: outcome.rawValue, audioBytes: bytes, drops: drops)
    }

    // MARK: running

    private func run() async {
        let (head, captures, route) = (self.head, self.captures, self.route)
        if let refusal = state.withLock({ $0.wire.accept(head: head, captures: captures, route: route) }) {
            server.releaseUpgrade()
            server.metrics.refused(route: route.name, code: refusal.code)
            logger.info("route '\(route.name)': refused (\(refusal.code) \(refusal.message))")
            send(text: refusal.text)
            performNow(apply { $0.refused() })
            return
        }
        guard server.admit(self) else {
            server.metrics.refused(route: route.name, code: "busy")
            performNow(apply { $0.refused(failure: Failure(code: 4006, name: "busy", message: "too many sessions (max_sessions \(server.configuration.maxSessions))",
                                                           close: .unexpectedServerError)) })
            return
        }
        server.metrics.sessionStarted(route: route.name)
        defer { server.remove(self) }
        let bus = SessionEvents(server: server, route: route.name, session: sessionID())
        bus.started(protocol: route.kind.rawValue, remote: channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" })
        let pipeline: Pipeline
        do {
            pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
        } catch {
            await perform(apply { $0.failedToStart(Failure(code: 4000, name: "graph_failed", message: "cannot start the graph: \(error)",
                                                          close: .unexpectedServerError)) }, bus: bus)
            return
        }
        let live = LiveSession(id: bus.session, route: route.name, started: opened, pipeline: pipeline)
        state.withLock { $0.pipeline = pipeline; $0.live = live }
        // A disconnect or a shutdown meanwhile takes effect now.
        performNow(apply { $0.started() })
        for message in state.withLock({ $0.wire.opened() }) { send(text: message) }
        let failure = await runGraph(pipeline, bus: bus).map { failure -> Failure in
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': session graph failed: \(failure)")
            return Failure(code: 4000, name: "graph_failed", message: "\(failure)", close: .unexpectedServerError)
        }
        await perform(apply { $0.graphFinished(failure: failure) }, bus: bus)
    }

    /// Runs the session's graph with everything around it as one task group: the graph, the events
    /// forwarded to the client, the answer audio taken from its app-sink, the limits' watch, and the
    /// client's audio pushed in (this task). Returns the graph's failure, if it failed.
    private func runGraph(_ pipeline: Pipeline, bus: SessionEvents) async -> (any Error)? {
        enum Part: Sendable { case graph((any Error)?), forwarded, answered, watched }
        let events = pipeline.events(buffer: 10_000)
        let answerRoute = route.answer
        let answerSink = route.answer.flatMap { pipeline.appSink($0.sinkID) }
        return await withTaskGroup(of: Part.self) { group in
            group.addTask {
                do { try await pipeline.run(); return .graph(nil) } catch { return .graph(error) }
            }
            // Ends with the pipeline's event bus, after the last event is written.
            group.addTask { [self] in
                for await e in events {
                    bus.forward(e)
                    self.forward(e)
                    if answerRoute?.interrupts(e) == true { self.interruptAnswer() }
                }
                return .forwarded
            }
            // The answer's audio: taken from the app-sink as it comes (the graph never waits for the client).
            if let answerSink {
                group.addTask { [self] in
                    for await frame in answerSink.frames {
                        // After a failure, what the answer still holds is not sent (the error is).
                        if self.state.withLock({ $0.graphFailed }) { break }
                        if let audio = frame.audio { self.answer(audio, marks: frame.marks) }
                    }
                    return .answered
                }
            }
            group.addTask { [self] in
                await self.watch()
                return .watched
            }
            // The client's audio, until it ends (which also ends the watch).
            await feed(pipeline)
            var failure: (any Error)?
            while let part = await group.next() {
                if case .graph(let error?) = part {
                    failure = error
                    state.withLock { $0.graphFailed = true }
                }
            }
            return failure
        }
    }

    /// The session's id on the bus: the protocol's (Tencent's voice_id); else `session_id` or `voice_id` from the query, else random.
    private func sessionID() -> String {
        if let id = state.withLock({ $0.wire.sessionID }) { return id }
        let items = URLComponents(string: head.uri)?.queryItems ?? []
        for name in ["session_id", "voice_id"] {
            if let v = items.first(where: { $0.name == name })?.value, !v.isEmpty { return v }
        }
        return NATSEventPublisher.newSessionID()
    }

    /// Pushes the client's audio into the graph until the client ends it (or leaves, or a limit is hit).
    private func feed(_ pipeline: Pipeline) async {
        defer {
            performNow(apply { $0.audioEnded() })
            // Whatever comes now is not taken (and the connection reads again, to see its close).
            inbox.finish(discard: true)
        }
        guard let source = pipeline.appSource(route.sourceID) else { return }
        defer { source.finish() }
        let channels = route.format.channels
        var carry: UInt8?
        loop: while let message = await inbox.next() {
            switch message {
            case .binary(var buffer):
                let n = buffer.readableBytes
                let over = state.withLock { s -> Bool in
                    s.bytes += n
                    s.lastAudio = .now
                    return s.bytes > route.maxBytes
                }
                server.metrics.audio(route: route.name, bytes: n)
                if over {
                    server.metrics.error(route: route.name, code: "max_bytes")
                    logger.info("route '\(route.name)': session reached max_bytes (\(route.maxBytes)); ending its audio")
                    performNow(apply { $0.limitReached() })
                    break loop
                }
                var bytes = buffer.readBytes(length: n) ?? []
                if let c = carry { bytes.insert(c, at: 0); carry = nil }
                if bytes.count % 2 == 1 { carry = bytes.removeLast() }
                var samples = [Int16](repeating: 0, count: bytes.count / 2)
                for i in 0..<samples.count { samples[i] = Int16(bitPattern: UInt16(bytes[2 * i]) | UInt16(bytes[2 * i + 1]) << 8) }
                let whole = samples.count - samples.count % channels
                if whole > 0 { await source.push(whole == samples.count ? samples : Array(samples[0..<whole])) }
            case .text(var buffer):
                let text = buffer.readString(length: buffer.readableBytes) ?? ""
                if Self.isEnd(text) { break loop }
                server.metrics.error(route: route.name, code: "unknown_message")
                if state.withLock({ $0.wire.refusesUnknownText }) {
                    performNow(apply { $0.refusedMessage(Failure(code: 4010, name: "unknown_message", message: "unknown text message", close: .protocolError)) })
                    break loop
                }
            case .close:
                break loop
            }
        }
    }

    /// Ends the audio at `max_duration_s`; Tencent's 4008 (websocket: an `idle` error) after `idle_timeout_ms`
    /// without audio. Sleeps until the nearer of the two deadlines (the idle one moves with the audio), and
    /// ends when the client's audio ends.
    private func watch() async {
        let limit = ContinuousClock.now + .seconds(route.maxDurationS)
        let idle = Duration.milliseconds(route.idleTimeoutMs)
        while true {
            let (last, takesAudio) = state.withLock { ($0.lastAudio, $0.lifecycle.takesAudio) }
            if !takesAudio || Task.isCancelled { return }
            let next = min(limit, last + idle)
            if ContinuousClock.now < next {
                _ = await changed.wait(until: next) { [self] in !state.withLock { $0.lifecycle.takesAudio } }
                continue
            }
            if ContinuousClock.now >= limit {
                server.metrics.error(route: route.name, code: "max_duration")
                logger.info("route '\(route.name)': session reached max_duration_s (\(route.maxDurationS)); ending its audio")
                performNow(apply { $0.limitReached() })
                return
            }
            if ContinuousClock.now - last >= idle {
                server.metrics.error(route: route.name, code: "idle")
                performNow(apply { $0.idle(Failure(code: 4008, name: "idle", message: "no audio for \(route.idleTimeoutMs) ms", close: .normalClosure)) })
                return
            }
        }
    }

    private static func isEnd(_ text: String) -> Bool {
        guard let data = text.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            return text.trimmingCharacters(in: .whitespacesAndNewlines) == "end"
        }
        return object["type"] as? String == "end"
    }

    // MARK: answering

    private func forward(_ event: Event) {
        for message in state.withLock({ $0.wire.messages(for: event) }) {
            send(text: message)
            noteFirstResult()
        }
    }

    /// One frame of the answer's audio, queued for the client (the oldest waiting audio dropped if the
    /// client is more than `answer_buffer_ms` behind).
    private func answer(_ audio: AudioBuffer, marks: FrameMarks) {
        let result = state.withLock { s -> (dropped: (messages: Int, nanos: Int64), warn: Bool)? in
            guard s.lifecycle.connectionOpen else { return nil }
            let dropped = s.outbox.audio(audio, marks: marks)
            let warn = dropped.messages > 0 && !s.warnedDrops
            if warn { s.warnedDrops = true }
            return (dropped, warn)
        }
        guard let result else { return }
        if result.dropped.messages > 0 {
            server.metrics.answerDropped(route: route.name, messages: result.dropped.messages, seconds: Double(result.dropped.nanos) / 1e9)
        }
        if result.warn {
            logger.info("route '\(route.name)': a client is more than \(route.answer?.bufferMs ?? 0) ms behind the answer audio; dropping the oldest")
        }
        pump()
    }

    /// An event on the answer sink's `interrupt` input: the answer audio not yet sent is discarded and
    /// the client told (`audio_flush`).
    private func interruptAnswer() {
        let flushed = state.withLock { s -> Bool in
            guard s.lifecycle.connectionOpen, s.outbox.hasAnswered else { return false }
            s.outbox.flushAudio()
            return true
        }
        if flushed { pump() }
    }

    /// Waits until the client has taken everything queued, or has taken nothing for ``stallLimit``.
    private func drainOutbox() async {
        guard route.answer != nil else { return }
        state.withLock { $0.lastProgress = .now }
        while true {
            let last = state.withLock { $0.lastProgress }
            let done = await progress.wait(until: last + Self.stallLimit) { [self] in
                state.withLock { $0.outbox.isEmpty || !$0.lifecycle.connectionOpen }
            }
            if done { return }
            // The deadline passed: the client stalled, unless it took something meanwhile.
            if state.withLock({ $0.lastProgress }) == last {
                logger.info("route '\(route.name)': the client took nothing for \(Self.stallLimit); closing without the rest of the answer audio")
                return
            }
        }
    }

    private func noteFirstResult() {
        let first = state.withLock { s -> Bool in defer { s.firstResultSent = true }; return !s.firstResultSent }
        if first { server.metrics.firstResult(route: route.name, seconds: Self.seconds(ContinuousClock.now - opened)) }
    }

    private func send(text: String) {
        let queued = state.withLock { s -> Bool in
            guard s.lifecycle.connectionOpen else { return false }
            s.outbox.text(text)
            return true
        }
        if queued { pump() }
    }

    /// The connection can take more (NIO's writability went up again).
    func writable() { pump() }

    /// Writes what waits while the connection takes it — on the channel's event loop, where
    /// writability is exact — so at most NIO's high watermark plus one message is in flight.
    private func pump() {
        let loop = channel.eventLoop
        if loop.inEventLoop { pumpOnLoop() } else { loop.execute { self.pumpOnLoop() } }
    }

    private func pumpOnLoop() {
        var wrote = false
        var audioNanos: Int64 = 0
        while channel.isWritable {
            guard let m = state.withLock({ s -> SessionOutbox.Message? in s.lifecycle.connectionOpen ? s.outbox.next() : nil }) else { break }
            write(m)
            wrote = true
            if case .audio(_, let nanos) = m { audioNanos += nanos }
        }
        guard wrote else { return }
        channel.flush()
        state.withLock { $0.lastProgress = .now }
        progress.notify()
        if audioNanos > 0 { server.metrics.answerSent(route: route.name, seconds: Double(audioNanos) / 1e9) }
    }

    private func write(_ message: SessionOutbox.Message) {
        switch message {
        case .text(let text):
            channel.write(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(string: text)), promise: nil)
        case .audio(let bytes, _):
            channel.write(WebSocketFrame(fin: true, opcode: .binary, data: channel.allocator.buffer(bytes: bytes)), promise: nil)
        }
    }

    /// Closes the connection (once: the lifecycle's `fail` or `close`): the client's audio ends, the answer
    /// audio still waiting is dropped (counted), the text messages still waiting are written, then
    /// `audio_stats` (routes with an answer), then the close frame.
    private func closeConnection(_ code: WebSocketErrorCode) {
        inbox.finish()
        let channel = self.channel
        channel.eventLoop.execute { [self] in
            let (rest, dropped, stats) = state.withLock { s -> ([SessionOutbox.Message], (messages: Int, nanos: Int64), String?) in
                let dropped = s.outbox.dropWaitingAudio()
                var rest: [SessionOutbox.Message] = []
                while let m = s.outbox.next() { rest.append(m) }
                return (rest, dropped, route.answer == nil ? nil : s.outbox.statsNote)
            }
            server.metrics.answerDropped(route: route.name, messages: dropped.messages, seconds: Double(dropped.nanos) / 1e9)
            for m in rest { write(m) }
            if let stats { write(.text(stats)) }
            var buffer = channel.allocator.buffer(capacity: 2)
            buffer.write(webSocketErrorCode: code)
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer)).whenComplete { _ in
                channel.eventLoop.scheduleTask(in: .milliseconds(200)) { channel.close(promise: nil) }
            }
            // A client that reads nothing never takes the close frame: the connection goes anyway.
            channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        }
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
