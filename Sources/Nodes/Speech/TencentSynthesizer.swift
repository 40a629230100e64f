import BoundedTransport
import Foundation
import Logging
import NIOCore
import NIOSSL
import PipelineCore
import TencentASR
import WSClient

/// `engine: tencent`: Tencent Cloud's real-time speech synthesis over WebSocket
/// (`TextToStreamAudioWS`, `wss://tts.cloud.tencent.com/stream_ws`), one connection per sentence.
///
/// The request is the URL: `Action=TextToStreamAudioWS`, `AppId`, `SecretId`, `Timestamp`,
/// `Expired` (a day later), `SessionId` (a fresh UUID), `Text`, `ModelType=1`, `VoiceType` (`voice`),
/// `Codec=pcm`, `SampleRate` (8000 for an 8 kHz graph, else 16000), `Speed`, `Volume=0` and
/// `EnableSubtitle=false`, signed with the secret key: HMAC-SHA1 over
/// `GET<host><path>?<parameters sorted by name, values as given>`, base64, sent URL-encoded as
/// `Signature`. The server answers with text messages (JSON: `code`, `message`, `session_id`,
/// `request_id`, `message_id`, `final`, `result.subtitles`) and binary messages of 16-bit mono PCM,
/// passed on as they arrive; `final: 1` ends the sentence. `code` other than 0 is the server's
/// error, reported with its code and message (`server_error_<code>`).
///
/// `speed` maps onto the service's scale: 0.6×, 0.8×, 1×, 1.2×, 1.5×, 2.5× are its `Speed` −2, −1,
/// 0, 1, 2, 6, in between linearly; outside 0.6...2.5 the nearest end.
///
/// The secret key, the secret id and the signed URL are never logged nor put in a message.
public struct TencentSynthesizer: SpeechSynthesizer {
    /// The public service.
    public static let defaultEndpoint = "wss://tts.cloud.tencent.com/stream_ws"
    /// The service's voice when `voice` is not given (the official SDKs' default).
    public static let defaultVoiceType = 0

    /// What one connection needs, resolved from the node's parameters and environment.
    struct Settings: Sendable {
        var appID: String
        var secretID: String
        var secretKey: String
        var endpoint: TencentEndpoint
        /// The URL path (`/stream_ws`).
        var path: String
        var voiceType: Int
        var sampleRate: Int
        /// On the service's scale (-2...6).
        var speed: Double
        var caFile: String?
        var timeout: Duration

        /// Resolves the parameters; credentials fall back to `TENCENTCLOUD_APPID`,
        /// `TENCENTCLOUD_SECRET_ID` and `TENCENTCLOUD_SECRET_KEY` in `c.environment`.
        init(_ c: TTSNode.Configuration) throws {
            let credentials = try TencentCredentials(appID: c.appID, secretID: c.secretID, secretKey: c.secretKey, environment: c.environment)
            let (app, sid, skey) = (credentials.appID, credentials.secretID, credentials.secretKey)
            guard app.allSatisfy(\.isASCII), Int(app) != nil else {
                throw NodeError(.badAppId, "app_id must be the account's numeric AppId")
            }
            if let problem = Self.problems(c).first { throw NodeError(.badParameter, problem) }
            let e = TencentEndpoint(c.endpoint ?? TencentSynthesizer.defaultEndpoint)!
            appID = app
            secretID = sid
            secretKey = skey
            endpoint = TencentEndpoint(scheme: e.scheme, host: e.host, port: e.port, pathPrefix: "")
            path = e.pathPrefix.isEmpty ? "/stream_ws" : e.pathPrefix
            voiceType = c.voice.flatMap { Int($0) } ?? TencentSynthesizer.defaultVoiceType
            sampleRate = c.rate <= 8000 ? 8000 : 16000
            speed = TencentSynthesizer.serviceSpeed(c.speed)
            caFile = c.caFile
            timeout = c.timeoutMs.map { .milliseconds($0) } ?? WyomingSynthesizer.defaultTimeout
        }

