import Foundation
import Logging
import Nodes
import PipelineCore
import Wyoming

/// The speech synthesis side of a `wyoming` route (a graph with an `app-source` `text` and an
/// `app-sink` `speaker`): `describe` is answered with `info` holding one `tts` program and the graph's
/// voice; `synthesize` is a session on a fresh instance of the graph, answered with `audio-start`, an
/// `audio-chunk` per frame of the speaker's audio as soon as the graph makes it, and `audio-stop`.
///
/// Streaming (`synthesize-start`, `synthesize-chunk`…, `synthesize-stop`): one session for the whole
/// stream; the text is handed to the graph sentence by sentence as soon as a sentence is complete (a
/// chunk may end mid-word), so the first audio leaves while the client is still sending; the rest goes
/// at `synthesize-stop`, which is answered, after `audio-stop`, by `synthesize-stopped`. The
/// `synthesize` event a client sends during a stream for servers that do not stream is ignored.
///
/// The voice is the graph's: a `voice` named in a request is not looked up. A session refused (server
/// full or draining) or failing is an `error` event with a code; the connection stays usable.
final class WyomingSpeech {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let remote: String?
    let send: @Sendable (WyomingEvent) -> Void
    /// The open stream, and its text not yet handed to the graph (an unfinished sentence).
    private var stream: Session?
    private var pending = ""

    init(server: ServeServer, route: ServeConfiguration.Route, remote: String?, send: @escaping @Sendable (WyomingEvent) -> Void) {
        self.server = server
        self.route = route
        self.remote = remote
        self.send = send
    }

    /// The graph's `tts` node, if it has one.
    static func tts(_ route: ServeConfiguration.Route) -> TTSNode.Configuration? {
        route.graph.nodes.compactMap { $0.configuration as? TTSNode.Configuration }.first
    }

    /// `info` for a speech route: one `tts` program, the graph's voice.
    static func info(_ route: ServeConfiguration.Route) -> WyomingEvent {
        let attribution: [String: any Sendable] = ["name": "voicepipe", "url": "https://github.com/voicepipe/voicepipe"]
        let voice = tts(route)?.voiceDescription()
        var voiceInfo: [String: any Sendable] = ["name": voice?.name ?? route.name, "attribution": attribution, "installed": true,
                                                 "description": voice?.description ?? "voicepipe graph \(route.graph.name)",
                                                 "version": nil as String?, "languages": voice?.languages ?? ["en"]]
        if let speakers = voice?.speakers, !speakers.isEmpty {
            voiceInfo["speakers"] = speakers.map { ["name": $0] as [String: any Sendable] }
        }
        let program: [String: any Sendable] = ["name": "voicepipe", "attribution": attribution, "installed": true,
                                               "description": "voicepipe serve, route \(route.name)", "version": "1",
                                               "voices": [voiceInfo], "supports_synthesize_streaming": true]
        return WyomingEvent(type: "info", data: ["asr": [String](), "tts": [program], "handle": [String](), "intent": [String](), "wake": [String]()])
    }

    private struct TextData: Decodable { var text: String? }

    /// Acts on one event of the connection, in order.
    func handle(_ event: WyomingEvent) async {
        switch event.type {
        case "describe":
            send(Self.info(route))
        case "synthesize":
            // Sent during a stream only for servers that do not stream: the stream speaks it.
            if stream != nil { return }
            guard let text = event.decode(TextData.self)?.text else {
                server.metrics.error(route: route.name, code: "bad_message")
                send(WyomingEvent(type: "error", data: ["text": "synthesize without a text", "code": "bad_message"]))
                return
            }
            guard let session = open() else { return }
            await session.push(text)
            await close(session, outcome: "completed")
        case "synthesize-start":
            if let s = stream { await close(s, outcome: "abandoned") }
            pending = ""
            stream = open()
        case "synthesize-chunk":
            guard let s = stream else { return }
            pending += event.decode(TextData.self)?.text ?? ""
            // Every sentence but the last is complete: the last may go on in the next chunk.
            let sentences = SentenceSplitter.sentences(in: pending)
            guard sentences.count > 1 else { return }
            for sentence in sentences.dropLast() { await s.push(sentence) }
            if let last = sentences.last, let range = pending.range(of: last, options: .backwards) {
                pending = String(pending[range.lowerBound...])
            } else {
                pending = sentences.last ?? ""
            }
        case "synthesize-stop":
            guard let s = stream else {
                send(WyomingEvent(type: "synthesize-stopped"))
                return
            }
            stream = nil
            if pending.contains(where: { !$0.isWhitespace }) { await s.push(pending) }
            pending = ""
            await close(s, outcome: "completed")
            send(WyomingEvent(type: "synthesize-stopped"))
        default:
            break
        }
    }

