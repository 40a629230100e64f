import Foundation
import PipelineCore
import TencentASR
import Wyoming

/// `engine: wyoming`: any speech-to-text server that speaks the Wyoming protocol (Home Assistant's
/// voice protocol: wyoming-faster-whisper, wyoming-whisper-cpp, wyoming-vosk, ...).
///
/// Per utterance the engine sends `transcribe` (with `model` and `language` when given),
/// `audio-start`, one `audio-chunk` per chunk of audio as it arrives, and `audio-stop`, then waits
/// for `transcript` (the final result). Servers that stream (`transcript-start`,
/// `transcript-chunk`, `transcript-stop`) give partial results: the chunks received so far, joined.
/// One connection carries utterance after utterance; a server that closes it after each transcript
/// (as several do) gets a new one for the next.
///
/// Failures follow a reconnect policy: the utterance's audio is kept (up to `hold_ms`), and when the
/// connection is refused or drops before the transcript, the engine reports an `error` event
/// (`wyoming_disconnected`, `wyoming_unreachable`), reconnects with growing delays up to
/// `reconnect_attempts` times and sends the whole utterance again, so nothing said is lost to a
/// server restart. When every attempt fails, the utterance ends with an empty final result after
/// a `wyoming_failed` error, and the next utterance tries again. An `error` event from the server
/// (`server_error`, with its code) ends the utterance without retrying: the server understood and
/// refused. No transcript within `final_timeout_ms` of the end of the audio is `final_timeout`.
public struct WyomingEngine: ASREngine {
    let address: WyomingAddress
    let model: String?
    let language: String?
    let connectTimeout: Duration
    let finalTimeout: Duration
    let reconnect: TencentReconnectPolicy
    let holdMs: Int

    public var segmentsUnmarkedAudio: Bool { false }

    /// The utterance being recognized.
    private struct Utterance {
        var voiceID: String
        var seq: Int
        var startMs: Int64
        var endMs: Int64
        var chunks: [ASRAudio] = []
        var heldMs: Int64 = 0
        /// The server has everything sent so far on the current connection.
        var streaming = false
        var partial = ""
        /// The server refused the utterance (an `error` event): no transcript will come.
        var refused = false
    }

