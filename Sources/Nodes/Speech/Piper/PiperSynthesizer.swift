import Foundation
import PipelineCore

/// `engine: piper`: a Piper voice (a VITS model in ONNX with its JSON configuration) on the project's
/// ONNX Runtime, phonemized by the embedded eSpeak NG.
///
/// ``start()`` loads the voice (``PiperVoice/shared(model:threads:variables:)``: one copy per process,
/// warmed up by a first run) and checks its espeak voice and `speaker`. Each sentence is cleaned
/// (``SpeechScripts``: control characters out, letters of scripts the voice cannot read left out and
/// reported as `tts_skipped`), cut into pieces (``PiperPieces``: when the engine was idle — somebody
/// waits for the first sound — a long sentence's first clause or phrase alone; every piece bounded),
/// and each piece is phonemized (``PiperPhonemizer``), turned into the
/// voice's phoneme ids and synthesized; a voice with halves (``PiperStreamSplit``) delivers a piece
/// slice by slice, the first short, each as soon as it is made, at the voice's own rate (the node
/// converts it to `rate`). Audio is scaled with the voice's one gain; a sentence's audio ends with
/// ``sentenceSilenceMs`` of silence.
final class PiperSynthesizer: ReportingSynthesizer {
    /// What the `tts` parameters set.
    struct Settings: Sendable {
        var voice: String?
        var speed: Double = 1
        var noiseScale: Double?
        var noiseW: Double?
        var speaker: String?
        var threads: Int = 2
        var variables: [String: String] = [:]
    }

    /// Silence after each sentence, ms.
    static let sentenceSilenceMs = 150

    struct Loaded: Sendable {
        let voice: PiperVoice
        let speaker: Int64?
        let scales: [Float]
        let letters: SpeechScripts.Ranges
    }

    let settings: Settings
    let worker: BlockingWorker
    private let loaded = LockedValue<Loaded?>(nil)
    private let notices = LockedValue<[SynthesisNotice]>([])
    /// When the last sentence was done.
    private let finished = LockedValue<ContinuousClock.Instant?>(nil)

    init(settings: Settings, name: String) {
        self.settings = settings
        self.worker = BlockingWorker(name: name)
    }

    func start() async throws {
        let settings = self.settings
        if let problem = PiperFiles.problem(settings.voice, settings.variables) { throw NodeError(.voiceUnavailable, problem) }
        let model = PiperFiles.model(settings.voice, settings.variables)
        let state = try await worker.run { () throws -> Loaded in
            let voice = try PiperVoice.shared(model: model, threads: settings.threads, variables: settings.variables)
            let c = voice.configuration
            if let problem = EspeakLibrary.problem(voice: c.espeakVoice) {
                throw NodeError(.voiceUnavailable, "Piper voice \(model) reads espeak-ng's '\(c.espeakVoice)' phonemes: \(problem)")
            }
            let speaker = try c.speakerID(settings.speaker)
            let scales = [Float(settings.noiseScale ?? c.noiseScale), Float(c.lengthScale / settings.speed), Float(settings.noiseW ?? c.noiseW)]
            return Loaded(voice: voice, speaker: speaker, scales: scales,
                          letters: SpeechScripts.ranges(language: c.language ?? c.espeakVoice))
        }
        loaded.withLock { $0 = state }
    }

    func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        guard let state = loaded.withLock({ $0 }) else {
            throw NodeError(.synthesisFailed, "the Piper voice is not loaded")
        }
        let format = AudioFormat(sampleRate: state.voice.configuration.sampleRate, channels: 1)
        let (text, skipped) = SpeechScripts.sayable(sentence, ranges: state.letters)
        if !skipped.isEmpty {
            note(.ttsSkipped, [("text", .string(skipped)),
                               ("reason", .string("the voice \(state.voice.name) (\(state.voice.configuration.language ?? state.voice.configuration.espeakVoice)) cannot read these letters"))])
        }
        // A sentence that comes while the engine was idle is one somebody waits for: its first piece is
        // cut short. One that follows right behind another plays after it: it goes whole (bounded).
        let waiting = finished.withLock { last in last.map { ContinuousClock.now - $0 > .milliseconds(50) } ?? true }
        let pieces = PiperPieces.pieces(text, limits: waiting ? .eager : .relaxed)
        defer { finished.withLock { $0 = .now } }
        for (n, piece) in pieces.enumerated() {
            try Task.checkCancellation()
            guard let (utterance, unknown) = try await worker.run({ try Self.begin(piece, state) }) else { continue }
            if !unknown.isEmpty {
                note(.ttsSkipped, [("text", .string(String(String.UnicodeScalarView(unknown)))),
                                   ("reason", .string("phonemes the voice \(state.voice.name) has no id for"))])
            }
            // A streaming voice gives the piece's audio slice by slice, the first after a fraction of the
            // piece's synthesis; each goes out as soon as it is made.
            while let floats = try await worker.run({ try state.voice.next(utterance) }) {
                try Task.checkCancellation()
                if !floats.isEmpty { try await deliver(AudioBuffer(format: format, samples: state.voice.samples(floats))) }
            }
            if n + 1 == pieces.count {
                try await deliver(AudioBuffer(format: format, samples: [Int16](repeating: 0, count: format.sampleRate * Self.sentenceSilenceMs / 1000)))
            }
        }
    }

    /// Starts one piece: phonemes, ids, and the voice's first run over them; nil when the piece has
    /// nothing to say. Blocking.
    static func begin(_ piece: String, _ state: Loaded) throws -> (PiperUtterance, unknown: [Unicode.Scalar])? {
        let c = state.voice.configuration
        let phonemes = try PiperPhonemizer.phonemes(piece, voice: c.espeakVoice)
        guard phonemes.contains(where: { !$0.isWhitespace && !$0.isPunctuation }) else { return nil }
        let (ids, unknown) = c.ids(for: phonemes)
        return (try state.voice.begin(ids: ids, scales: state.scales, speaker: state.speaker), unknown)
    }

    func stop() { worker.shutdown() }

    func takeNotices() -> [SynthesisNotice] {
        notices.withLock { n in
            defer { n = [] }
            return n
        }
    }

    private func note(_ name: EventName, _ fields: [(String, EventValue)]) {
        notices.withLock { $0.append(SynthesisNotice(name: name, fields: fields)) }
    }
}
