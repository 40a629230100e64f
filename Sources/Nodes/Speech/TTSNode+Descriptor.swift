import PipelineCore
import Wyoming

extension TTSNode {
    /// The synthesizer of `tts` (`engine`).
    public enum Engine: String, Sendable, Decodable, CaseIterable {
        /// CMU Flite, embedded: US English voices. The default.
        case flite
        /// eSpeak NG, embedded: about a hundred languages, Mandarin included.
        case espeakNG = "espeak-ng"
        /// Any Wyoming text-to-speech server (wyoming-piper, ...), at `uri`.
        case wyoming
        /// Tencent Cloud's real-time speech synthesis (WebSocket).
        case tencent
        /// A Piper voice (neural, ONNX) on the embedded ONNX Runtime, phonemized by eSpeak NG.
        case piper

        /// One line per engine for `voicepipe nodes`.
        var summary: String {
            switch self {
            case .flite: "flite (embedded; voices \(FliteSynthesizer.Voice.names), default \(FliteSynthesizer.Voice.defaultVoice.rawValue))"
            case .espeakNG: "espeak-ng (embedded; voice = a language as `espeak-ng -v` takes it: en, en-us, cmn, ...; default \(EspeakSynthesizer.defaultVoice))"
            case .wyoming: "wyoming (a Wyoming TTS server at uri, e.g. wyoming-piper; voice = the server's voice name)"
            case .tencent: "tencent (Tencent Cloud real-time synthesis; voice = a VoiceType number)"
            case .piper: "piper (a Piper voice, neural, on the embedded ONNX Runtime; voice = NAME.onnx with NAME.onnx.json beside it, or an installed voice's name; default \(PiperFiles.defaultVoice), from scripts/install-piper.sh)"
            }
        }
    }

    /// Configuration of `tts`.
    public struct Configuration: NodeConfiguration {
        /// The synthesizer.
        public var engine: Engine
        /// The engine's voice; `nil` = the engine's default.
        public var voice: String?
        /// Sample rate of the audio on `out`.
        public var rate: Int
        /// Speaking rate, as a factor of the voice's own.
        public var speed: Double
        /// Length of the frames on `out`, in milliseconds.
        public var frameMs: Int
        /// `wyoming`: the server, `tcp://host:port`.
        public var uri: String?
        /// `wyoming`, `tencent`: longest wait for the connection and for each message of the server, ms.
        public var timeoutMs: Int?
        /// `tencent`: AppId, SecretId, SecretKey (`nil`: from the environment).
        public var appID: String?
        public var secretID: String?
        public var secretKey: String?
        /// `tencent`: where to connect (default ``TencentSynthesizer/defaultEndpoint``).
        public var endpoint: String?
        /// `tencent`: PEM file of CA certificates to trust instead of the system's.
        public var caFile: String?
        /// The engine used when `engine` cannot start here (its voice or library is missing).
        public var fallback: Engine?
        /// `piper`: the voice's noise scale and phoneme-length noise (`noise_w`); `nil`: the voice's own.
        public var noiseScale: Double?
        public var noiseW: Double?
        /// `piper`: the speaker of a multi-speaker voice (a name of its `speaker_id_map`, or a number).
        public var speaker: String?
        /// `piper`: threads per synthesis run.
        public var threads: Int?
        /// Bounds on one text (``SpeechPieces``): longest piece handed to the engine at once, longest
        /// word, and most audio one text may produce (ms).
        public var maxSentenceChars: Int
        public var maxWordChars: Int
        public var maxTextMs: Int
        /// Environment variables the credentials fall back to (not a parameter: the node's
        /// ``NodeEnvironment/variables``, set when the node is made).
        public var environment: [String: String] = [:]

        enum CodingKeys: String, CodingKey {
            case engine, voice, rate, speed, frameMs, uri, timeoutMs, endpoint, caFile
            case fallback, noiseScale, noiseW, speaker, threads
            case appID = "appId", secretID = "secretId", secretKey
            case maxSentenceChars, maxWordChars, maxTextMs
        }