        /// What is wrong with the parameters of `engine: tencent`, credentials aside (they may
        /// come from the environment the graph runs in).
        static func problems(_ c: TTSNode.Configuration) -> [String] {
            var out: [String] = []
            if let v = c.voice, Int(v) == nil || v.contains(where: { !$0.isASCII }) {
                out.append("engine tencent takes voice as a VoiceType number (e.g. 101001), got '\(v)'")
            }
            if let e = c.endpoint, TencentEndpoint(e) == nil {
                out.append("endpoint \"\(e)\": expected wss://HOST[:PORT][/PATH] or ws://...")
            }
            if let a = c.appID, !a.isEmpty, Int(a) == nil || a.contains(where: { !$0.isASCII }) {
                out.append("app_id must be the account's numeric AppId")
            }
            return out
        }

        /// The signed URL of one sentence, and what goes into it.
        func request(text: String, sessionID: String, timestamp: Int) -> (url: String, parameters: [String: String], signature: String) {
            let parameters: [String: String] = [
                "Action": "TextToStreamAudioWS",
                "AppId": appID,
                "SecretId": secretID,
                "Timestamp": String(timestamp),
                "Expired": String(timestamp + 24 * 3600),
                "SessionId": sessionID,
                "Text": text,
                "ModelType": "1",
                "VoiceType": String(voiceType),
                "Codec": "pcm",
                "SampleRate": String(sampleRate),
                "Speed": TencentSynthesizer.format(speed),
                "Volume": "0",
                "EnableSubtitle": "false",
            ]
            // Signed as the service checks it: the bare host name (no port), values as given.
            let signed = "GET" + TencentSignature.signedText(host: endpoint.host, path: path, parameters: parameters)
            let signature = TencentSignature.sign(signed, secretKey: secretKey)
            let url = endpoint.scheme + "://" + endpoint.hostHeader + path + "?"
                + TencentSignature.canonicalQuery(parameters, encode: true) + "&Signature=" + TencentSignature.percentEncode(signature)
            return (url, parameters, signature)
        }
    }

    let settings: Result<Settings, NodeError>

    /// A synthesizer with the node's parameters (resolved now; what is wrong is thrown by ``start()``).
    init(_ configuration: TTSNode.Configuration) {
        do {
            settings = .success(try Settings(configuration))
        } catch let e as NodeError {
            settings = .failure(e)
        } catch {
            settings = .failure(NodeError(.badParameter, "\(error)"))
        }
    }

    /// Fails with what is missing (credentials) or wrong; connects to nothing.
    public func start() async throws { _ = try settings.get() }

