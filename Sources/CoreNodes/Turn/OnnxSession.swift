import COnnxRuntime
import Foundation
import PipelineCore

/// One ONNX model on the project's ONNX Runtime (loaded at run time, see ``OnnxRuntime``) with one
/// float input and one float output, run on one thread.
///
/// Not thread-safe: one session belongs to one node.
final class OnnxSession {
    private let api: UnsafePointer<OrtApi>
    private var env: OpaquePointer?
    private var options: OpaquePointer?
    private var session: OpaquePointer?
    private var memory: OpaquePointer?
    private let inputName: UnsafeMutablePointer<CChar>
    private let outputName: UnsafeMutablePointer<CChar>

    /// Loads `modelPath`; `what` names the model in errors.
    init(modelPath: String, input: String, output: String, what: String, variables: [String: String]) throws {
        api = try OnnxRuntime.api(variables)
        inputName = strdup(input)
        outputName = strdup(output)
        guard FileManager.default.isReadableFile(atPath: modelPath) else {
            free(inputName); free(outputName)
            throw NodeError(.modelMissing, "\(what) model \(modelPath) not found or not readable")
        }
        do {
            try check(api.pointee.CreateEnv(Int32(ORT_LOGGING_LEVEL_ERROR), "voicepipe", &env))
            try check(api.pointee.CreateSessionOptions(&options))
            try check(api.pointee.SetIntraOpNumThreads(options, 1))
            try check(api.pointee.SetInterOpNumThreads(options, 1))
            try check(api.pointee.SetSessionGraphOptimizationLevel(options, Int32(ORT_ENABLE_ALL)))
            try check(api.pointee.CreateSession(env, modelPath, options, &session))
            try check(api.pointee.CreateCpuMemoryInfo(Int32(OrtArenaAllocator), Int32(OrtMemTypeDefault), &memory))
        } catch let e as NodeError {
            release()
            throw NodeError(.modelLoad, "cannot load the \(what) model \(modelPath): \(e.message)")
        }
    }

    deinit {
        release()
        free(inputName)
        free(outputName)
    }

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

    /// Runs the model on `input` of `shape`; returns the first `count` values of the output.
    func run(_ input: inout [Float], shape: [Int64], count: Int) throws -> [Float] {
        var shape = shape
        var value: OpaquePointer?
        var output: OpaquePointer?
        defer {
            if let value { api.pointee.ReleaseValue(value) }
            if let output { api.pointee.ReleaseValue(output) }
        }
        let api = self.api, memory = self.memory, session = self.session
        let inName: UnsafePointer<CChar>? = UnsafePointer(inputName)
        let outName: UnsafePointer<CChar>? = UnsafePointer(outputName)
        try input.withUnsafeMutableBytes { i in
            try check(api.pointee.CreateTensorWithDataAsOrtValue(memory, i.baseAddress, i.count, &shape, shape.count,
                                                                  Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT), &value))
            var inNames = [inName], outNames = [outName]
            let values: [OpaquePointer?] = [value]
            try check(api.pointee.Run(session, nil, &inNames, values, 1, &outNames, 1, &output))
        }
        var p: UnsafeMutableRawPointer?
        try check(api.pointee.GetTensorMutableData(output, &p))
        guard let p else { throw NodeError(.onnxruntime, "the model returned no output") }
        let f = p.assumingMemoryBound(to: Float.self)
        return (0..<count).map { f[$0] }
    }
}
