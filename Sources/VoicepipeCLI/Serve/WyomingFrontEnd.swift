import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore
import Synchronization

/// The `wyoming` route: Home Assistant's voice protocol over TCP, speech-to-text side. `describe` is
/// answered with `info` (one ASR program, the route's graph); each `audio-start` … `audio-chunk` …
/// `audio-stop` is a session on a fresh instance of the graph (`transcribe` before it may name a language,
/// recorded only), answered with one `transcript` holding the final texts. Audio in another rate or
/// channel count than the template's `app-source` is converted; only 16-bit samples are taken. A session
/// refused (server full or draining) or failing is an `error` event with a code, and the connection stays
/// usable. A graph with a `wake` node also answers each wake word as it is heard with `detection`
/// (`name`, `timestamp` in ms of the session's audio) and lists its words under `wake` in `info`.
enum WyomingFrontEnd {
    static func bind(server: ServeServer, route: ServeConfiguration.Route, group: any EventLoopGroup) async throws -> any Channel {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WyomingConnectionHandler(connection: WyomingServeConnection(server: server, route: route, channel: channel)))
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
final class WyomingServeConnection: Sendable {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let channel: any Channel
    private let inbox: AsyncStream<WyomingEvent>.Continuation

    init(server: ServeServer, route: ServeConfiguration.Route, channel: any Channel) {
        self.server = server
        self.route = route
        self.channel = channel
        let (stream, continuation) = AsyncStream.makeStream(of: WyomingEvent.self)
        inbox = continuation
        Task { await self.run(stream) }
    }

    func received(_ event: WyomingEvent) { inbox.yield(event) }
    func closed() { inbox.finish() }

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
        private let texts = Mutex<[String]>([])
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
                    if e.name == "wake", let word = e["word"]?.stringValue {
                        detected(WyomingEvent(type: "detection", data: ["name": word, "timestamp": e["media_ms"]?.intValue ?? 0]))
                    }
                    guard e.name == "transcript" else { continue }
                    if case .bool(true)? = e["final"], let text = e["text"]?.stringValue, !text.isEmpty { finals.append(text) }
                }
            }
            run = Task { do { try await pipeline.run(); return nil } catch { return error } }
        }
    }

    private func run(_ events: AsyncStream<WyomingEvent>) async {
        var session: Session?
        var token: WyomingToken?
        for await event in events {
            switch event.type {
            case "describe":
                send(WyomingFrontEnd.info(route))
            case "transcribe":
                break
            case "audio-start":
                if let s = session { s.pipeline.stop(); _ = await s.run.value; await s.bus.finished(outcome: "abandoned", audioBytes: s.bytes, drops: 0); end(token) }
                session = nil
                token = nil
                let spec = event.decode(AudioSpec.self)
                let format = AudioFormat(sampleRate: spec?.rate ?? route.format.sampleRate, channels: spec?.channels ?? route.format.channels)
                guard (spec?.width ?? 2) == 2, (1...8).contains(format.channels), (1000...384_000).contains(format.sampleRate) else {
                    server.metrics.error(route: route.name, code: "unsupported_format")
                    send(WyomingEvent(type: "error", data: ["text": "only 16-bit audio is taken (width 2)", "code": "unsupported_format"]))
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
                var samples = [Int16](repeating: 0, count: event.payload.count / 2)
                for i in 0..<samples.count { samples[i] = Int16(bitPattern: UInt16(event.payload[2 * i]) | UInt16(event.payload[2 * i + 1]) << 8) }
                samples.removeLast(samples.count % s.inputFormat.channels)
                let converted = s.converter.map { $0.convert(samples) } ?? samples
                if !converted.isEmpty { await s.source.push(converted) }
            case "audio-stop":
                guard let s = session else { continue }
                s.source.finish()
                let failure = await s.run.value
                _ = await s.collect.value
                let seconds = ServeSession.seconds(ContinuousClock.now - s.started)
                if let failure {
                    server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: seconds, drops: 0, mediaAgeP99Ms: nil)
                    await s.bus.finished(outcome: "error", audioBytes: s.bytes, drops: 0)
                    send(WyomingEvent(type: "error", data: ["text": "\(failure)", "code": "graph_failed"]))
                } else {
                    let drops = s.pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
                    server.metrics.sessionEnded(route: route.name, outcome: "completed", seconds: seconds, drops: drops,
                                                mediaAgeP99Ms: s.pipeline.sinkAges.map(\.age.p99Ms).max())
                    server.metrics.firstResult(route: route.name, seconds: seconds)
                    await s.bus.finished(outcome: "completed", audioBytes: s.bytes, drops: drops)
                    send(WyomingEvent(type: "transcript", data: ["text": s.finals.joined]))
                }
                end(token)
                session = nil
                token = nil
            default:
                break
            }
        }
        // The client left: stop whatever was running.
        if let s = session {
            s.pipeline.stop()
            _ = await s.run.value
            server.metrics.sessionEnded(route: route.name, outcome: "disconnected", seconds: ServeSession.seconds(ContinuousClock.now - s.started), drops: 0, mediaAgeP99Ms: nil)
            await s.bus.finished(outcome: "disconnected", audioBytes: s.bytes, drops: 0)
        }
        end(token)
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