    public func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        let s = try settings.get()
        let request = s.request(text: sentence, sessionID: UUID().uuidString.lowercased(), timestamp: Int(Date().timeIntervalSince1970))
        let run = TencentSynthesisRun(settings: s, sentence: sentence)
        let tls: TLSConfiguration? = s.endpoint.scheme == "wss" ? {
            var t = TLSConfiguration.makeClientConfiguration()
            if let ca = s.caFile { t.trustRoots = .file(ca) }   // a private CA instead of the system store
            return t
        }() : nil
        let logger = Logger(label: "voicepipe.tts.tencent", factory: { _ in SwiftLogNoOpLogHandler() })
        // The connection runs in a task of its own and hands the audio over through a stream:
        // `deliver` is called here, on the caller's task, never kept beyond this call.
        let (audio, sink) = AsyncStream<AudioBuffer>.makeStream()
        let connectionError: (any Error)? = try await withThrowingTaskGroup(of: (any Error)?.self) { group in
            group.addTask {
                defer { sink.finish() }
                do {
                    try await BoundedWebSocket.connect(
                        url: request.url, configuration: .init(maxFrameSize: 1 << 22, closeTimeout: .seconds(2)), tlsConfiguration: tls,
                        handshakeTimeout: s.timeout, logger: logger
                    ) { inbound, outbound, _ in
                        try await run.receive(inbound, outbound, deliver: { sink.yield($0) })
                    }
                    return nil
                } catch {
                    return error
                }
            }
            do {
                for await buffer in audio { try await deliver(buffer) }
            } catch {
                group.cancelAll()
                throw error
            }
            var failed: (any Error)?
            for try await e in group { failed = e }
            return failed
        }
        try Task.checkCancellation()
        if let error = connectionError {
            if let failure = run.failure { throw failure }
            // After `final: 1` the sentence is whole: the closing handshake may fail (the server
            // closes at once), that is no error of the sentence.
            if run.isDone { return }
            if error is CancellationError { throw CancellationError() }
            let why = Self.scrub(TencentASRSession.describe(error), secrets: [s.secretID, s.secretKey, request.signature,
                                                                             TencentSignature.percentEncode(request.signature)])
            throw NodeError(.tencentUnreachable, "Tencent TTS at \(s.endpoint.scheme)://\(s.endpoint.hostHeader)\(s.path): \(why)")
        }
        if let failure = run.failure { throw failure }
    }

    public func stop() {}

    /// `factor` (the node's `speed`) on the service's `Speed` scale.
    static func serviceSpeed(_ factor: Double) -> Double {
        let points: [(factor: Double, speed: Double)] = [(0.6, -2), (0.8, -1), (1.0, 0), (1.2, 1), (1.5, 2), (2.5, 6)]
        if factor <= points[0].factor { return points[0].speed }
        for (a, b) in zip(points, points.dropFirst()) where factor <= b.factor {
            return a.speed + (factor - a.factor) / (b.factor - a.factor) * (b.speed - a.speed)
        }
        return points[points.count - 1].speed
    }

    /// A number as the query carries it: at most two decimals, no trailing zeros (`0`, `1.5`, `-0.25`).
    static func format(_ value: Double) -> String {
        let rounded = (value * 100).rounded() / 100
        if rounded == rounded.rounded() { return String(Int(rounded)) }
        var s = String(format: "%.2f", rounded)
        while s.hasSuffix("0") { s.removeLast() }
        return s
    }

    /// `text` with every secret replaced by `***`.
    static func scrub(_ text: String, secrets: [String]) -> String {
        secrets.filter { $0.count >= 4 }.reduce(text) { $0.replacingOccurrences(of: $1, with: "***") }
    }
}

/// A text message of the service: `{"code": 0, "message": "success", "session_id": ..., "request_id": ...,
/// "message_id": ..., "final": 0|1, "result": {"subtitles": [...]}}`.
struct TencentTTSMessage: Decodable, Sendable {
    var code: Int
    var message: String
    var sessionID: String?
    var requestID: String?
    var messageID: String?
    var isFinal: Bool
    /// Number of subtitles (word timings) in `result`.
    var subtitles: Int

    enum CodingKeys: String, CodingKey {
        case code, message, final, result
        case sessionID = "session_id", requestID = "request_id", messageID = "message_id"
    }

    /// `result`: the subtitles (word timings) when `EnableSubtitle` was set; only counted here.
    struct Payload: Decodable {
        var subtitles: [Subtitle]?
        struct Subtitle: Decodable {}
    }

    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        guard let code = try c.decodeLoose(.code) else {
            throw DecodingError.dataCorruptedError(forKey: .code, in: c, debugDescription: "no `code`")
        }
        self.code = code
        message = (try? c.decodeIfPresent(String.self, forKey: .message)) ?? ""
        sessionID = try? c.decodeIfPresent(String.self, forKey: .sessionID)
        requestID = try? c.decodeIfPresent(String.self, forKey: .requestID)
        messageID = try? c.decodeIfPresent(String.self, forKey: .messageID)
        isFinal = (try c.decodeLoose(.final) ?? 0) == 1
        subtitles = (try? c.decodeIfPresent(Payload.self, forKey: .result))?.subtitles?.count ?? 0
    }

    static func parse(_ text: String) throws -> TencentTTSMessage {
        try JSONDecoder().decode(TencentTTSMessage.self, from: Data(text.utf8))
    }
}

/// One sentence on one connection: reads the server's messages, passes the audio on, and keeps
/// what went wrong.
final class TencentSynthesisRun: Sendable {
    let settings: TencentSynthesizer.Settings
    let sentence: String
    private let state = LockedValue<(failure: NodeError?, lastHeard: ContinuousClock.Instant, audioBytes: Int, done: Bool)>(
        (nil, .now, 0, false))