    /// The connection ends (the client left, or the server drains): an open stream is spoken to its end.
    func finish(outcome: String) async {
        guard let s = stream else { return }
        stream = nil
        if pending.contains(where: { !$0.isWhitespace }) { await s.push(pending) }
        pending = ""
        await close(s, outcome: outcome)
    }

    /// One synthesis: an instance of the graph, its speaker's audio pumped to the client as it comes.
    private final class Session {
        let pipeline: Pipeline
        let source: AppSourceNode
        let token: WyomingToken
        let bus: SessionEvents
        let started = ContinuousClock.now
        let run: Task<(any Error)?, Never>
        let pump: Task<Int, Never>
        let collect: Task<Void, Never>

        init(pipeline: Pipeline, source: AppSourceNode, sink: AppSinkNode, rate: Int, token: WyomingToken, bus: SessionEvents,
             send: @escaping @Sendable (WyomingEvent) -> Void) {
            self.pipeline = pipeline
            self.source = source
            self.token = token
            self.bus = bus
            let events = pipeline.events(buffer: 10_000)
            collect = Task { for await e in events { bus.forward(e) } }
            send(WyomingEvent(type: "audio-start", data: ["rate": rate, "width": 2, "channels": 1, "timestamp": 0]))
            pump = Task {
                var samples = 0
                for await frame in sink.frames {
                    guard let audio = frame.audio, !audio.samples.isEmpty else { continue }
                    var bytes = [UInt8](repeating: 0, count: audio.samples.count * 2)
                    for (i, s) in audio.samples.enumerated() {
                        let u = UInt16(bitPattern: s)
                        bytes[2 * i] = UInt8(u & 0xFF)
                        bytes[2 * i + 1] = UInt8(u >> 8)
                    }
                    let ms = samples * 1000 / max(1, audio.format.sampleRate)
                    samples += audio.frameCount
                    send(WyomingEvent(type: "audio-chunk", data: ["rate": audio.format.sampleRate, "width": 2, "channels": audio.format.channels,
                                                                  "timestamp": ms], payload: bytes))
                }
                return samples
            }
            run = Task { do { try await pipeline.run(); return nil } catch { return error } }
        }

        func push(_ text: String) async { await source.push(text: text) }
    }

    /// Starts a session, or answers why not (nil).
    private func open() -> Session? {
        let token = WyomingToken()
        guard server.admitWyoming(token) else {
            let code = server.isDraining ? "draining" : "busy"
            server.metrics.refused(route: route.name, code: code)
            send(WyomingEvent(type: "error", data: ["text": code == "busy" ? "too many sessions" : "the server is shutting down", "code": code]))
            return nil
        }
        do {
            let pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
            guard let source = pipeline.appSource(route.sourceID), let sink = pipeline.appSink(route.speakerID ?? "speaker") else {
                throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source text or app-sink speaker")
            }
            let bus = SessionEvents(server: server, route: route.name, session: NATSEventPublisher.newSessionID())
            let session = Session(pipeline: pipeline, source: source, sink: sink, rate: Self.tts(route)?.rate ?? 22050, token: token, bus: bus,
                                  send: send)
            server.metrics.sessionStarted(route: route.name)
            bus.started(protocol: "wyoming", remote: remote)
            return session
        } catch {
            server.removeWyoming(token)
            server.metrics.error(route: route.name, code: "graph_failed")
            send(WyomingEvent(type: "error", data: ["text": "cannot start the graph: \(error)", "code": "graph_failed"]))
            return nil
        }
    }

    /// Ends a session's text and waits for its audio: `audio-stop` after the last chunk (an `error`
    /// first when the graph failed).
    private func close(_ s: Session, outcome: String) async {
        s.source.finish()
        let failure = await s.run.value
        let samples = await s.pump.value
        _ = await s.collect.value
        let seconds = ServeSession.seconds(ContinuousClock.now - s.started)
        if let failure {
            server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: seconds, drops: 0, mediaAgeP99Ms: nil)
            await s.bus.finished(outcome: "error", audioBytes: samples * 2, drops: 0)
            send(WyomingEvent(type: "error", data: ["text": "\(failure)", "code": "graph_failed"]))
        } else {
            let drops = s.pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
            server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: seconds, drops: drops,
                                        mediaAgeP99Ms: s.pipeline.sinkAges.map(\.age.p99Ms).max())
            await s.bus.finished(outcome: outcome, audioBytes: samples * 2, drops: drops)
        }
        send(WyomingEvent(type: "audio-stop", data: ["timestamp": samples * 1000 / max(1, Self.tts(route)?.rate ?? 22050)]))
        server.removeWyoming(s.token)
    }
}
