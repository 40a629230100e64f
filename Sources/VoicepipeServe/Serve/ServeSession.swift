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
/// takes it, so a client that does not read holds up neither its graph nor the server.
final class ServeSession: Sendable {
    enum Inbound: Sendable {
        case binary(ByteBuffer)
        case text(ByteBuffer)
        case close
    }

    let server: ServeServer
    let route: ServeConfiguration.Route
    let captures: [String: String]
    let channel: any Channel
    let head: HTTPRequestHead
    let opened = ContinuousClock.now
    private let inbox: AsyncStream<Inbound>.Continuation
    private let messages: AsyncStream<Inbound>

    private struct State {
        var pipeline: Pipeline?
        var finished = false            // no more audio will be pushed
        var closed = false              // the connection is gone or closing
        var outcome = "completed"
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
    /// Told when the client takes something or the connection closes (the end of a session waits on it).
    private let progress = ChangeSignal()
    /// Told when the client's audio has ended (the limits' watch ends with it).
    private let audioEnded = ChangeSignal()

    /// The running graph, for the console (nil before it starts).
    var live: LiveSession? { state.withLock { $0.live } }

    /// At the end of a session, how long the client may take nothing before the answer audio it has not
    /// taken is dropped and the connection closed.
    static let stallLimit: Duration = .seconds(5)

    init(server: ServeServer, route: ServeConfiguration.Route, head: HTTPRequestHead, captures: [String: String], channel: any Channel) {
        self.server = server
        self.route = route
        self.head = head
        self.captures = captures
        self.channel = channel
        state = LockedValue(State(wire: route.kind.sessionProtocol(), outbox: SessionOutbox(capacityMs: route.answer?.bufferMs ?? 20_000)))
        (messages, inbox) = AsyncStream.makeStream(of: Inbound.self, bufferingPolicy: .unbounded)
    }

    private var logger: Logger { server.logger }

    /// Called once the upgrade is complete.
    func start() {
        Task { await self.run() }
    }

    func received(_ message: Inbound) { inbox.yield(message) }

    func tooLarge() {
        server.metrics.error(route: route.name, code: "message_too_large")
        fail(code: 4001, websocketCode: "message_too_large", message: "message larger than \(route.maxFrameBytes) bytes", close: .messageTooLarge)
    }

    func disconnected() {
        let wasOpen = state.withLock { s -> Bool in
            defer { s.closed = true }
            if !s.finished { s.outcome = "disconnected" }
            s.outbox.removeAll()
            return !s.closed
        }
        if wasOpen { inbox.finish() }
        state.withLock { $0.pipeline }?.stop()
    }

    /// Shutdown after the drain grace period: end the audio; the last results are sent, then the close.
    func endForShutdown() {
        state.withLock { if $0.outcome == "completed" { $0.outcome = "shutdown" } }
        inbox.finish()
    }

    // MARK: running

