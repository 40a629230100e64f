import Foundation
import Logging
import NIOCore
import NIOWebSocket
import Nodes
import PipelineCore

/// The `twilio` route: Twilio Media Streams on a WebSocket path (Telnyx's media streaming has the same
/// shape), one call per connection, each a session of the route's graph.
///
/// From the carrier, JSON text messages: `connected`, `start` (`streamSid`, `callSid`, `mediaFormat` —
/// only `audio/x-mulaw` at 8000 Hz mono is taken — and `customParameters`), `media` (`media.payload`,
/// base64 µ-law 8 kHz; converted to the `app-source`'s rate), `dtmf` (`dtmf.digit`, a `dtmf` event on the
/// `app-source`'s `events`), `mark` (the echo of one voicepipe sent: that answer has played; any other
/// name is echoed back once the answer audio queued before it has been played out) and `stop`.
/// To the carrier: the answer (the template's `app-sink` fed audio) as `media` messages of 20 ms µ-law,
/// paced at real time; a `mark` (`answer-N`) after each spoken answer, which the carrier echoes when it
/// has played it; and `clear` when the graph interrupts its answer (barge-in), so the carrier drops what
/// it still holds. A message that is not JSON, a binary message, `media` before `start`, or a `start`
/// with another format closes the connection with a WebSocket close code and reason, counted.
/// What the carrier sends waits in the call's ``SessionInbox`` (``inboxBytes``, about two seconds of media
/// messages, at most): a carrier that sends faster than the graph takes finds the connection no longer
/// reading, and nothing is dropped.
final class TwilioCall: TelephoneCall {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let channel: any Channel
    /// The carrier's messages and the call's own signals, in order; bounded by back-pressure.
    private let inbox: SessionInbox<Input>
    /// How many bytes of messages may wait for the graph: ``ServeSession/inboxSeconds`` of Twilio's 20 ms
    /// media messages (160 bytes of µ-law, some 400 bytes of JSON each).
    static let inboxBytes = ServeSession.inboxSeconds * 50 * 400
    private let opened = ContinuousClock.now
    private let running = LockedValue<LiveSession?>(nil)
    var live: LiveSession? { running.withLock { $0 } }

    enum Input: Sendable {
        case text(String)
        case binary
        case tooLarge
        case closed
        case idle
        case maxDuration
        case drain
        case graphEnded

        /// What it weighs in the inbox.
        var bytes: Int {
            if case .text(let t) = self { t.utf8.count } else { 0 }
        }
    }

    private struct Outbound {
        var streamSid = ""
        /// Answer audio at 8 kHz not yet sent, and the marks to send once the audio before them is sent.
        var queue: [Int16] = []
        var marks: [(at: Int, name: String)] = []
        /// Answer audio sent since the carrier last echoed every mark (it may still be playing).
        var unplayed = false
        var pendingMarks: Set<String> = []
        var lastInput = ContinuousClock.now
        var closed = false
        var counter = 0
    }
    private let outbound = LockedValue(Outbound())
    /// Told when the queued answer shrinks or the call's connection closes (the end of a call waits on it).
    private let sent = ChangeSignal()

    init(server: ServeServer, route: ServeConfiguration.Route, channel: any Channel) {
        self.server = server
        self.route = route
        self.channel = channel
        inbox = SessionInbox(limitBytes: Self.inboxBytes, limitMessages: ServeSession.inboxMessages, channel: channel)
        server.addCall(self)
        Task { await self.run() }
    }

    func endForShutdown() { inbox.push(.drain, bytes: 0) }

    func received(_ input: Input) {
        outbound.withLock { $0.lastInput = .now }
        inbox.push(input, bytes: input.bytes)
        if case .closed = input {
            sent.notify()
            inbox.finish()
            // The carrier is gone: the graph stops at once, even if a push into it is waiting for room.
            live?.pipeline.stop()
        }
    }

    private var logger: Logger { server.logger }

