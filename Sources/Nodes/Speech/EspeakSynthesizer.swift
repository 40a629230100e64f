import CEspeakNG
import Foundation
import PipelineCore

/// `engine: espeak-ng`: eSpeak NG, embedded (Debian's libespeak-ng), about a hundred languages,
/// Mandarin (`cmn`) included.
///
/// Runs the library in its synchronous mode: each sentence is synthesized on the node's own
/// thread, under espeak-ng's process-wide lock (the library is one global instance), its audio
/// collected by the synthesis callback and handed to the node. `voice` is what
/// `espeak-ng -v` takes: a language (`en`, `en-us`, `cmn`), a voice file (`gmw/en-US`), optionally
/// with a variant (`en+f3`). The speaking rate is 175 words per minute times `speed`.
public struct EspeakSynthesizer: SpeechSynthesizer {
    /// The voice used when none is given.
    public static let defaultVoice = "en-us"
    /// espeak-ng's normal rate, in words per minute.
    static let normalRate = 175.0

    let voice: String
    let wordsPerMinute: Int
    let worker: BlockingWorker

    /// A synthesizer speaking with `voice` at `speed` times the normal rate; `name` names its thread.
    init(voice: String, speed: Double, name: String) {
        self.voice = voice
        self.wordsPerMinute = Int((Self.normalRate * speed).rounded())
        self.worker = BlockingWorker(name: name)
    }

    public func start() async throws {
        let voice = self.voice
        let problem = try await worker.run { EspeakLibrary.problem(voice: voice) }
        if let problem { throw NodeError(.voiceUnavailable, problem) }
    }

    public func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        let voice = self.voice, rate = wordsPerMinute
        let audio = try await worker.run { try EspeakLibrary.synthesize(sentence, voice: voice, wordsPerMinute: rate) }
        if !audio.samples.isEmpty { try await deliver(audio) }
    }

    public func stop() { worker.shutdown() }
}

/// espeak-ng's global state: initialized once (synchronous output), every call made under one
/// process-wide lock (the library keeps one voice, one set of parameters and one callback).
enum EspeakLibrary {
    private struct State {
        /// The library's sample rate once initialized.
        var sampleRate: Int?

        mutating func initialize() throws -> Int {
            if let sampleRate { return sampleRate }
            if let problem = libraryProblem({ vp_espeak_load($0, $1) }) { throw NodeError(.engineUnavailable, problem) }
            let rate = espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, nil, espeakINITIALIZE_DONT_EXIT)
            guard rate > 0 else {
                throw NodeError(.engineUnavailable, "espeak-ng could not start (its data, espeak-ng-data, is missing?); install libespeak-ng1 and espeak-ng-data")
            }
            sampleRate = Int(rate)
            return Int(rate)
        }
    }

    private static let state = LockedValue(State())

    /// Why espeak-ng cannot speak with `voice` (naming the voices it has), or `nil` when it can.
    static func problem(voice: String) -> String? {
        state.withLock { s -> String? in
            do { _ = try s.initialize() } catch { return "\(error)" }
            if espeak_SetVoiceByName(voice) == EE_OK { return nil }
            return "espeak-ng has no voice '\(voice)'; voices: " + voiceNames().joined(separator: ", ")
        }
    }

    /// Runs `body` under the library's lock once it is initialized: for callers of espeak-ng's other
    /// functions (the Piper voices' phonemizer).
    static func withLibrary<R: Sendable>(_ body: () throws -> R) throws -> R {
        try state.withLock { s in
            _ = try s.initialize()
            return try body()
        }
    }

    /// The language of each voice espeak-ng has (what `voice` takes), sorted. Call under the lock.
    private static func voiceNames() -> [String] {
        guard let list = espeak_ListVoices(nil) else { return [] }
        var names: Set<String> = []
        var i = 0
        while let entry = list[i] {
            // `languages` is a list of (priority byte, NUL-terminated name); the first names the voice.
            if let languages = entry.pointee.languages, languages.pointee != 0 {
                names.insert(String(cString: languages + 1))
            }
            i += 1
        }
        return names.sorted()
    }

    /// Speaks `text` with `voice` at `wordsPerMinute`; returns espeak-ng's native audio (22050 Hz mono).
    static func synthesize(_ text: String, voice: String, wordsPerMinute: Int) throws -> AudioBuffer {
        try state.withLock { s in
            let rate = try s.initialize()
            guard espeak_SetVoiceByName(voice) == EE_OK else {
                throw NodeError(.voiceUnavailable, "espeak-ng has no voice '\(voice)'")
            }
            _ = espeak_SetParameter(espeakRATE, Int32(min(max(wordsPerMinute, 80), 450)), 0)
            let collected = CollectedSamples()
            espeak_SetSynthCallback { wav, count, events in
                guard let events, let data = events.pointee.user_data else { return 0 }
                let collected = Unmanaged<CollectedSamples>.fromOpaque(data).takeUnretainedValue()
                if let wav, count > 0 { collected.samples.append(contentsOf: UnsafeBufferPointer(start: wav, count: Int(count))) }
                return 0
            }
            let status = withExtendedLifetime(collected) {
                text.withCString { chars in
                    espeak_Synth(chars, strlen(chars) + 1, 0, POS_CHARACTER, 0, UInt32(espeakCHARS_UTF8 | espeakENDPAUSE), nil,
                                 Unmanaged.passUnretained(collected).toOpaque())
                }
            }
            guard status == EE_OK else {
                throw NodeError(.synthesisFailed, "espeak-ng could not synthesize \"\(text)\" (error \(status.rawValue))")
            }
            return AudioBuffer(format: AudioFormat(sampleRate: rate, channels: 1), samples: collected.samples)
        }
    }

    /// Where the synthesis callback puts the audio of one call (used only under the lock).
    private final class CollectedSamples {
        var samples: [Int16] = []
    }
}
