import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore
import Wyoming

/// The `wyoming` route: Home Assistant's voice protocol over TCP, speech-to-text side. `describe` is
/// answered with `info` (one ASR program, the route's graph); each `audio-start` … `audio-chunk` …
/// `audio-stop` is a session on a fresh instance of the graph (`transcribe` before it may name a language,
/// recorded only), answered with one `transcript` holding the final texts. Audio in another rate or
/// channel count than the template's `app-source` is converted; only 16-bit samples are taken. A session
/// refused (server full or draining) or failing is an `error` event with a code, and the connection stays
/// usable. A graph with an `app-source` `text` and an `app-sink` `speaker` is a speech synthesis service
/// instead (``WyomingSpeech``). A graph with a `wake` node also answers each wake word as it is heard with `detection`
/// (`name`, `timestamp` in ms of the session's audio) and lists its words under `wake` in `info`.
enum WyomingFrontEnd {
    static func bind(server: ServeServer, route: ServeConfiguration.Route, group: any EventLoopGroup) async throws -> any Channel {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(ServeServer.acceptBackoff()) }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WyomingConnectionHandler(connection: WyomingServeConnection(server: server, route: route, channel: channel)))
                }
            }
        if route.speakerID != nil, let tts = WyomingSpeech.tts(route) {
            // The voice is loaded while the server starts, not by the first request.
            Task {
                do { try await tts.preload() } catch { server.logger.warning("route \(route.name): \(error)") }
            }
        }
        return try await bootstrap.bind(host: server.configuration.listen.host, port: route.port ?? 10300).get()
    }

    static func info(_ route: ServeConfiguration.Route) -> WyomingEvent {
        let attribution: [String: any Sendable] = ["name": "voicepipe", "url": "https://github.com/voicepipe/voicepipe"]
        let model: [String: any Sendable] = ["name": route.name, "attribution": attribution, "installed": true,
                                             "description": "voicepipe graph \(route.graph.name)", "version": nil as String?,
                                             "languages": ["en"]]
        let program: [String: any Sendable] = ["name": "voicepipe", "attribution": attribution, "installed": true,
                                               "description": "voicepipe serve, route \(route.name)", "version": "1",
                                               "models": [model], "supports_transcript_streaming": false]
        // A graph with `wake` nodes is also a wake word service: its words are the models.
        let words = route.graph.nodes.compactMap { $0.configuration as? WakeNode.Configuration }.flatMap(\.words)
        let wakeModels: [[String: any Sendable]] = words.map { ["name": $0, "attribution": attribution, "installed": true, "description": "openWakeWord \($0)",
                                                                "version": nil as String?, "languages": ["en"], "phrase": $0.replacingOccurrences(of: "_", with: " ")] }
        let wake: [[String: any Sendable]] = words.isEmpty ? [] : [["name": "voicepipe-wake", "attribution": attribution, "installed": true,
                                                                    "description": "voicepipe serve, route \(route.name)", "version": "1", "models": wakeModels]]
        return WyomingEvent(type: "info", data: ["asr": [program], "tts": [String](), "handle": [String](), "intent": [String](), "wake": wake])
    }
}

