import COnnxRuntime
import Foundation
import PipelineCore

/// Where the Silero VAD's files are: ONNX Runtime's shared library and the model.
///
/// Looked up in this order: the environment (`VOICEPIPE_ONNXRUNTIME` = the library file,
/// `VOICEPIPE_SILERO_MODEL` = the model), then `.deps/onnx` (what `scripts/install-onnx.sh`
/// installs) in the working directory and above the running executable (a `.build/<config>`
/// folder of the project), then — for the library — the dynamic loader's own search path.
enum SileroFiles {
    static let libraryName = "libonnxruntime.so.1"
    static let modelRelative = "share/silero-vad/silero_vad.onnx"

    /// Project-local prefixes to look in.
    static var prefixes: [String] { ProjectDependencies.prefixes("onnx") }

    /// The library file to load, or the bare name for the dynamic loader.
    static func library(_ variables: [String: String]) -> String {
        if let env = variables["VOICEPIPE_ONNXRUNTIME"], !env.isEmpty { return env }
        for p in prefixes where FileManager.default.fileExists(atPath: p + "/lib/" + libraryName) { return p + "/lib/" + libraryName }
        return libraryName
    }

    /// The model file: `explicit` when given, else the first one found; nil when there is none.
    static func model(_ explicit: String?, _ variables: [String: String]) -> String? {
        if let explicit { return explicit }
        if let env = variables["VOICEPIPE_SILERO_MODEL"], !env.isEmpty { return env }
        return prefixes.map { $0 + "/" + modelRelative }.first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Where a missing model was looked for.
    static var modelSearch: String {
        (["$VOICEPIPE_SILERO_MODEL"] + prefixes.map { $0 + "/" + modelRelative }).joined(separator: ", ")
    }
}

/// ONNX Runtime loaded once per process.
enum OnnxRuntime {
    /// The library's API table: immutable, process-wide, never freed.
    struct Table: @unchecked Sendable { let pointer: UnsafePointer<OrtApi> }
    private static let loaded = LockedValue<Table?>(nil)

    /// The API table (version 1), loading the library on first use.
    static func api(_ variables: [String: String]) throws -> UnsafePointer<OrtApi> {
        try loaded.withLock { (state: inout Table?) throws -> Table in
            if let table = state { return table }
            let path = SileroFiles.library(variables)
            var message = [CChar](repeating: 0, count: 512)
            guard let base = vp_ort_load(path, &message, message.count), let get = base.pointee.GetApi, let api = get(1) else {
                let why = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                throw NodeError(.onnxruntimeMissing,
                                "ONNX Runtime (for the silero VAD, smart-turn and piper voices) could not be loaded from \(path) (\(why)); run scripts/install-onnx.sh, or set VOICEPIPE_ONNXRUNTIME to a libonnxruntime.so")
            }
            let table = Table(pointer: api)
            state = table
            return table
        }.pointer
    }
}

/// Silero VAD (a small neural network, ONNX) as a block classifier with the same interface as
/// ``SpeechDetector``: 16 kHz mono windows of 512 samples (32 ms; the input is converted when
/// needed), each with the last 64 samples of the previous window in front, as the model expects;
/// the speech probability is compared with `threshold`, and once in speech with `threshold − 0.15`
/// (the model's own hysteresis), before ``VADStateMachine`` applies `start_ms`/`stop_ms`.
///
/// Not thread-safe: one detector belongs to one node. Inference runs on one thread and costs
/// about 0.2 ms per 32 ms window.
public final class SileroDetector {
    static let rate = 16000
    static let window = 512
    static let context = 64

    private let session: OnnxSession
    private let threshold: Float
    private var state = [Float](repeating: 0, count: 2 * 128)
    private var input = [Float](repeating: 0, count: SileroDetector.context + SileroDetector.window)
    private var inSpeech = false
    private var blocks = AnalysisBlocks(blockSamples: SileroDetector.window)
    /// The last window's speech probability.
    public private(set) var lastProbability: Float = 0

    /// Loads the model (throws naming the missing library or model file).
    public init(modelPath: String, threshold: Double = 0.5, variables: [String: String] = [:]) throws {
        self.threshold = Float(threshold)
        session = try OnnxSession(modelPath: modelPath, inputs: ["input", "state", "sr"], outputs: ["output", "stateN"],
                                  what: "silero VAD", variables: variables,
                                  problems: .init(missing: .vadModelMissing, invalid: .vadModel,
                                                  hint: "; run scripts/install-onnx.sh or set model"))
    }

    /// Feeds interleaved input audio whose first sample is input sample `position`; calls `decide`
    /// for each 32 ms window with its range in input samples.
    public func feed(_ samples: [Int16], format: AudioFormat, position: Int64,
                     decide: (_ speech: Bool, _ from: Int64, _ to: Int64) throws -> Void) throws {
        try blocks.feed(samples, format: format, position: position) { analysis, from, to in
            for i in 0..<Self.window { input[Self.context + i] = Float(analysis[analysis.startIndex + i]) / 32768 }
            let p = try probability()
            lastProbability = p
            inSpeech = inSpeech ? p >= threshold - 0.15 : p >= threshold
            try decide(inSpeech, from, to)
        }
    }

    /// Runs the model on `input` (context + window); keeps the state and the next context.
    private func probability() throws -> Float {
        var sampleRate = Int64(Self.rate)
        let float = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT), int64 = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
        let session = self.session
        let probability: Float = try input.withUnsafeMutableBytes { i in
            try state.withUnsafeMutableBytes { s in
                try withUnsafeMutableBytes(of: &sampleRate) { r in
                    let values = try session.tensors([(i, [1, Int64(Self.context + Self.window)], float),
                                                      (s, [2, 1, 128], float), (r, [], int64)])
                    return try session.run(values) { out in
                        let next = out[1].assumingMemoryBound(to: Float.self)
                        for k in 0..<(2 * 128) { s.storeBytes(of: next[k], toByteOffset: k * 4, as: Float.self) }
                        return out[0].assumingMemoryBound(to: Float.self).pointee
                    }
                }
            }
        }
        // The next window's context: the last 64 samples of this one.
        for k in 0..<Self.context { input[k] = input[Self.window + k] }
        return probability
    }
}
