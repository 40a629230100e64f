import COnnxRuntime
import Foundation
import PipelineCore
import Synchronization

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
    private static let loaded = Mutex<Table?>(nil)

    /// The API table (version 1), loading the library on first use.
    static func api(_ variables: [String: String]) throws -> UnsafePointer<OrtApi> {
        try loaded.withLock { (state: inout Table?) throws -> Table in
            if let table = state { return table }
            let path = SileroFiles.library(variables)
            var message = [CChar](repeating: 0, count: 512)
            guard let base = vp_ort_load(path, &message, message.count), let get = base.pointee.GetApi, let api = get(1) else {
                let why = String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
                throw NodeError(.onnxruntimeMissing,
                                "the silero VAD needs ONNX Runtime, which could not be loaded from \(path) (\(why)); run scripts/install-onnx.sh, or set VOICEPIPE_ONNXRUNTIME to a libonnxruntime.so")
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

    private let api: UnsafePointer<OrtApi>
    private var env: OpaquePointer?
    private var options: OpaquePointer?
    private var session: OpaquePointer?
    private var memory: OpaquePointer?
    private let threshold: Float
    private var state = [Float](repeating: 0, count: 2 * 128)
    private var input = [Float](repeating: 0, count: SileroDetector.context + SileroDetector.window)
    private var inSpeech = false
    private var blocks = AnalysisBlocks(blockSamples: SileroDetector.window)
    /// The last window's speech probability.
    public private(set) var lastProbability: Float = 0

    /// Loads the model (throws naming the missing library or model file).
    public init(modelPath: String, threshold: Double = 0.5, variables: [String: String] = [:]) throws {
        api = try OnnxRuntime.api(variables)
        self.threshold = Float(threshold)
        guard FileManager.default.isReadableFile(atPath: modelPath) else {
            throw NodeError(.vadModelMissing, "silero VAD model \(modelPath) not found or not readable; run scripts/install-onnx.sh or set model")
        }
        do {
            try check(api.pointee.CreateEnv(Int32(ORT_LOGGING_LEVEL_ERROR), "voicepipe-vad", &env))
            try check(api.pointee.CreateSessionOptions(&options))
            try check(api.pointee.SetIntraOpNumThreads(options, 1))
            try check(api.pointee.SetInterOpNumThreads(options, 1))
            try check(api.pointee.CreateSession(env, modelPath, options, &session))
            try check(api.pointee.CreateCpuMemoryInfo(Int32(OrtArenaAllocator), Int32(OrtMemTypeDefault), &memory))
        } catch let e as NodeError {
            release()
            throw NodeError(.vadModel, "cannot load the silero VAD model \(modelPath): \(e.message)")
        }
    }

    deinit { release() }

    private func release() {
        if let memory { api.pointee.ReleaseMemoryInfo(memory) }
        if let session { api.pointee.ReleaseSession(session) }
        if let options { api.pointee.ReleaseSessionOptions(options) }
        if let env { api.pointee.ReleaseEnv(env) }
        memory = nil; session = nil; options = nil; env = nil
    }

    private func check(_ status: OpaquePointer?) throws {
        guard let status else { return }
        let message = api.pointee.GetErrorMessage(status).map { String(cString: $0) } ?? "unknown error"
        api.pointee.ReleaseStatus(status)
        throw NodeError(.onnxruntime, message)
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
        var inputShape: [Int64] = [1, Int64(Self.context + Self.window)]
        var stateShape: [Int64] = [2, 1, 128]
        var sampleRate = Int64(Self.rate)
        var values: [OpaquePointer?] = [nil, nil, nil]
        var outputs: [OpaquePointer?] = [nil, nil]
        defer { for v in values + outputs { if let v { api.pointee.ReleaseValue(v) } } }
        let float = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT), int64 = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64)
        let api = self.api, memory = self.memory, session = self.session
        try input.withUnsafeMutableBytes { i in
            try check(api.pointee.CreateTensorWithDataAsOrtValue(memory, i.baseAddress, i.count, &inputShape, 2, float, &values[0]))
            try state.withUnsafeMutableBytes { s in
                try check(api.pointee.CreateTensorWithDataAsOrtValue(memory, s.baseAddress, s.count, &stateShape, 3, float, &values[1]))
                try withUnsafeMutableBytes(of: &sampleRate) { r in
                    try check(api.pointee.CreateTensorWithDataAsOrtValue(memory, r.baseAddress, r.count, nil, 0, int64, &values[2]))
                    try Self.names.withInputs { inNames in
                        try Self.names.withOutputs { outNames in
                            let ins = values
                            try check(api.pointee.Run(session, nil, inNames, ins, 3, outNames, 2, &outputs))
                        }
                    }
                }
            }
        }
        var p: UnsafeMutableRawPointer?, s: UnsafeMutableRawPointer?
        try check(api.pointee.GetTensorMutableData(outputs[0], &p))
        try check(api.pointee.GetTensorMutableData(outputs[1], &s))
        guard let p, let s else { throw NodeError(.onnxruntime, "the silero model returned no output") }
        let probability = p.assumingMemoryBound(to: Float.self).pointee
        let next = s.assumingMemoryBound(to: Float.self)
        for k in 0..<state.count { state[k] = next[k] }
        // The next window's context: the last 64 samples of this one.
        for k in 0..<Self.context { input[k] = input[Self.window + k] }
        return probability
    }

    /// The model's tensor names as C strings, made once.
    private static let names = TensorNames()

    /// Immutable after creation and never freed (one per process).
    final class TensorNames: @unchecked Sendable {
        private let inputs: [UnsafeMutablePointer<CChar>] = ["input", "state", "sr"].map { (name: String) in strdup(name)! }
        private let outputs: [UnsafeMutablePointer<CChar>] = ["output", "stateN"].map { (name: String) in strdup(name)! }
        func withInputs<R>(_ body: (UnsafePointer<UnsafePointer<CChar>?>) throws -> R) rethrows -> R {
            let p: [UnsafePointer<CChar>?] = inputs.map { UnsafePointer($0) }
            return try p.withUnsafeBufferPointer { try body($0.baseAddress!) }
        }
        func withOutputs<R>(_ body: (UnsafePointer<UnsafePointer<CChar>?>) throws -> R) rethrows -> R {
            let p: [UnsafePointer<CChar>?] = outputs.map { UnsafePointer($0) }
            return try p.withUnsafeBufferPointer { try body($0.baseAddress!) }
        }
    }
}