    private func send(_ object: [String: Any]) {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return }
        let text = String(decoding: data, as: UTF8.self)
        let channel = self.channel
        channel.eventLoop.execute {
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .text, data: channel.allocator.buffer(string: text)), promise: nil)
        }
    }

    /// Closes with `code` and `reason` (counted under `metric` when given).
    private func close(_ code: WebSocketErrorCode, _ reason: String, metric: String? = nil) {
        if let metric { server.metrics.error(route: route.name, code: metric) }
        let already = outbound.withLock { o -> Bool in defer { o.closed = true }; return o.closed }
        guard !already else { return }
        sent.notify()
        if code != .normalClosure { logger.info("route '\(route.name)': twilio stream closed: \(reason)") }
        let channel = self.channel
        channel.eventLoop.execute {
            var buffer = channel.allocator.buffer(capacity: 2 + reason.utf8.count)
            buffer.write(webSocketErrorCode: code)
            buffer.writeString(String(reason.prefix(120)))
            channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .connectionClose, data: buffer)).whenComplete { _ in
                channel.eventLoop.scheduleTask(in: .milliseconds(200)) { channel.close(promise: nil) }
            }
            channel.eventLoop.scheduleTask(in: .seconds(5)) { channel.close(promise: nil) }
        }
    }

    private static func parse(_ text: String) -> [String: Any]? {
        guard let data = text.data(using: .utf8) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    private func run() async {
        defer {
            server.metrics.input(route: route.name, inbox.takeStatistics())
            server.removeCall(self)
        }
        let watchdog = Task { [self] in await watch() }
        defer { watchdog.cancel() }
        // Up to `start`: the stream's identity and format.
        var start: [String: Any]?
        first: while let input = await inbox.next() {
            switch input {
            case .text(let text):
                guard let m = Self.parse(text), let event = m["event"] as? String else {
                    return close(.init(codeNumber: 1007), "not a JSON message with an event", metric: "bad_message")
                }
                switch event {
                case "connected": continue
                case "start": start = m; break first
                case "stop": return close(.normalClosure, "stopped before start")
                default: return close(.protocolError, "'\(event)' before 'start'", metric: "bad_message")
                }
            case .binary: return close(.unacceptableData, "binary messages are not Media Streams", metric: "bad_message")
            case .tooLarge: return close(.messageTooLarge, "message larger than \(route.maxFrameBytes) bytes", metric: "message_too_large")
            case .closed, .drain: return close(.normalClosure, "")
            case .idle: return close(.normalClosure, "nothing received for \(route.idleTimeoutMs) ms", metric: "idle")
            case .maxDuration, .graphEnded: continue
            }
        }
        guard let start else { return }
        let info = start["start"] as? [String: Any] ?? [:]
        let streamSid = (start["streamSid"] as? String) ?? (info["streamSid"] as? String) ?? ""
        let callSid = info["callSid"] as? String ?? ""
        let format = info["mediaFormat"] as? [String: Any] ?? [:]
        let encoding = format["encoding"] as? String ?? "audio/x-mulaw"
        let rate = (format["sampleRate"] as? NSNumber)?.intValue ?? 8000
        let channels = (format["channels"] as? NSNumber)?.intValue ?? 1
        guard encoding == "audio/x-mulaw", rate == 8000, channels == 1 else {
            return close(.policyViolation, "mediaFormat \(encoding) \(rate) Hz \(channels) channel(s) is not taken; audio/x-mulaw 8000 Hz mono is",
                         metric: "unsupported_format")
        }
        guard !streamSid.isEmpty else { return close(.protocolError, "start without a streamSid", metric: "bad_message") }
        outbound.withLock { $0.streamSid = streamSid }
        let token = WyomingToken()
        guard server.admitWyoming(token) else {
            let draining = server.isDraining
            server.metrics.refused(route: route.name, code: draining ? "draining" : "busy")
            return close(.init(codeNumber: 1013), draining ? "the server is shutting down" : "too many sessions (max_sessions \(server.configuration.maxSessions))")
        }
        defer { server.removeWyoming(token) }
        let bus = SessionEvents(server: server, route: route.name, session: callSid.isEmpty ? streamSid : callSid)
        server.metrics.sessionStarted(route: route.name)
        bus.started(protocol: "twilio", remote: channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" })
        let pipeline: Pipeline
        let source: AppSourceNode
        let converter: AudioConverter?
        do {
            pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
            guard let s = pipeline.appSource(route.sourceID) else { throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source") }
            source = s
            let telephone = AudioFormat(sampleRate: 8000, channels: 1)
            converter = telephone == route.format ? nil : try AudioConverter(from: telephone, to: route.format)
        } catch {
            server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: 0, drops: 0, mediaAgeP99Ms: nil)
            await bus.finished(outcome: "error", audioBytes: 0, drops: 0)
            return close(.unexpectedServerError, "cannot start the graph", metric: "graph_failed")
        }
        running.withLock { $0 = LiveSession(id: bus.session, route: route.name, started: opened, pipeline: pipeline) }
        defer { running.withLock { $0 = nil } }
        let events = pipeline.events(buffer: 10_000)
        let answerRoute = route.answer
        let forwarding = Task { [self] in
            for await e in events {
                bus.forward(e)
                if answerRoute?.interrupts(e) == true { interrupt() }
            }
        }
        let answering = route.answer.flatMap { pipeline.appSink($0.sinkID) }.map { sink in Task { [self] in await answer(sink) } }
        let pacing = route.answer == nil ? nil : Task { [self] in await pace() }
        let running = Task { [self] in
            defer { inbox.push(.graphEnded, bytes: 0) }
            do { try await pipeline.run(); return nil as (any Error)? } catch { return error }
        }
        var bytes = 0
        var outcome = "completed"
        var stopAtOnce = true
        loop: while let input = await inbox.next() {
            switch input {
            case .text(let text):
                guard let m = Self.parse(text), let event = m["event"] as? String else {
                    close(.init(codeNumber: 1007), "not a JSON message with an event", metric: "bad_message")
                    outcome = "error"
                    break loop
                }
                switch event {
                case "media":
                    let media = m["media"] as? [String: Any] ?? [:]
                    if let track = media["track"] as? String, track != "inbound" && track != "inbound_track" { continue }
                    guard let payload = media["payload"] as? String, let data = Data(base64Encoded: payload) else {
                        close(.init(codeNumber: 1007), "media without a base64 payload", metric: "bad_message")
                        outcome = "error"
                        break loop
                    }
                    bytes += data.count
                    server.metrics.audio(route: route.name, bytes: data.count)
                    let samples = data.map(MuLaw.decode)
                    let converted = converter.map { $0.convert(samples) } ?? samples
                    if !converted.isEmpty { await source.push(converted) }
                case "dtmf":
                    let dtmf = m["dtmf"] as? [String: Any] ?? [:]
                    guard let digit = dtmf["digit"] as? String, !digit.isEmpty else {
                        server.metrics.error(route: route.name, code: "bad_message")
                        logger.info("route '\(route.name)': twilio dtmf without a digit (ignored)")
                        continue
                    }
                    var fields: [(String, EventValue)] = [("digit", .string(digit))]
                    if let d = (dtmf["duration"] as? NSNumber)?.intValue { fields.append(("duration_ms", .int(Int64(d)))) }
                    await source.push(event: Event(.dtmf, fields: fields))
                case "mark":
                    guard let name = (m["mark"] as? [String: Any])?["name"] as? String, !name.isEmpty else {
                        server.metrics.error(route: route.name, code: "bad_message")
                        logger.info("route '\(route.name)': twilio mark without a name (ignored)")
                        continue
                    }
                    outbound.withLock { o in
                        if o.pendingMarks.remove(name) != nil {
                            // The echo of one voicepipe sent: the answer before it has played.
                            if o.pendingMarks.isEmpty && o.queue.isEmpty { o.unplayed = false }
                        } else {
                            // A mark of the client's own: echoed once the answer queued before it has been played out.
                            o.marks.append((o.queue.count, name))
                        }
                    }
                case "stop":
                    outcome = "completed"
                    break loop
                case "connected", "start":
                    close(.protocolError, "'\(event)' inside the stream", metric: "bad_message")
                    outcome = "error"
                    break loop
                default:
                    // Another event a newer carrier may send: counted, the call goes on.
                    server.metrics.error(route: route.name, code: "unknown_message")
                    logger.info("route '\(route.name)': twilio event '\(event)' is not understood (ignored)")
                }
            case .binary:
                close(.unacceptableData, "binary messages are not Media Streams", metric: "bad_message")
                outcome = "error"
                break loop
            case .tooLarge:
                close(.messageTooLarge, "message larger than \(route.maxFrameBytes) bytes", metric: "message_too_large")
                outcome = "error"
                break loop
            case .closed:
                outcome = "disconnected"
                break loop
            case .idle:
                close(.normalClosure, "nothing received for \(route.idleTimeoutMs) ms", metric: "idle")
                outcome = "idle"
                break loop
            case .maxDuration:
                server.metrics.error(route: route.name, code: "max_duration")
                outcome = "limit"
                stopAtOnce = false
                break loop
            case .drain:
                outcome = "shutdown"
                stopAtOnce = false
                break loop
            case .graphEnded:
                break loop
            }
        }
        source.finish()
        if stopAtOnce { pipeline.stop() }
        let failure = await running.value
        _ = await forwarding.value
        await answering?.value
        if !stopAtOnce {
            // The answer still queued is played out (bounded by the stall limit).
            _ = await sent.wait(until: .now + ServeSession.stallLimit) { [self] in
                outbound.withLock { $0.queue.isEmpty || $0.closed } || !channel.isActive
            }
        }
        pacing?.cancel()
        _ = await pacing?.value
        if failure != nil && outcome == "completed" { outcome = "error" }
        let drops = pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
        server.metrics.input(route: route.name, inbox.takeStatistics())
        server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: ServeSession.seconds(ContinuousClock.now - opened), drops: drops,
                                    mediaAgeP99Ms: pipeline.sinkAges.map(\.age.p99Ms).max())
        await bus.finished(outcome: outcome, audioBytes: bytes, drops: drops)
        if let failure {
            logger.warning("route '\(route.name)': twilio call \(bus.session): graph failed: \(failure)")
            close(.unexpectedServerError, "the graph failed", metric: "graph_failed")
        } else {
            close(.normalClosure, "")
        }
    }

    /// The graph interrupted its answer: what is queued is dropped, and the carrier told to drop what it holds.
    private func interrupt() {
        let (clear, sid) = outbound.withLock { o -> (Bool, String) in
            let had = o.unplayed || !o.queue.isEmpty
            o.queue.removeAll()
            o.marks.removeAll()
            o.unplayed = false
            return (had, o.streamSid)
        }
        sent.notify()
        if clear { send(["event": "clear", "streamSid": sid]) }
    }

    /// The answer's audio at 8 kHz, queued; a mark after each spoken answer's last frame.
    private func answer(_ sink: AppSinkNode) async {
        var converter: AudioConverter?
        let telephone = AudioFormat(sampleRate: 8000, channels: 1)
        for await frame in sink.frames {
            guard let audio = frame.audio else { continue }
            if converter?.input != audio.format { converter = try? AudioConverter(from: audio.format, to: telephone) }
            guard let converter else { continue }
            let samples = converter.convert(audio.samples)
            let limit = 8 * (route.answer?.bufferMs ?? 20_000)
            let dropped = outbound.withLock { o -> Int in
                o.queue += samples
                if frame.marks.speechEnd {
                    o.counter += 1
                    o.marks.append((o.queue.count, "answer-\(o.counter)"))
                }
                let over = max(0, o.queue.count - limit)
                if over > 0 {
                    o.queue.removeFirst(over)
                    o.marks = o.marks.map { ($0.at - over, $0.name) }.filter { $0.at >= 0 }
                }
                return over
            }
            if dropped > 0 { server.metrics.answerDropped(route: route.name, messages: 1, seconds: Double(dropped) / 8000) }
        }
    }

    /// Sends the queued answer in 20 ms `media` messages, one every 20 ms, and each mark once the audio before it is sent.
    private func pace() async {
        let clock = ContinuousClock()
        var next = clock.now
        while !Task.isCancelled {
            next += .milliseconds(20)
            try? await Task.sleep(until: next, clock: clock)
            if clock.now - next > .milliseconds(200) { next = clock.now }
            let (chunk, marks, sid, closed) = outbound.withLock { o -> ([Int16], [String], String, Bool) in
                let n = min(o.queue.count, 160)
                let c = Array(o.queue.prefix(n))
                o.queue.removeFirst(n)
                var due: [String] = []
                o.marks = o.marks.compactMap { m in
                    let at = m.at - n
                    if at <= 0 { due.append(m.name); return nil }
                    return (at, m.name)
                }
                if !c.isEmpty { o.unplayed = true }
                o.pendingMarks.formUnion(due)
                return (c, due, o.streamSid, o.closed)
            }
            if !chunk.isEmpty { sent.notify() }
            if closed || !channel.isActive { return }
            if !chunk.isEmpty {
                if !channel.isWritable {
                    server.metrics.answerDropped(route: route.name, messages: 1, seconds: Double(chunk.count) / 8000)
                } else {
                    let payload = Data(chunk.map(MuLaw.encode)).base64EncodedString()
                    send(["event": "media", "streamSid": sid, "media": ["payload": payload]])
                    server.metrics.answerSent(route: route.name, seconds: Double(chunk.count) / 8000)
                }
            }
            for name in marks { send(["event": "mark", "streamSid": sid, "mark": ["name": name]]) }
        }
    }

    /// Pushes `.idle` after `idle_timeout_ms` without any message, `.maxDuration` at `max_duration_s` (``CallLimits``).
    private func watch() async {
        await CallLimits.watch(route: route, outbound: outbound, lastInput: \.lastInput, inbox: inbox, idle: .idle, maxDuration: .maxDuration)
    }
}

/// Passes one Twilio connection's WebSocket messages to its call.
final class TwilioStreamHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let call: TwilioCall
    private var fragments: ByteBuffer?
    private var fragmentText = true

    init(call: TwilioCall) { self.call = call }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .text, .binary:
            if frame.unmaskedData.readableBytes > call.route.maxFrameBytes { call.received(.tooLarge); return }
            if frame.fin {
                var d = frame.unmaskedData
                call.received(frame.opcode == .text ? .text(d.readString(length: d.readableBytes) ?? "") : .binary)
            } else {
                fragments = frame.unmaskedData
                fragmentText = frame.opcode == .text
            }
        case .continuation:
            var d = frame.unmaskedData
            fragments?.writeBuffer(&d)
            if let f = fragments, f.readableBytes > call.route.maxFrameBytes { fragments = nil; call.received(.tooLarge); return }
            if frame.fin, var whole = fragments {
                fragments = nil
                call.received(fragmentText ? .text(whole.readString(length: whole.readableBytes) ?? "") : .binary)
            }
        case .connectionClose:
            call.received(.closed)
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        default:
            break
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        call.received(.closed)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}
