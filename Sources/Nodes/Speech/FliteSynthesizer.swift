import CFlite
import PipelineCore

/// `engine: flite`: CMU Flite, embedded (Debian's libflite and its US English voices).
///
/// Each sentence is synthesized whole on the node's own thread, under flite's process-wide lock
/// (flite keeps global state and its voices are shared), then handed to the node. `speed` scales
/// the voice's phone durations (`duration_stretch` = 1 / speed).
public struct FliteSynthesizer: SpeechSynthesizer {
    /// A voice of flite's that voicepipe links.
    public enum Voice: String, Sendable, CaseIterable {
        /// Female US English (clustergen, 16 kHz). The default.
        case slt
        /// Male US English (diphone, 8 kHz).
        case kal
        /// Male US English (clustergen, 16 kHz).
        case kal16
        /// Male US English (clustergen, 16 kHz).
        case rms
        /// Male Scottish English (clustergen, 16 kHz).
        case awb

        /// The voice named `name` (`slt` or `cmu_us_slt`, any case).
        public init?(name: String) {
            var n = name.lowercased()
            if n.hasPrefix("cmu_us_") { n.removeFirst("cmu_us_".count) }
            self.init(rawValue: n)
        }

        /// The voice used when none is given.
        public static let defaultVoice = Voice.slt

        /// Every voice's name, for messages.
        public static var names: String { allCases.map(\.rawValue).joined(separator: ", ") }

        /// Registers the voice with flite (the first call loads it; later ones return the same voice).
        fileprivate func register() -> UnsafeMutablePointer<cst_voice>? {
            switch self {
            case .slt: register_cmu_us_slt(nil)
            case .kal: register_cmu_us_kal(nil)
            case .kal16: register_cmu_us_kal16(nil)
            case .rms: register_cmu_us_rms(nil)
            case .awb: register_cmu_us_awb(nil)
            }
        }
    }

    let voice: Voice
    let speed: Double
    let worker: BlockingWorker

    /// A synthesizer speaking with `voice` at `speed` times the voice's own rate; `name` names its thread.
    init(voice: Voice, speed: Double, name: String) {
        self.voice = voice
        self.speed = speed
        self.worker = BlockingWorker(name: name)
    }

    public func start() async throws {
        let voice = self.voice
        try await worker.run { try FliteLibrary.load(voice) }
    }

    public func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        let voice = self.voice, stretch = Float(1 / speed)
        let audio = try await worker.run { try FliteLibrary.synthesize(sentence, voice: voice, durationStretch: stretch) }
        if !audio.samples.isEmpty { try await deliver(audio) }
    }

    public func stop() { worker.shutdown() }
}

/// flite's global state: initialized once, voices registered once, every call made under one
/// process-wide lock (flite is not thread-safe, and a voice's features are shared by its users).
enum FliteLibrary {
    private struct State {
        var initialized = false
        var voices: [FliteSynthesizer.Voice: UnsafeMutablePointer<cst_voice>] = [:]

        mutating func voice(_ v: FliteSynthesizer.Voice) throws -> UnsafeMutablePointer<cst_voice> {
            if !initialized {
                if let problem = libraryProblem({ vp_flite_load($0, $1) }) { throw NodeError(.engineUnavailable, problem) }
                _ = vp_flite_init()
                initialized = true
            }
            if let loaded = voices[v] { return loaded }
            guard let loaded = v.register() else {
                let why = libraryProblem { vp_flite_voice_load(v.rawValue, $0, $1) } ?? "libflite_cmu_us_\(v.rawValue).so.1 did not register it; install libflite1"
                throw NodeError(.voiceUnavailable, "flite could not load its voice \(v.rawValue): \(why)")
            }
            voices[v] = loaded
            return loaded
        }
    }

    private static let state = LockedValue(State())

    /// Loads `voice` (once per process).
    static func load(_ voice: FliteSynthesizer.Voice) throws {
        try state.withLock { s in _ = try s.voice(voice) }
    }

    /// Speaks `text` with `voice`; returns the voice's native audio (8 or 16 kHz mono).
    static func synthesize(_ text: String, voice: FliteSynthesizer.Voice, durationStretch: Float) throws -> AudioBuffer {
        try state.withLock { s in
            let v = try s.voice(voice)
            flite_feat_set_float(v.pointee.features, "duration_stretch", durationStretch)
            guard let wave = flite_text_to_wave(text, v) else {
                throw NodeError(.synthesisFailed, "flite could not synthesize \"\(text)\"")
            }
            defer { delete_wave(wave) }
            let w = wave.pointee
            let channels = max(1, Int(w.num_channels))
            let count = Int(w.num_samples) * channels
            let samples = count > 0 && w.samples != nil ? Array(UnsafeBufferPointer(start: w.samples, count: count)) : []
            return AudioBuffer(format: AudioFormat(sampleRate: Int(w.sample_rate), channels: channels), samples: samples)
        }
    }
}
