import Foundation
import PipelineCore
import Wyoming

/// `engine: wyoming`: any text-to-speech server that speaks the Wyoming protocol (Home Assistant's
/// voice protocol: wyoming-piper, wyoming-openai, ...), at `uri`.
///
/// Per sentence the synthesizer opens a connection (as Home Assistant does: several servers close
/// it after each answer), sends `synthesize` (`{"text": ..., "voice": {"name": ...}}`, the voice
/// only when `voice` is set) and reads `audio-start`, `audio-chunk`s and `audio-stop`, passing each
/// chunk on as it arrives, so the node can play the first while the server makes the rest.
/// Chunks are 16-bit PCM (`width` 2) at the server's rate and channel count; the node converts.
///
/// Every failure is an error of the sentence (an `error` event; the node goes on with the next):
/// - `wyoming_unreachable`: no connection to `uri` within the timeout (the uri is named);
/// - `server_error`: the server answered `error` (its text and code);
/// - `wyoming_disconnected`: the connection closed before `audio-stop`;
/// - `wyoming_timeout`: nothing came from the server for `timeout`;
/// - `wyoming_audio_format`: audio that is not 16-bit PCM, or cut in the middle of a sample.
public struct WyomingSynthesizer: SpeechSynthesizer {
    let address: WyomingAddress
    let voice: String?
    /// Longest wait for the connection and for each event of the server.
    let timeout: Duration

    /// The deadline when none is given.
    public static let defaultTimeout: Duration = .seconds(15)

    /// A synthesizer asking the server at `address` for `voice` (nil: the server's default).
    public init(address: WyomingAddress, voice: String?, timeout: Duration = WyomingSynthesizer.defaultTimeout) {
        self.address = address
        self.voice = voice
        self.timeout = timeout
    }

    /// Nothing to prepare: a server that is down now may be up by the first sentence, and each
    /// sentence says so if it is not.
    public func start() async throws {}

    public func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        let connection: WyomingConnection
        do {
            connection = try await WyomingConnection.open(address, timeout: timeout)
        } catch {
            try Task.checkCancellation()
            throw NodeError(.wyomingUnreachable, "cannot connect to the Wyoming server \(address): \(error)")
        }
        defer { connection.close() }
        var request: [String: any Sendable] = ["text": sentence]
        if let voice { request["voice"] = ["name": voice] }
        do {
            try await connection.send(WyomingEvent(type: "synthesize", data: request))
        } catch {
            throw NodeError(.wyomingDisconnected, "\(address) closed the connection before the sentence was sent: \(error)")
        }

        var stream = WyomingAudioStream()
        while true {
            guard let item = await connection.inbox.next(within: timeout) else {
                try Task.checkCancellation()
                throw NodeError(.wyomingTimeout, "\(address) sent nothing for \(timeout) while synthesizing \(Self.quote(sentence))"
                                + (stream.samples > 0 ? " (after \(stream.millis) ms of audio)" : ""))
            }
            switch item {
            case .closed(let reason):
                throw NodeError(.wyomingDisconnected,
                                "\(address) closed the connection in the middle of \(Self.quote(sentence)) "
                                + (stream.started ? "after \(stream.millis) ms of audio" : "before any audio")
                                + (reason.map { ": \($0)" } ?? ""))
            case .event(let event):
                switch event.type {
                case "audio-start":
                    stream.start(event.decode(WyomingAudioFormat.self))
                case "audio-chunk":
                    let audio = try stream.chunk(event.decode(WyomingAudioFormat.self), payload: event.payload, from: address)
                    if !audio.samples.isEmpty { try await deliver(audio) }
                case "audio-stop":
                    return
                case "error":
                    throw NodeError(.serverError, "\(address) refused \(Self.quote(sentence)): \(WyomingEngine.describe(error: event))")
                default:
                    // `synthesize-stopped`, `info`, `pong`, or what a newer server adds: nothing to do.
                    continue
                }
            }
        }
    }

    public func stop() {}

    /// A sentence in an error message: quoted, at most 60 characters.
    static func quote(_ sentence: String) -> String {
        "\"" + (sentence.count > 60 ? String(sentence.prefix(57)) + "..." : sentence) + "\""
    }
}

/// The audio fields of `audio-start` and `audio-chunk`.
struct WyomingAudioFormat: Decodable, Sendable {
    var rate: Int?
    var width: Int?
    var channels: Int?

    enum CodingKeys: String, CodingKey { case rate, width, channels }

    /// Each field on its own: one of the wrong type is absent, not a failure of the others.
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        rate = try? c.decodeIfPresent(Int.self, forKey: .rate)
        width = try? c.decodeIfPresent(Int.self, forKey: .width)
        channels = try? c.decodeIfPresent(Int.self, forKey: .channels)
    }
}

/// The audio of one sentence as it comes from a Wyoming server: the format `audio-start` announced
/// (each chunk may say its own), chunks turned into samples.
struct WyomingAudioStream {
    private(set) var started = false
    private var announced: WyomingAudioFormat?
    /// Sample frames received so far, and their rate.
    private(set) var samples = 0
    private var rate = 0

    /// Milliseconds of audio received so far.
    var millis: Int { rate > 0 ? samples * 1000 / rate : 0 }

    mutating func start(_ format: WyomingAudioFormat?) {
        started = true
        announced = format
    }

    /// The samples of one `audio-chunk`. Throws `wyoming_audio_format` for audio that is not
    /// 16-bit PCM or not a whole number of sample frames.
    mutating func chunk(_ format: WyomingAudioFormat?, payload: [UInt8], from address: WyomingAddress) throws -> AudioBuffer {
        started = true
        let rate = format?.rate ?? announced?.rate
        let width = format?.width ?? announced?.width ?? 2
        let channels = format?.channels ?? announced?.channels ?? 1
        guard let rate, (1...768_000).contains(rate) else {
            throw NodeError(.wyomingAudioFormat, "\(address) sent an audio-chunk without a valid rate (\(rate.map(String.init) ?? "none"))")
        }
        guard width == 2 else {
            throw NodeError(.wyomingAudioFormat,
                            "\(address) sent \(width * 8)-bit audio (width \(width)); only 16-bit PCM (width 2) is taken: configure the server for 16-bit output")
        }
        guard (1...32).contains(channels) else {
            throw NodeError(.wyomingAudioFormat, "\(address) sent audio with \(channels) channels")
        }
        guard payload.count % (2 * channels) == 0 else {
            throw NodeError(.wyomingAudioFormat,
                            "\(address) sent an audio-chunk of \(payload.count) bytes, not a whole number of \(2 * channels)-byte sample frames")
        }
        var out = [Int16](repeating: 0, count: payload.count / 2)
        for i in out.indices {
            out[i] = Int16(bitPattern: UInt16(payload[2 * i]) | UInt16(payload[2 * i + 1]) << 8)   // little-endian
        }
        self.rate = rate
        samples += out.count / channels
        return AudioBuffer(format: AudioFormat(sampleRate: rate, channels: channels), samples: out)
    }
}
