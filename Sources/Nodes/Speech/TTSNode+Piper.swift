import Foundation
import PipelineCore

extension TTSNode.Configuration {
    /// `piper`'s settings from the node's parameters.
    var piperSettings: PiperSynthesizer.Settings {
        PiperSynthesizer.Settings(voice: voice, speed: speed, noiseScale: noiseScale, noiseW: noiseW, speaker: speaker,
                                  threads: threads ?? 2, variables: environment)
    }

    /// What keeps the Piper voice from loading, read from its files (the model is not loaded).
    func piperProblems() -> [String] {
        PiperFiles.problem(voice, environment).map { [$0] } ?? []
    }
}

extension TTSNode {
    /// Emits what `synthesizer` has to tell (fallback, letters left out); a fallback also goes to the log.
    static func emitNotices(of synthesizer: any SpeechSynthesizer, context: NodeContext) async throws {
        guard let reporting = synthesizer as? any ReportingSynthesizer else { return }
        for notice in reporting.takeNotices() {
            if notice.name == .ttsFallback {
                let field = { (key: String) in notice.fields.first { $0.0 == key }?.1.stringValue ?? "" }
                context.logger.warning("tts: engine \(field("engine")) cannot start here (\(field("reason"))); using \(field("fallback")) instead")
            }
            try await context.emit(notice.name, notice.fields)
        }
    }
}

extension TTSNode.Configuration {
    /// What a speech service says about this node's voice: its name, languages and speakers.
    public struct VoiceDescription: Sendable {
        public var name: String
        public var languages: [String]
        public var speakers: [String]
        public var description: String
    }

    /// The voice this node speaks with (for a Piper voice, read from its configuration file; the
    /// fallback's when the voice is missing and a fallback is given).
    public func voiceDescription() -> VoiceDescription {
        if engine == .piper {
            let model = PiperFiles.model(voice, environment)
            if PiperFiles.problem(voice, environment) == nil, let c = try? PiperVoiceConfiguration(path: model + ".json") {
                let name = ((model as NSString).lastPathComponent as NSString).deletingPathExtension
                let speakers = c.speakerIDs.sorted { $0.value < $1.value }.map(\.key)
                return VoiceDescription(name: name, languages: [c.language ?? c.espeakVoice], speakers: speakers,
                                        description: "Piper voice \(name) (\(c.sampleRate) Hz)")
            }
            if let fallback {
                var other = self
                other.engine = fallback
                other.voice = nil
                other.fallback = nil
                return other.voiceDescription()
            }
        }
        let name: String
        switch engine {
        case .flite: name = voice ?? FliteSynthesizer.Voice.defaultVoice.rawValue
        case .espeakNG: name = voice ?? EspeakSynthesizer.defaultVoice
        default: name = voice ?? engine.rawValue
        }
        let language = engine == .espeakNG ? (voice ?? EspeakSynthesizer.defaultVoice) : "en"
        return VoiceDescription(name: name, languages: [language], speakers: [], description: "\(engine.rawValue) voice \(name)")
    }

    /// Loads what the engine can load ahead of the first text (a Piper voice, into the process's
    /// shared copy), so that the first answer does not wait for it. Errors are thrown (and a node
    /// that starts later reports them again, or falls back).
    public func preload() async throws {
        guard engine == .piper else { return }
        let settings = piperSettings
        if let problem = PiperFiles.problem(settings.voice, settings.variables) { throw NodeError(.voiceUnavailable, problem) }
        let model = PiperFiles.model(settings.voice, settings.variables)
        let worker = BlockingWorker(name: "piper-preload")
        defer { worker.shutdown() }
        _ = try await worker.run { try PiperVoice.shared(model: model, threads: settings.threads, variables: settings.variables) }
    }
}