/// One TCP connection: decodes events and hands them to the connection's sessions in order.
private final class WyomingConnectionHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let connection: WyomingServeConnection
    private var decoder = WyomingDecoder()

    init(connection: WyomingServeConnection) { self.connection = connection }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var buffer = unwrapInboundIn(data)
        let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
        do {
            for event in try decoder.push(bytes) { connection.received(event) }
        } catch {
            connection.protocolError("\(error)")
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        connection.closed()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// The sessions of one Wyoming connection, run one after the other.
///
/// A transcription that receives nothing for the route's `idle_timeout_ms` after `audio-start` is
/// ended with an `idle` error and the connection closed; one still open when a drain's grace period
/// ends is finished as if `audio-stop` had come, so its client gets its transcript. What the client sends
/// waits in the connection's ``SessionInbox`` (about ``ServeSession/inboxSeconds`` of audio at the graph's
/// rate, at most): a client that sends faster than the graph takes finds the connection no longer
/// reading, and nothing is dropped.
final class WyomingServeConnection: Sendable {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let channel: any Channel
    /// The client's events and the connection's own signals, in order; bounded by back-pressure.
    private let inbox: SessionInbox<Input>
    /// When the connection last received an event, and whether a transcription is open.
    private let activity = LockedValue<(last: ContinuousClock.Instant, open: Bool)>((.now, false))
    /// Told when a transcription opens (the idle watch waits for one).
    private let transcriptionOpened = ChangeSignal()

    /// What the connection's task acts on, in order.
    private enum Input: Sendable {
        case event(WyomingEvent)
        /// The open transcription received nothing for `idle_timeout_ms`.
        case idle
        /// The server's drain is over: finish the open transcription and close.
        case drain
    }

    init(server: ServeServer, route: ServeConfiguration.Route, channel: any Channel) {
        self.server = server
        self.route = route
        self.channel = channel
        inbox = SessionInbox(limitBytes: ServeSession.inboxBytes(route.format), limitMessages: ServeSession.inboxMessages, channel: channel)
        server.addWyomingConnection(self)
        Task { await self.run() }
    }

    func received(_ event: WyomingEvent) {
        activity.withLock { $0.last = .now }
        inbox.push(.event(event), bytes: event.data.count + event.payload.count)
    }
    func closed() { inbox.finish() }

    /// The drain's grace period is over: an open transcription ends with its transcript, then the connection closes.
    func endForShutdown() { inbox.push(.drain, bytes: 0) }

    /// Pushes `.idle` when an open transcription has received nothing for the route's idle timeout: waits
    /// for a transcription to open, then sleeps until its idle deadline (which moves with each event).
    private func watchIdle() async {
        let limit = Duration.milliseconds(route.idleTimeoutMs)
        while !Task.isCancelled {
            let (last, open) = activity.withLock { ($0.last, $0.open) }
            guard open else {
                _ = await transcriptionOpened.wait(until: .now + .seconds(3600)) { [self] in activity.withLock { $0.open } }
                continue
            }
            if ContinuousClock.now - last >= limit {
                if !inbox.reading {
                    // Reading is held back (the graph is behind the client): the client is not idle.
                    activity.withLock { a in if a.last == last { a.last = .now } }
                    continue
                }
                let idle = activity.withLock { a -> Bool in
                    guard a.open && a.last == last else { return false }
                    a.open = false
                    return true
                }
                if idle { inbox.push(.idle, bytes: 0) }
                continue
            }
            try? await Task.sleep(until: last + limit, clock: .continuous)
        }
    }

    func protocolError(_ message: String) {
        server.metrics.error(route: route.name, code: "bad_message")
        send(WyomingEvent(type: "error", data: ["text": message, "code": "bad_message"]))
        inbox.finish()
    }

    private func send(_ event: WyomingEvent) {
        let bytes = event.encoded()
        var buffer = channel.allocator.buffer(capacity: bytes.count)
        buffer.writeBytes(bytes)
        channel.writeAndFlush(buffer, promise: nil)
    }

    /// Final texts collected from a session's events.
    private final class Finals: Sendable {
        private let texts = LockedValue<[String]>([])
        func append(_ t: String) { texts.withLock { $0.append(t) } }
        var joined: String { texts.withLock { $0.joined(separator: " ") } }
    }

    /// One transcription; used by the connection's task only.
    private final class Session {
        let pipeline: Pipeline
        let source: AppSourceNode
        let inputFormat: AudioFormat
        let converter: AudioConverter?
        let finals = Finals()
        let started = ContinuousClock.now
        let run: Task<(any Error)?, Never>
        let collect: Task<Void, Never>
        let bus: SessionEvents
        var bytes = 0
        /// The bytes of an incomplete sample frame at the end of the last chunk, completed by the next.
        var carry: [UInt8] = []

        init(pipeline: Pipeline, source: AppSourceNode, inputFormat: AudioFormat, converter: AudioConverter?, bus: SessionEvents,
             detected: @escaping @Sendable (WyomingEvent) -> Void = { _ in }) {
            self.pipeline = pipeline
            self.source = source
            self.inputFormat = inputFormat
            self.converter = converter
            self.bus = bus
            let events = pipeline.events(buffer: 10_000)
            let finals = self.finals
            collect = Task {
                for await e in events {
                    bus.forward(e)
                    if e.name == .wake, let word = e["word"]?.stringValue {
                        detected(WyomingEvent(type: "detection", data: ["name": word, "timestamp": e["media_ms"]?.intValue ?? 0]))
                    }
                    guard e.name == .transcript else { continue }
                    if case .bool(true)? = e["final"], let text = e["text"]?.stringValue, !text.isEmpty { finals.append(text) }
                }
            }
            run = Task { do { try await pipeline.run(); return nil } catch { return error } }
        }
    }

    /// The connection's back-pressure in the metrics (at the end of each transcription, and of the connection).
    private func recordInput() {
        server.metrics.input(route: route.name, inbox.takeStatistics())
    }

    private func run() async {
        var session: Session?
        var token: WyomingToken?
        // A speech synthesis route (text in, audio out) has sessions of its own.
        let speech = route.speakerID == nil ? nil
            : WyomingSpeech(server: server, route: route, remote: channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" },
                            send: { [self] in self.send($0) })
        let watchdog = Task { await watchIdle() }
        defer {
            watchdog.cancel()
            recordInput()
            server.removeWyomingConnection(self)
        }
        loop: while let input = await inbox.next() {
            let event: WyomingEvent
            switch input {
            case .event(let e): event = e
            case .idle:
                guard let s = session else { continue }
                s.pipeline.stop()
                _ = await s.run.value
                recordInput()
                server.metrics.sessionEnded(route: route.name, outcome: "idle", seconds: ServeSession.seconds(ContinuousClock.now - s.started), drops: 0, mediaAgeP99Ms: nil)
                server.metrics.error(route: route.name, code: "idle")
                await s.bus.finished(outcome: "idle", audioBytes: s.bytes, drops: 0)
                send(WyomingEvent(type: "error", data: ["text": "nothing received for \(route.idleTimeoutMs) ms after audio-start", "code": "idle"]))
                end(token)
                session = nil
                token = nil
                channel.close(promise: nil)
                break loop
            case .drain:
                await speech?.finish(outcome: "shutdown")
                if let s = session {
                    await stop(s, outcome: "shutdown")
                    end(token)
                    session = nil
                    token = nil
                }
                channel.close(promise: nil)
                break loop
            }
            if let speech {
                await speech.handle(event)
                continue
            }
            switch event.type {
            case "describe":
                send(WyomingFrontEnd.info(route))
            case "transcribe":
                break
            case "audio-start":
                if let s = session {
                    // A new transcription before the last one's audio-stop: the last one is abandoned.
                    s.pipeline.stop()
                    _ = await s.run.value
                    recordInput()
                    server.metrics.sessionEnded(route: route.name, outcome: "abandoned", seconds: ServeSession.seconds(ContinuousClock.now - s.started), drops: 0, mediaAgeP99Ms: nil)
                    await s.bus.finished(outcome: "abandoned", audioBytes: s.bytes, drops: 0)
                    end(token)
                }
                session = nil
                token = nil
                activity.withLock { $0.open = false }
                let spec = event.decode(AudioSpec.self)
                let format = AudioFormat(sampleRate: spec?.rate ?? route.format.sampleRate, channels: spec?.channels ?? route.format.channels)
                if let problem = Self.formatProblem(width: spec?.width ?? 2, format: format) {
                    server.metrics.error(route: route.name, code: "unsupported_format")
                    send(WyomingEvent(type: "error", data: ["text": problem, "code": "unsupported_format"]))
                    continue
                }
                let t = WyomingToken()
                guard server.admitWyoming(t) else {
                    let code = server.isDraining ? "draining" : "busy"
                    server.metrics.refused(route: route.name, code: code)
                    send(WyomingEvent(type: "error", data: ["text": code == "busy" ? "too many sessions" : "the server is shutting down", "code": code]))
                    continue
                }
                do {
                    let pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
                    guard let source = pipeline.appSource(route.sourceID) else { throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source") }
                    let converter = format == route.format ? nil : try AudioConverter(from: format, to: route.format)
                    let bus = SessionEvents(server: server, route: route.name, session: NATSEventPublisher.newSessionID())
                    session = Session(pipeline: pipeline, source: source, inputFormat: format, converter: converter, bus: bus,
                                      detected: { [self] in self.send($0) })
                    token = t
                    activity.withLock { $0 = (.now, true) }
                    transcriptionOpened.notify()
                    server.metrics.sessionStarted(route: route.name)
                    bus.started(protocol: "wyoming", remote: channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" })
                } catch {
                    server.removeWyoming(t)
                    server.metrics.error(route: route.name, code: "graph_failed")
                    send(WyomingEvent(type: "error", data: ["text": "cannot start the graph: \(error)", "code": "graph_failed"]))
                }
            case "audio-chunk":
                guard let s = session else { continue }
                server.metrics.audio(route: route.name, bytes: event.payload.count)
                s.bytes += event.payload.count
                // Chunks need not end on a sample frame: what is left over starts the next one.
                let bytes = s.carry.isEmpty ? event.payload : s.carry + event.payload
                let frameBytes = 2 * s.inputFormat.channels
                let whole = bytes.count - bytes.count % frameBytes
                s.carry = Array(bytes[whole...])
                var samples = [Int16](repeating: 0, count: whole / 2)
                for i in 0..<samples.count { samples[i] = Int16(bitPattern: UInt16(bytes[2 * i]) | UInt16(bytes[2 * i + 1]) << 8) }
                let converted = s.converter.map { $0.convert(samples) } ?? samples
                if !converted.isEmpty { await s.source.push(converted) }
            case "audio-stop":
                guard let s = session else { continue }
                await stop(s, outcome: "completed")
                end(token)
                session = nil
                token = nil
            default:
                break
            }
        }
        // The client left: stop whatever was running.
        await speech?.finish(outcome: "disconnected")
        activity.withLock { $0.open = false }
        if let s = session {
            s.pipeline.stop()
            _ = await s.run.value
            recordInput()
            server.metrics.sessionEnded(route: route.name, outcome: "disconnected", seconds: ServeSession.seconds(ContinuousClock.now - s.started), drops: 0, mediaAgeP99Ms: nil)
            await s.bus.finished(outcome: "disconnected", audioBytes: s.bytes, drops: 0)
        }
        end(token)
    }

    /// Ends the audio of `s` and answers with its transcript (or the graph's failure).
    private func stop(_ s: Session, outcome: String) async {
        activity.withLock { $0.open = false }
        s.source.finish()
        let failure = await s.run.value
        _ = await s.collect.value
        let seconds = ServeSession.seconds(ContinuousClock.now - s.started)
        recordInput()
        if let failure {
            server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: seconds, drops: 0, mediaAgeP99Ms: nil)
            await s.bus.finished(outcome: "error", audioBytes: s.bytes, drops: 0)
            send(WyomingEvent(type: "error", data: ["text": "\(failure)", "code": "graph_failed"]))
        } else {
            let drops = s.pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
            server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: seconds, drops: drops,
                                        mediaAgeP99Ms: s.pipeline.sinkAges.map(\.age.p99Ms).max())
            server.metrics.firstResult(route: route.name, seconds: seconds)
            await s.bus.finished(outcome: outcome, audioBytes: s.bytes, drops: drops)
            send(WyomingEvent(type: "transcript", data: ["text": s.finals.joined]))
        }
    }

    /// Why an `audio-start` format is not taken, naming the field at fault; nil when it is.
    static func formatProblem(width: Int, format: AudioFormat) -> String? {
        if format.sampleRate <= 0 { return "audio-start: rate \(format.sampleRate) is not a sample rate; expected 1000...384000 Hz" }
        if !(1000...384_000).contains(format.sampleRate) { return "audio-start: rate \(format.sampleRate) Hz is outside 1000...384000 Hz" }
        if !(1...8).contains(format.channels) { return "audio-start: channels \(format.channels) is outside 1...8" }
        if width != 2 { return "audio-start: width \(width) is not taken; only 16-bit audio (width 2) is" }
        return nil
    }

    private func end(_ token: WyomingToken?) {
        if let token { server.removeWyoming(token) }
    }

    private struct AudioSpec: Decodable {
        var rate: Int?
        var width: Int?
        var channels: Int?
    }
}

/// Counts a Wyoming session against max_sessions.
final class WyomingToken: Sendable {}