        public static let parameters: [ParamSpec] = [
            ParamSpec("engine", .choice(Engine.allCases.map(\.rawValue)), default: .string(Engine.flite.rawValue),
                      doc: "synthesizer: " + Engine.allCases.map(\.summary).joined(separator: "; ")),
            ParamSpec("voice", .path, doc: "the engine's voice (flite: \(FliteSynthesizer.Voice.names); espeak-ng: a language such as en-us or cmn, optionally +variant; wyoming: the server's voice name; tencent: a VoiceType number such as 101001; piper: a .onnx file with its .onnx.json beside it, or the name of a voice in .deps/piper/voices)"),
            ParamSpec("rate", .int(1000...384_000), default: 16000, doc: "sample rate of the audio on out (mono), converted from the engine's own"),
            ParamSpec("speed", .double(0.25...4), default: 1.0, doc: "speaking rate as a factor of the voice's own (espeak-ng: 175 words per minute times this, within 80...450; tencent: 0.6...2.5; wyoming: the server's own)"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "length of the audio frames on out"),
            ParamSpec("uri", .string, doc: "wyoming: the server, tcp://HOST:PORT (IPv6 tcp://[ADDR]:PORT); required"),
            ParamSpec("timeout_ms", .int(100...600_000), doc: "wyoming, tencent: longest wait for the connection and for each message of the server (default 15000)"),
            ParamSpec("app_id", .string, doc: "tencent: AppId (default: $TENCENTCLOUD_APPID)"),
            ParamSpec("secret_id", .string, secret: true, doc: "tencent: SecretId (default: $TENCENTCLOUD_SECRET_ID)"),
            ParamSpec("secret_key", .string, secret: true, doc: "tencent: SecretKey (default: $TENCENTCLOUD_SECRET_KEY)"),
            ParamSpec("endpoint", .string, doc: "tencent: the service URL (default \(TencentSynthesizer.defaultEndpoint)); ws://HOST:PORT[/PATH] for a local server"),
            ParamSpec("ca_file", .string, doc: "tencent: PEM file of CA certificates to trust instead of the system's"),
            ParamSpec("fallback", .choice(Engine.allCases.map(\.rawValue)),
                      doc: "engine to use, with one line on stderr and a tts_fallback event saying why, when `engine` cannot start here (its voice or library is missing): e.g. engine: piper, fallback: flite"),
            ParamSpec("noise_scale", .double(0...2), doc: "piper: noise scale (default: the voice's inference.noise_scale)"),
            ParamSpec("noise_w", .double(0...2), doc: "piper: phoneme length noise (default: the voice's inference.noise_w)"),
            ParamSpec("speaker", .string, doc: "piper: the speaker of a multi-speaker voice, a name of its speaker_id_map or a number (default 0)"),
            ParamSpec("threads", .int(1...64), doc: "piper: threads per synthesis run (default 2; the first node to load a voice sets it for the process)"),
            ParamSpec("max_sentence_chars", .int(20...100_000), default: 300, doc: "longest piece of text synthesized at once: a longer sentence is cut at a clause, else a word boundary"),
            ParamSpec("max_word_chars", .int(5...10_000), default: 40, doc: "longest word synthesized whole: a longer one (a long number, a pasted hash) is spoken in pieces of this many characters"),
            ParamSpec("max_text_ms", .int(100...86_400_000), default: 300_000, doc: "most audio one text may produce: the rest is dropped, with a tts_dropped event naming it"),
        ]

        /// The audio format on `out`.
        public var format: AudioFormat { AudioFormat(sampleRate: rate, channels: 1) }

        /// A voice the engine does not have (naming those it has).
        public func problems() -> [String] {
            if let fallback, fallback != engine, !ownProblems().isEmpty {
                var other = self
                other.engine = fallback
                other.voice = nil
                other.fallback = nil
                return other.problems().map { "fallback \(fallback.rawValue): \($0)" }
            }
            return ownProblems()
        }

        /// What keeps `engine` from starting here.
        func ownProblems() -> [String] {
            switch engine {
            case .flite:
                guard let voice, FliteSynthesizer.Voice(name: voice) == nil else { return [] }
                return ["flite has no voice '\(voice)'; voices: \(FliteSynthesizer.Voice.names)"]
            case .espeakNG:
                return EspeakLibrary.problem(voice: voice ?? EspeakSynthesizer.defaultVoice).map { [$0] } ?? []
            case .wyoming:
                guard let uri else { return ["engine wyoming needs uri: tcp://HOST:PORT (Wyoming servers usually listen on 10200 for speech synthesis)"] }
                switch WyomingAddress.parse(uri) {
                case .failure(let e): return [e.message]
                case .success(.unix): return ["engine wyoming of tts takes uri tcp://HOST:PORT, got '\(uri)'"]
                case .success(.tcp): return []
                }
            case .tencent:
                return TencentSynthesizer.Settings.problems(self)
            case .piper:
                return piperProblems()
            }
        }

        /// The selected engine's synthesizer (behind its fallback, when one is given); `name` names its thread.
        func makeSynthesizer(name: String) -> any SpeechSynthesizer {
            guard let fallback, fallback != engine else { return makeEngine(name: name) }
            var other = self
            other.engine = fallback
            other.voice = nil
            other.fallback = nil
            return FallbackSynthesizer(primary: makeEngine(name: name), primaryName: engine.rawValue, fallbackName: fallback.rawValue,
                                       makeFallback: { [other] in other.makeEngine(name: name) })
        }

        /// The selected engine's own synthesizer.
        func makeEngine(name: String) -> any SpeechSynthesizer {
            switch engine {
            case .flite:
                FliteSynthesizer(voice: voice.flatMap(FliteSynthesizer.Voice.init(name:)) ?? FliteSynthesizer.Voice.defaultVoice,
                                 speed: speed, name: name)
            case .espeakNG:
                EspeakSynthesizer(voice: voice ?? EspeakSynthesizer.defaultVoice, speed: speed, name: name)
            case .wyoming:
                // problems() has checked the uri: a configuration that skipped the check fails at its first sentence.
                WyomingSynthesizer(address: uri.flatMap { try? WyomingAddress.parse($0).get() } ?? .tcp(host: "", port: 0),
                                   voice: voice, timeout: timeoutMs.map { .milliseconds($0) } ?? WyomingSynthesizer.defaultTimeout)
            case .tencent:
                TencentSynthesizer(self)
            case .piper:
                PiperSynthesizer(settings: piperSettings, name: name)
            }
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "tts", summary: "Speech synthesis: text in, audio out sentence by sentence as soon as each is ready (engines: \(Engine.allCases.map(\.rawValue).joined(separator: ", ")))",
        family: "services",
        inputs: [PortSpec("text", [.text], doc: "texts to speak; each is cut into sentences, synthesized in order"),
                 .interrupt("any event cancels the answer being spoken and drops the texts waiting")],
        outputs: [PortSpec("out", [.audio], doc: "the speech, mono at `rate`, in `frame_ms` frames; a text's first frame marked speechStart, its last speechEnd; every frame captioned with its sentence"),
                  .events],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.format }),
        make: { c, env in
            var c = c
            c.environment = env.variables
            return TTSNode(configuration: c)
        })
}
