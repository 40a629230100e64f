import Foundation
import PipelineCore

/// The wake word engines `wake` can run.
enum WakeEngine: String, Sendable {
    case microWakeWord = "microwakeword"
    case openWakeWord = "openwakeword"
}

/// Which engine serves each wake word, and where its models are.
///
/// With `engine: auto` each word comes from the engine measured better for it, when that engine's
/// model is installed, else from the other. On `bench/wake-bench.py`'s 24 synthesized phrases per word
/// in 10 dB pink noise (BENCHMARKS.md, "Wake words"): `alexa` 24 with microWakeWord against 19 with
/// openWakeWord, `hey_mycroft` 16 against 0; `hey_jarvis` 20 with openWakeWord against 11, `okay_nabu`
/// 20 against 18. Other words go to microWakeWord first, which costs a fraction of the CPU.
enum WakeEngines {
    static let choices = ["auto", WakeEngine.microWakeWord.rawValue, WakeEngine.openWakeWord.rawValue]
    static let preference: [WakeEngine] = [.microWakeWord, .openWakeWord]
    /// Words measured better with an order other than ``preference``.
    static let measured: [String: [WakeEngine]] = [
        "hey_jarvis": [.openWakeWord, .microWakeWord],
        "okay_nabu": [.openWakeWord, .microWakeWord],
    ]

    /// The engines tried for `word`, in order.
    static func order(_ word: String, engine: String) -> [WakeEngine] {
        engine == "auto" ? measured[word] ?? preference : [WakeEngine(rawValue: engine)].compactMap { $0 }
    }

    /// The words of each engine (in the order given) and the folders their models come from.
    struct Plan: Equatable {
        var microWakeWord: [String] = []
        var microFolder: String?
        var openWakeWord: [String] = []
        var openWakeWordFolder: String?
    }

    /// microWakeWord's folder: `explicit` when given, else `$VOICEPIPE_MICRO_WAKE_MODELS`, else the
    /// first `micro` folder of the install prefixes that holds a model.
    static func microFolder(_ explicit: String?, _ variables: [String: String]) -> String? {
        if let explicit { return explicit }
        if let env = variables["VOICEPIPE_MICRO_WAKE_MODELS"], !env.isEmpty { return env }
        return WakeFiles.prefixes.map { $0 + "/micro" }.first { !MicroWakeWord.available($0).isEmpty }
    }

    static var microSearch: String {
        (["$VOICEPIPE_MICRO_WAKE_MODELS"] + WakeFiles.prefixes.map { $0 + "/micro" }).joined(separator: ", ")
    }

    /// Assigns each of `words` to an engine; throws naming the word and what is installed when a word
    /// has no model in the engine asked for (or in either, for `auto`).
    static func plan(words: [String], engine: String, models: String?, variables: [String: String]) throws -> Plan {
        let micro = microFolder(models, variables)
        let oww = WakeFiles.models(models, variables)
        func hasMicro(_ w: String) -> Bool { micro.map { MicroWakeWord.settings($0, w) != nil } ?? false }
        func hasOpen(_ w: String) -> Bool {
            oww.map { FileManager.default.fileExists(atPath: $0 + "/" + w + ".tflite") && FileManager.default.fileExists(atPath: $0 + "/melspectrogram.tflite") } ?? false
        }
        var plan = Plan(microFolder: micro, openWakeWordFolder: oww)
        for w in words {
            // A settings file that is there but unreadable is named, not taken for an absent model.
            if let micro { _ = try MicroWakeWord.readSettings(micro, w) }
            let order = order(w, engine: engine)
            switch order.first(where: { $0 == .microWakeWord ? hasMicro(w) : hasOpen(w) && MicroWakeWord.settings(oww ?? "", w) == nil }) {
            case .microWakeWord: plan.microWakeWord.append(w)
            case .openWakeWord: plan.openWakeWord.append(w)
            case nil: throw NodeError(.wakeModelMissing, missing(w, allowed: order, micro: micro, openWakeWord: oww))
            }
        }
        return plan
    }

    private static func missing(_ word: String, allowed: [WakeEngine], micro: String?, openWakeWord oww: String?) -> String {
        var looked: [String] = []
        if allowed.contains(.microWakeWord) {
            looked.append(micro.map { "microWakeWord in \($0) has \(list(MicroWakeWord.available($0)))" } ?? "no microWakeWord models found (looked in \(microSearch))")
        }
        if allowed.contains(.openWakeWord) {
            looked.append(oww.map { "openWakeWord in \($0) has \(list(OpenWakeWord.available($0)))" } ?? "no openWakeWord models found (looked in \(WakeFiles.modelSearch))")
        }
        return "no model for wake word \(word): " + looked.joined(separator: "; ") + "; run scripts/install-wake.sh or set models"
    }

    private static func list(_ names: [String]) -> String { names.isEmpty ? "none" : names.joined(separator: ", ") }
}

/// The engines a `wake` node runs, fed the same audio; reports the best word passing its threshold.
///
/// Not thread-safe: one detector belongs to one node.
final class WakeDetector {
    struct Detection: Equatable {
        var word: String
        var score: Double
        var engine: WakeEngine
    }

    private let micro: MicroWakeWord?
    private let microThresholds: [Double]
    private let openWakeWord: OpenWakeWord?
    private let openThreshold: Double
    private let denoiser: WakeDenoiser?

    /// `threshold` nil: each microWakeWord model's own cutoff, 0.5 for openWakeWord.
    init(plan: WakeEngines.Plan, threshold: Double?, hopFrames: Int, denoise: Bool, variables: [String: String]) throws {
        if let folder = plan.microFolder, !plan.microWakeWord.isEmpty {
            let m = try MicroWakeWord(folder: folder, words: plan.microWakeWord, variables: variables)
            micro = m
            microThresholds = m.words.map { threshold ?? $0.cutoff }
        } else {
            micro = nil
            microThresholds = []
        }
        if let folder = plan.openWakeWordFolder, !plan.openWakeWord.isEmpty {
            openWakeWord = try OpenWakeWord(folder: folder, words: plan.openWakeWord, hopFrames: hopFrames, variables: variables)
            // openWakeWord hears a noise-suppressed copy; the audio passed on is untouched.
            denoiser = denoise ? try WakeDenoiser() : nil
        } else {
            openWakeWord = nil
            denoiser = nil
        }
        openThreshold = threshold ?? 0.5
    }

    /// Feeds 16 kHz mono samples; the highest-scoring word that passed its threshold in them, if any.
    func feed(_ samples: [Int16]) throws -> Detection? {
        var best: Detection?
        if let micro {
            try micro.feed(samples) { scores in
                for (i, s) in scores.enumerated() where Double(s) > microThresholds[i] && Double(s) > (best?.score ?? 0) {
                    best = Detection(word: micro.words[i].name, score: Double(s), engine: .microWakeWord)
                }
            }
        }
        if let openWakeWord {
            try openWakeWord.feed(denoiser?.process(samples) ?? samples) { _, scores in
                for (i, s) in scores.enumerated() where Double(s) >= openThreshold && Double(s) > (best?.score ?? 0) {
                    best = Detection(word: openWakeWord.words[i].name, score: Double(s), engine: .openWakeWord)
                }
            }
        }
        return best
    }
}
