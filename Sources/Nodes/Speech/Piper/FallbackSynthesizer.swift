import PipelineCore

/// A synthesizer with a second engine behind it (`tts` `fallback`): when the first cannot start (its
/// voice or library is missing), the second speaks instead, and a `tts_fallback` notice says why.
final class FallbackSynthesizer: ReportingSynthesizer {
    let primary: any SpeechSynthesizer
    let primaryName: String
    let fallbackName: String
    let makeFallback: @Sendable () -> any SpeechSynthesizer
    private let active = LockedValue<(any SpeechSynthesizer)?>(nil)
    private let notices = LockedValue<[SynthesisNotice]>([])

    init(primary: any SpeechSynthesizer, primaryName: String, fallbackName: String,
         makeFallback: @escaping @Sendable () -> any SpeechSynthesizer) {
        self.primary = primary
        self.primaryName = primaryName
        self.fallbackName = fallbackName
        self.makeFallback = makeFallback
    }

    func start() async throws {
        do {
            try await primary.start()
            active.withLock { $0 = primary }
        } catch is CancellationError {
            throw CancellationError()
        } catch {
            primary.stop()
            let reason = (error as? NodeError)?.message ?? "\(error)"
            let fallback = makeFallback()
            active.withLock { $0 = fallback }
            notices.withLock {
                $0.append(SynthesisNotice(name: .ttsFallback, fields: [
                    ("engine", .string(primaryName)), ("fallback", .string(fallbackName)), ("reason", .string(reason)),
                ]))
            }
            try await fallback.start()
        }
    }

    /// The engine speaking: the first, or the fallback once the first could not start.
    var speaking: (any SpeechSynthesizer)? { active.withLock { $0 } }

    func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
        guard let engine = speaking else { throw NodeError(.synthesisFailed, "tts: no engine started") }
        try await engine.synthesize(sentence, deliver: deliver)
    }

    func stop() {
        if let engine = speaking { engine.stop() } else { primary.stop() }
    }

    func takeNotices() -> [SynthesisNotice] {
        var mine = notices.withLock { n in
            defer { n = [] }
            return n
        }
        if let reporting = speaking as? any ReportingSynthesizer { mine += reporting.takeNotices() }
        return mine
    }
}
