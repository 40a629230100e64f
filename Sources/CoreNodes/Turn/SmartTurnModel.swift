import Foundation
import PipelineCore

/// Where the Smart Turn model is: `model` when given, else `$VOICEPIPE_SMART_TURN_MODEL`, else
/// `share/smart-turn/smart-turn-v3.2-cpu.onnx` under the project's `.deps/onnx` (what
/// `scripts/install-smart-turn.sh` puts there).
enum SmartTurnFiles {
    static let modelRelative = "share/smart-turn/smart-turn-v3.2-cpu.onnx"

    static func model(_ explicit: String?, _ variables: [String: String]) -> String? {
        if let explicit { return explicit }
        if let env = variables["VOICEPIPE_SMART_TURN_MODEL"], !env.isEmpty { return env }
        return SileroFiles.prefixes.map { $0 + "/" + modelRelative }.first { FileManager.default.fileExists(atPath: $0) }
    }

    static var modelSearch: String {
        (["$VOICEPIPE_SMART_TURN_MODEL"] + SileroFiles.prefixes.map { $0 + "/" + modelRelative }).joined(separator: ", ")
    }
}

/// Smart Turn v3 (pipecat-ai's end-of-turn model, a Whisper-encoder classifier, ONNX): given the
/// last 8 s of a turn at 16 kHz (padded with silence at the start when shorter), the probability
/// that the speaker has finished. Features are Whisper's 80-bin log-mel (``WhisperLogMel``).
///
/// Not thread-safe: one model belongs to one node. One decision costs about 40–80 ms of one core.
final class SmartTurnModel {
    static let rate = 16000
    static let window = 8 * 16000
    private let session: OnnxSession
    private let features = WhisperLogMel(mels: 80, samples: SmartTurnModel.window)

    init(modelPath: String, variables: [String: String] = [:]) throws {
        session = try OnnxSession(modelPath: modelPath, input: "input_features", output: "logits", what: "smart-turn", variables: variables)
    }

    /// The probability (0...1) that the turn in `audio` (16 kHz mono, the turn's last samples) is complete.
    func probability(_ audio: ArraySlice<Int16>) throws -> Double {
        var x = [Float](repeating: 0, count: Self.window)
        let n = min(audio.count, Self.window)
        let tail = audio.suffix(n)
        var i = Self.window - n
        for v in tail { x[i] = Float(v) / 32768; i += 1 }
        var input = features.features(x)
        let out = try session.run(&input, shape: [1, 80, Int64(features.frames)], count: 1)
        return Double(min(max(out[0], 0), 1))
    }
}