    public func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws {
        var connection: WyomingConnection?
        defer { connection?.close() }
        let runStart = ContinuousClock.now
        var utterance: Utterance?

        /// Handles what the server sent without waiting (streamed partial results, errors, the end).
        func drain(_ u: inout Utterance) async throws {
            guard let c = connection else { return }
            while let item = c.inbox.poll() {
                switch item {
                case .event(let e):
                    try await handleEarly(e, &u)
                case .closed(let reason):
                    try await lost("closed the connection during the utterance\(reason.map { ": \($0)" } ?? "")", &u)
                    return
                }
            }
        }

        /// The connection broke while the utterance streamed: say so; it is resent at its end.
        func lost(_ why: String, _ u: inout Utterance) async throws {
            connection?.close()
            connection = nil
            u.streaming = false
            context.count("disconnects")
            try await results.send(.error(code: "wyoming_disconnected", message: "\(address) \(why); the utterance will be sent again",
                                          voiceID: u.voiceID))
        }

        func handleEarly(_ e: WyomingEvent, _ u: inout Utterance) async throws {
            switch e.type {
            case "transcript-chunk":
                if let text = e.decode(WyomingText.self)?.text, !text.isEmpty {
                    u.partial += text
                    try await results.send(.partial(ASRTranscript(text: u.partial.trimmingCharacters(in: .whitespaces),
                                                                  voiceID: u.voiceID, seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                }
            case "error":
                // The server refused the utterance: no transcript will come for it.
                u.refused = true
                try await results.send(.error(code: "server_error", message: Self.describe(error: e), voiceID: u.voiceID))
            default:
                break
            }
        }

        /// Opens a connection if there is none.
        func connect() async -> String? {
            if let c = connection, c.isActive { return nil }
            connection?.close()
            connection = nil
            do {
                connection = try await WyomingConnection.open(address, timeout: connectTimeout)
                context.count("connections")
                return nil
            } catch {
                return "cannot connect to \(address): \(error)"
            }
        }

        /// Sends the utterance's start and what it holds so far on the current connection.
        func begin(_ u: inout Utterance) async -> Bool {
            guard let c = connection else { return false }
            var transcribe: [String: any Sendable] = [:]
            if let model { transcribe["name"] = model }
            if let language { transcribe["language"] = language }
            let f = u.chunks.first?.format ?? AudioFormat(sampleRate: 16000, channels: 1)
            do {
                try await c.send(WyomingEvent(type: "transcribe", data: transcribe))
                try await c.send(WyomingEvent(type: "audio-start", data: ["rate": f.sampleRate, "width": 2, "channels": f.channels]))
                // Audio held from before this connection goes in chunks of up to a second.
                for chunk in Self.coalesce(u.chunks, maxSamples: f.sampleRate * f.channels) { try await c.send(Self.chunk(chunk)) }
                u.streaming = true
                u.partial = ""
                return true
            } catch {
                c.close()
                connection = nil
                return false
            }
        }

        /// Ends the utterance: audio-stop, then the transcript, reconnecting and resending when needed.
        func finish(_ u: inout Utterance) async throws {
            var state = TencentReconnectState(policy: reconnect)
            var failure: String?
            while true {
                if !u.streaming {
                    if let problem = await connect() {
                        failure = problem
                    } else if await begin(&u) {
                        failure = nil
                    } else {
                        failure = "\(address) dropped the connection while the utterance was sent"
                    }
                }
                if u.streaming, let c = connection {
                    do {
                        try await c.send(WyomingEvent(type: "audio-stop"))
                        if u.refused {
                            try await results.send(.final(ASRTranscript(text: "", voiceID: u.voiceID, seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                            return
                        }
                        switch try await awaitTranscript(c, &u) {
                        case .done: return
                        case .dropped(let why): failure = why; connection = nil; u.streaming = false
                        }
                    } catch {
                        failure = "\(address): \(error)"
                        c.close(); connection = nil; u.streaming = false
                    }
                }
                guard case .reconnect(let delay, _) = state.connectionLost(at: ContinuousClock.now - runStart) else {
                    try await results.send(.error(code: "wyoming_failed",
                                                  message: "\(failure ?? "no answer"); gave up after \(reconnect.maxAttempts) attempts, the utterance has no transcript",
                                                  voiceID: u.voiceID))
                    context.count("failed_utterances")
                    try await results.send(.final(ASRTranscript(text: "", voiceID: u.voiceID, seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                    return
                }
                try await results.send(.error(code: "wyoming_unreachable", message: "\(failure ?? "no answer"); retrying in \(delay)", voiceID: u.voiceID))
                context.count("reconnects")
                try await context.clock.sleep(for: delay)
            }
        }

        enum Outcome { case done, dropped(String) }

        func awaitTranscript(_ c: WyomingConnection, _ u: inout Utterance) async throws -> Outcome {
            let deadline = ContinuousClock.now + finalTimeout
            while true {
                let left = deadline - ContinuousClock.now
                guard left > .zero, let item = await c.inbox.next(within: left) else {
                    try Task.checkCancellation()
                    c.close()
                    connection = nil
                    u.streaming = false
                    try await results.send(.error(code: "final_timeout", message: "\(address) sent no transcript within \(finalTimeout) of the end of the audio", voiceID: u.voiceID))
                    try await results.send(.final(ASRTranscript(text: u.partial.trimmingCharacters(in: .whitespaces), voiceID: u.voiceID,
                                                                 seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                    return .done
                }
                switch item {
                case .closed(let reason):
                    return .dropped("\(address) closed the connection before the transcript\(reason.map { ": \($0)" } ?? "")")
                case .event(let e):
                    switch e.type {
                    case "transcript":
                        let text = (e.decode(WyomingText.self)?.text ?? "").trimmingCharacters(in: .whitespacesAndNewlines)
                        try await results.send(.final(ASRTranscript(text: text, voiceID: u.voiceID, seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                        return .done
                    case "error":
                        try await results.send(.error(code: "server_error", message: Self.describe(error: e), voiceID: u.voiceID))
                        try await results.send(.final(ASRTranscript(text: "", voiceID: u.voiceID, seq: u.seq, startMs: u.startMs, endMs: u.endMs)))
                        return .done
                    default:
                        try await handleEarly(e, &u)
                    }
                }
            }
        }

        for await input in inputs {
            switch input {
            case .utteranceStart(let voiceID, let seq, let startMs):
                var u = Utterance(voiceID: voiceID, seq: seq, startMs: startMs, endMs: startMs)
                try await results.send(.utteranceStart(voiceID: voiceID, seq: seq))
                // Leftovers of the previous utterance (a close after its transcript) are dropped here.
                while let item = connection?.inbox.poll() {
                    if case .closed = item { connection = nil }
                }
                if await connect() == nil { _ = await begin(&u) }
                utterance = u
            case .audio(let audio):
                guard var u = utterance else { continue }
                u.endMs = audio.endMs
                u.chunks.append(audio)
                u.heldMs += audio.endMs - audio.startMs
                while u.heldMs > Int64(holdMs), u.chunks.count > 1 {
                    let old = u.chunks.removeFirst()
                    u.heldMs -= old.endMs - old.startMs
                    // Only audio not yet with the server is lost if the connection drops now.
                    context.count("dropped_audio_ms", by: UInt64(max(0, old.endMs - old.startMs)))
                }
                if u.streaming, let c = connection {
                    do { try await c.send(Self.chunk(audio)) } catch {
                        try await lost("failed while audio was sent: \(error)", &u)
                    }
                }
                try await drain(&u)
                utterance = u
            case .utteranceEnd:
                guard var u = utterance else { continue }
                utterance = nil
                try await drain(&u)
                try await finish(&u)
                try await results.send(.utteranceEnd(voiceID: u.voiceID, seq: u.seq))
            }
        }
    }

    /// Joins consecutive chunks into chunks of at most `maxSamples` (a chunk longer than that stays whole).
    static func coalesce(_ chunks: [ASRAudio], maxSamples: Int) -> [ASRAudio] {
        var out: [ASRAudio] = []
        for c in chunks {
            if var last = out.last, last.format == c.format, last.samples.count + c.samples.count <= maxSamples {
                last.samples += c.samples
                out[out.count - 1] = last
            } else {
                out.append(c)
            }
        }
        return out
    }

    static func chunk(_ a: ASRAudio) -> WyomingEvent {
        let bytes = a.samples.withUnsafeBytes { raw in
            // Little-endian s16, as Wyoming expects (every platform Swift runs on here is little-endian).
            Array(raw)
        }
        return WyomingEvent(type: "audio-chunk", data: ["rate": a.format.sampleRate, "width": 2, "channels": a.format.channels], payload: bytes)
    }

    static func describe(error e: WyomingEvent) -> String {
        let data = e.decode(WyomingText.self)
        let text = data?.text ?? "error"
        return data?.code.map { "\(text) (\($0))" } ?? text
    }

    /// The `asr` node parameters of `engine: wyoming`.
    public struct Configuration: ASREngineConfiguration {
        /// `tcp://host:port` or `unix://path`.
        public var uri: String?
        /// Model or program name sent with `transcribe`.
        public var model: String?
        /// Language sent with `transcribe`.
        public var language: String?
        /// Connection deadline, ms.
        public var handshakeTimeoutMs: Int?
        /// Deadline for the transcript after the end of the audio, ms.
        public var finalTimeoutMs: Int?
        /// Attempts after a failure before giving up on an utterance.
        public var reconnectAttempts: Int?
        /// Audio kept per utterance to resend after a reconnect, ms.
        public var holdMs: Int?

        /// The parameters only `engine: wyoming` uses (some shared with other engines, same meaning).
        public static let parameters = [
            ParamSpec("uri", .string, doc: "wyoming: the server, tcp://HOST:PORT (IPv6 tcp://[ADDR]:PORT) or unix://PATH; required"),
            ParamSpec("model", .string, doc: "wyoming: model or program name sent with transcribe (default: the server's)"),
            ParamSpec("language", .string, doc: "wyoming: language sent with transcribe, e.g. en (default: the server's)"),
            ParamSpec("handshake_timeout_ms", .int(100...120_000), doc: "wyoming: connection deadline (default 5000)"),
            ParamSpec("final_timeout_ms", .int(100...600_000), doc: "wyoming: deadline for the transcript after the end of the audio (default 30000)"),
            ParamSpec("reconnect_attempts", .int(0...1000), doc: "wyoming: attempts to reconnect and resend an utterance before giving it up (default 3)"),
            ParamSpec("hold_ms", .int(0...600_000), doc: "wyoming: audio of the current utterance kept to resend after a reconnect (default 60000)"),
        ]

        /// `uri` is required and must parse.
        public func problems() -> [String] {
            guard let uri else { return ["engine wyoming needs uri: tcp://HOST:PORT (Wyoming servers usually listen on 10300)"] }
            if case .failure(let e) = WyomingAddress.parse(uri) { return [e.message] }
            return []
        }
    }

    /// Engine registration.
    public static let descriptor = ASREngineDescriptor(
        name: "wyoming", summary: "a Wyoming speech-to-text server (faster-whisper, whisper.cpp, Vosk, ...), as Home Assistant uses them",
        configuration: Configuration.self,
        make: { c, _, env in
            guard let uri = c.uri, case .success(let address) = WyomingAddress.parse(uri) else {
                throw NodeError(.badUri, "node '\(env.id)': engine wyoming needs a valid uri (tcp://HOST:PORT or unix://PATH)")
            }
            var policy = TencentReconnectPolicy(initialDelay: .milliseconds(250), maxDelay: .seconds(4), maxAttempts: max(1, c.reconnectAttempts ?? 3))
            if c.reconnectAttempts == 0 { policy.maxAttempts = 1 }
            return WyomingEngine(address: address, model: c.model, language: c.language,
                                 connectTimeout: .milliseconds(c.handshakeTimeoutMs ?? 5000),
                                 finalTimeout: .milliseconds(c.finalTimeoutMs ?? 30_000),
                                 reconnect: policy, holdMs: c.holdMs ?? 60_000)
        })
}