    private func run() async {
        let (head, captures, route) = (self.head, self.captures, self.route)
        if let refusal = state.withLock({ $0.wire.accept(head: head, captures: captures, route: route) }) {
            server.releaseUpgrade()
            server.metrics.refused(route: route.name, code: refusal.code)
            logger.info("route '\(route.name)': refused (\(refusal.code) \(refusal.message))")
            send(text: refusal.text)
            close(.normalClosure)
            return
        }
        guard server.admit(self) else {
            server.metrics.refused(route: route.name, code: "busy")
            fail(code: 4006, websocketCode: "busy", message: "too many sessions (max_sessions \(server.configuration.maxSessions))",
                 close: .unexpectedServerError)
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
            server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: 0, drops: 0, mediaAgeP99Ms: nil)
            await bus.finished(outcome: "error", audioBytes: 0, drops: 0)
            fail(code: 4000, websocketCode: "graph_failed", message: "cannot start the graph: \(error)", close: .unexpectedServerError)
            return
        }
        let live = LiveSession(id: bus.session, route: route.name, started: opened, pipeline: pipeline)
        state.withLock { $0.pipeline = pipeline; $0.live = live }
        if state.withLock({ $0.closed }) { pipeline.stop() }
        for message in state.withLock({ $0.wire.opened() }) { send(text: message) }
        let failure = await runGraph(pipeline, bus: bus)
        if failure == nil { await drainOutbox() }
        let stats = pipeline.edgeStats
        let drops = stats.reduce(0) { $0 + Int($1.dropped) }
        let age = pipeline.sinkAges.map(\.age.p99Ms).max()
        let outcome = state.withLock { s -> String in
            if failure != nil && s.outcome == "completed" { s.outcome = "error" }
            return s.outcome
        }
        let seconds = Self.seconds(ContinuousClock.now - opened)
        server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: seconds, drops: drops, mediaAgeP99Ms: age)
        await bus.finished(outcome: outcome, audioBytes: state.withLock { $0.bytes }, drops: drops)
        if let failure {
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': session graph failed: \(failure)")
            fail(code: 4000, websocketCode: "graph_failed", message: "\(failure)", close: .unexpectedServerError)
            return
        }
        if outcome != "disconnected" {
            for message in state.withLock({ $0.wire.finished() }) { send(text: message) }
        }
        close(.normalClosure)
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
        guard let source = pipeline.appSource(route.sourceID) else { return }
        let channels = route.format.channels
        var carry: UInt8?
        for await message in messages {
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
                    state.withLock { $0.outcome = "limit" }
                    logger.info("route '\(route.name)': session reached max_bytes (\(route.maxBytes)); ending its audio")
                    break
                }
                var bytes = buffer.readBytes(length: n) ?? []
                if let c = carry { bytes.insert(c, at: 0); carry = nil }
                if bytes.count % 2 == 1 { carry = bytes.removeLast() }
                var samples = [Int16](repeating: 0, count: bytes.count / 2)
                for i in 0..<samples.count { samples[i] = Int16(bitPattern: UInt16(bytes[2 * i]) | UInt16(bytes[2 * i + 1]) << 8) }
                let whole = samples.count - samples.count % channels
                if whole > 0 { await source.push(whole == samples.count ? samples : Array(samples[0..<whole])) }
                continue
            case .text(var buffer):
                let text = buffer.readString(length: buffer.readableBytes) ?? ""
                if Self.isEnd(text) { break }
                server.metrics.error(route: route.name, code: "unknown_message")
                if state.withLock({ $0.wire.refusesUnknownText }) {
                    fail(code: 4010, websocketCode: "unknown_message", message: "unknown text message", close: .protocolError)
                    state.withLock { $0.outcome = "error" }
                    break
                }
                continue
            case .close:
                break
            }
            break
        }
        state.withLock { $0.finished = true }
        audioEnded.notify()
        source.finish()
    }

    /// Ends the audio at `max_duration_s`; Tencent's 4008 (websocket: an `idle` error) after `idle_timeout_ms`
    /// without audio. Sleeps until the nearer of the two deadlines (the idle one moves with the audio), and
    /// ends when the client's audio ends.
    private func watch() async {
        let limit = ContinuousClock.now + .seconds(route.maxDurationS)
        let idle = Duration.milliseconds(route.idleTimeoutMs)
        while true {
            let (last, finished) = state.withLock { ($0.lastAudio, $0.finished) }
            if finished || Task.isCancelled { return }
            let next = min(limit, last + idle)
            if ContinuousClock.now < next {
                _ = await audioEnded.wait(until: next) { [self] in state.withLock { $0.finished } }
                continue
            }
            if ContinuousClock.now >= limit {
                server.metrics.error(route: route.name, code: "max_duration")
                state.withLock { $0.outcome = "limit" }
                logger.info("route '\(route.name)': session reached max_duration_s (\(route.maxDurationS)); ending its audio")
                inbox.finish()
                return
            }
            if ContinuousClock.now - last >= idle {
                server.metrics.error(route: route.name, code: "idle")
                state.withLock { $0.outcome = "idle" }
                fail(code: 4008, websocketCode: "idle", message: "no audio for \(route.idleTimeoutMs) ms", close: .normalClosure)
                state.withLock { $0.pipeline }?.stop()
                inbox.finish()
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
            guard !s.closed else { return nil }
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
            guard !s.closed, s.outbox.hasAnswered else { return false }
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
                state.withLock { $0.outbox.isEmpty || $0.closed }
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

    /// The protocol's error, then the connection closes.
    private func fail(code: Int, websocketCode: String, message: String, close: WebSocketErrorCode) {
        let failure = state.withLock { $0.wire.failure(code: code, name: websocketCode, message: message, close: close) }
        send(text: failure.text)
        self.close(failure.close)
    }

    private func send(text: String) {
        let queued = state.withLock { s -> Bool in
            guard !s.closed else { return false }
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
            guard let m = state.withLock({ s -> SessionOutbox.Message? in s.closed ? nil : s.outbox.next() }) else { break }
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

    /// Closes the connection: the answer audio still waiting is dropped (counted), the text messages
    /// still waiting are written, then `audio_stats` (routes with an answer), then the close frame.
    private func close(_ code: WebSocketErrorCode) {
        let already = state.withLock { s -> Bool in defer { s.closed = true }; return s.closed }
        guard !already else { return }
        progress.notify()
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