    init(settings: TencentSynthesizer.Settings, sentence: String) {
        self.settings = settings
        self.sentence = sentence
    }

    /// True once `final: 1` came.
    var isDone: Bool { state.withLock { $0.done } }

    /// The first failure of the sentence, if any.
    var failure: NodeError? { state.withLock { $0.failure } }

    private func fail(_ e: NodeError) { state.withLock { if $0.failure == nil { $0.failure = e } } }

    private var audioMs: Int { state.withLock { $0.audioBytes } / 2 * 1000 / settings.sampleRate }

    /// Reads messages until `final: 1`, an error, the end of the connection or a silent server.
    func receive(_ inbound: WebSocketInboundStream, _ outbound: WebSocketOutboundWriter,
                 deliver: @escaping @Sendable (AudioBuffer) async throws -> Void) async throws {
        let format = AudioFormat(sampleRate: settings.sampleRate, channels: 1)
        let quoted = WyomingSynthesizer.quote(sentence)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.watchdog(outbound) }
            group.addTask {
                var odd: UInt8?
                do {
                for try await message in inbound.messages(maxSize: 1 << 22) {
                    self.state.withLock { $0.lastHeard = .now }
                    switch message {
                    case .binary(var buffer):
                        var bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
                        if let o = odd { bytes.insert(o, at: 0); odd = nil }
                        if bytes.count % 2 == 1 { odd = bytes.removeLast() }
                        self.state.withLock { $0.audioBytes += bytes.count }
                        var samples = [Int16](repeating: 0, count: bytes.count / 2)
                        for i in samples.indices {
                            samples[i] = Int16(bitPattern: UInt16(bytes[2 * i]) | UInt16(bytes[2 * i + 1]) << 8)
                        }
                        if !samples.isEmpty { try await deliver(AudioBuffer(format: format, samples: samples)) }
                    case .text(let text):
                        let m: TencentTTSMessage
                        do {
                            m = try TencentTTSMessage.parse(text)
                        } catch {
                            self.fail(NodeError(.badServerMessage,
                                                "Tencent TTS sent a message that is not of the protocol: "
                                                + TerminalText.escape(String(text.prefix(80)), keepNewlines: false)))
                            return
                        }
                        if m.code != 0 {
                            let ids = [m.requestID.map { "request_id \($0)" }, m.sessionID.map { "session_id \($0)" }].compactMap { $0 }
                            self.fail(NodeError(NodeErrorCode("server_error_\(m.code)"),
                                                "Tencent TTS error \(m.code): \(TerminalText.escape(m.message, keepNewlines: false))"
                                                + (ids.isEmpty ? "" : " (\(ids.joined(separator: ", ")))") + " for \(quoted)"))
                            return
                        }
                        if m.isFinal {
                            self.state.withLock { $0.done = true }
                            return
                        }
                    }
                }
                } catch is CancellationError {
                    throw CancellationError()
                } catch {
                    if self.failure != nil { return }
                    self.fail(NodeError(.tencentDisconnected,
                                        "Tencent TTS connection failed during \(quoted) (after \(self.audioMs) ms of audio): \(TencentASRSession.describe(error))"))
                    return
                }
                self.fail(NodeError(.tencentDisconnected,
                                    "Tencent TTS closed the connection before the end of \(quoted) (after \(self.audioMs) ms of audio)"))
            }
            _ = try await group.next()
            group.cancelAll()
        }
        try? await outbound.close(.normalClosure, reason: nil)
    }

    /// Ends the connection when the server says nothing for the timeout.
    private func watchdog(_ outbound: WebSocketOutboundWriter) async throws {
        while true {
            let deadline = state.withLock { $0.lastHeard } + settings.timeout
            if ContinuousClock.now >= deadline {
                fail(NodeError(.tencentTimeout, "Tencent TTS sent nothing for \(settings.timeout) while synthesizing "
                               + WyomingSynthesizer.quote(sentence) + " (after \(audioMs) ms of audio)"))
                return
            }
            try await Task.sleep(until: deadline, clock: .continuous)
        }
    }
}
