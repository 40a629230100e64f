import COnnxRuntime
import Foundation
import PipelineCore

/// One ONNX model on the project's ONNX Runtime (loaded at run time, see ``OnnxRuntime``), run on one
/// thread: the session set-up, tensors over caller-owned memory, and runs with named inputs and outputs.
/// The Silero VAD (three inputs, two outputs, state carried between runs) and Smart Turn (one float
/// input, one output: ``run(_:shape:count:)``) both run on it.
///
/// Not thread-safe: one session belongs to one node (or to one owner that runs it under a lock, as
/// the `tts` node's Piper voices do).
package final class OnnxSession {
    private let api: UnsafePointer<OrtApi>
    private var env: OpaquePointer?
    private var options: OpaquePointer?
    private var session: OpaquePointer?
    private var memory: OpaquePointer?
    /// The names as C strings, made once (freed at deinit) and handed to every run as they are.
    private let inputNames: [UnsafePointer<CChar>?]
    private let outputNames: [UnsafePointer<CChar>?]

    /// What a model that cannot be had is reported as: the codes, and a hint on what to do.
    package struct Problems {
        package var missing: NodeErrorCode = .modelMissing
        package var invalid: NodeErrorCode = .modelLoad
        package var hint = ""
        package init(missing: NodeErrorCode = .modelMissing, invalid: NodeErrorCode = .modelLoad, hint: String = "") {
            self.missing = missing
            self.invalid = invalid
            self.hint = hint
        }
    }

    /// Loads `modelPath` with the named inputs and outputs; `what` names the model in errors. A run uses
    /// up to `threads` threads.
    package init(modelPath: String, inputs: [String], outputs: [String], what: String, variables: [String: String],
                 problems: Problems = Problems(), threads: Int = 1) throws {
        api = try OnnxRuntime.api(variables)
        inputNames = inputs.map { UnsafePointer(strdup($0)) }
        outputNames = outputs.map { UnsafePointer(strdup($0)) }
        guard FileManager.default.isReadableFile(atPath: modelPath) else {
            throw NodeError(problems.missing, "\(what) model \(modelPath) not found or not readable" + problems.hint)
        }
        do {
            try check(api.pointee.CreateEnv(Int32(ORT_LOGGING_LEVEL_ERROR), "voicepipe", &env))
            try check(api.pointee.CreateSessionOptions(&options))
            try check(api.pointee.SetIntraOpNumThreads(options, Int32(max(1, threads))))
            try check(api.pointee.SetInterOpNumThreads(options, 1))
            try check(api.pointee.SetSessionGraphOptimizationLevel(options, Int32(ORT_ENABLE_ALL)))
            try check(api.pointee.CreateSession(env, modelPath, options, &session))
            try check(api.pointee.CreateCpuMemoryInfo(Int32(OrtArenaAllocator), Int32(OrtMemTypeDefault), &memory))
        } catch let e as NodeError {
            release()
            throw NodeError(problems.invalid, "cannot load the \(what) model \(modelPath): \(e.message)")
        }
    }

    /// A model with one float input and one float output.
    convenience init(modelPath: String, input: String, output: String, what: String, variables: [String: String]) throws {
        try self.init(modelPath: modelPath, inputs: [input], outputs: [output], what: what, variables: variables)
    }

    deinit {
        release()
        (inputNames + outputNames).forEach { free(UnsafeMutablePointer(mutating: $0)) }
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

    /// A tensor over `bytes` (which must outlive the run that takes it), of `shape` (empty: a scalar).
    func tensor(_ bytes: UnsafeMutableRawBufferPointer, shape: [Int64], type: Int32) throws -> OpaquePointer? {
        var shape = shape
        var value: OpaquePointer?
        try shape.withUnsafeMutableBufferPointer { s in
            try check(api.pointee.CreateTensorWithDataAsOrtValue(memory, bytes.baseAddress, bytes.count,
                                                                  s.count == 0 ? nil : s.baseAddress, s.count, type, &value))
        }
        return value
    }

    /// Tensors for a run, in input order (all made, or none: those made are released on a failure).
    package func tensors(_ specs: [(bytes: UnsafeMutableRawBufferPointer, shape: [Int64], type: Int32)]) throws -> [OpaquePointer?] {
        var values: [OpaquePointer?] = []
        do {
            for spec in specs { values.append(try tensor(spec.bytes, shape: spec.shape, type: spec.type)) }
        } catch {
            for v in values { if let v { api.pointee.ReleaseValue(v) } }
            throw error
        }
        return values
    }

    /// Runs the model on `inputs` (one tensor per input name, in order, released here) and lets `body`
    /// read each output's data while the outputs live.
    func run<R>(_ inputs: [OpaquePointer?], _ body: ([UnsafeMutableRawPointer]) throws -> R) throws -> R {
        try runCounting(inputs) { outputs in try body(outputs.map(\.data)) }
    }

    /// Runs the model on `inputs` (one tensor per input name, in order, released here) and lets `body`
    /// read each output's data and its number of elements while the outputs live: for models whose
    /// outputs' sizes depend on the input (speech synthesis).
    package func runCounting<R>(_ inputs: [OpaquePointer?], _ body: ([(data: UnsafeMutableRawPointer, count: Int)]) throws -> R) throws -> R {
        var outputs = [OpaquePointer?](repeating: nil, count: outputNames.count)
        defer { for v in inputs + outputs { if let v { api.pointee.ReleaseValue(v) } } }
        guard inputs.count == inputNames.count else {
            throw NodeError(.onnxruntime, "\(inputs.count) input tensors for a model with \(inputNames.count) inputs")
        }
        try check(api.pointee.Run(session, nil, inputNames, inputs, inputs.count, outputNames, outputNames.count, &outputs))
        var data: [(data: UnsafeMutableRawPointer, count: Int)] = []
        for output in outputs {
            var p: UnsafeMutableRawPointer?
            try check(api.pointee.GetTensorMutableData(output, &p))
            guard let p else { throw NodeError(.onnxruntime, "the model returned no output") }
            var info: OpaquePointer?
            try check(api.pointee.GetTensorTypeAndShape(output, &info))
            defer { if let info { api.pointee.ReleaseTensorTypeAndShapeInfo(info) } }
            var count = 0
            try check(api.pointee.GetTensorShapeElementCount(info, &count))
            data.append((p, count))
        }
        return try body(data)
    }

    /// Runs the model on `inputs` (released here) and returns every output as floats with its shape: for
    /// models whose outputs feed another model (the halves of a streamed Piper voice). Float outputs only.
    package func runFloats(_ inputs: [OpaquePointer?]) throws -> [(values: [Float], shape: [Int64])] {
        var outputs = [OpaquePointer?](repeating: nil, count: outputNames.count)
        defer { for v in inputs + outputs { if let v { api.pointee.ReleaseValue(v) } } }
        guard inputs.count == inputNames.count else {
            throw NodeError(.onnxruntime, "\(inputs.count) input tensors for a model with \(inputNames.count) inputs")
        }
        try check(api.pointee.Run(session, nil, inputNames, inputs, inputs.count, outputNames, outputNames.count, &outputs))
        var result: [(values: [Float], shape: [Int64])] = []
        for output in outputs {
            var info: OpaquePointer?
            try check(api.pointee.GetTensorTypeAndShape(output, &info))
            defer { if let info { api.pointee.ReleaseTensorTypeAndShapeInfo(info) } }
            var type: Int32 = 0
            try check(api.pointee.GetTensorElementType(info, &type))
            var rank = 0
            try check(api.pointee.GetDimensionsCount(info, &rank))
            var shape = [Int64](repeating: 0, count: rank)
            try check(api.pointee.GetDimensions(info, &shape, rank))
            var count = 0
            try check(api.pointee.GetTensorShapeElementCount(info, &count))
            var p: UnsafeMutableRawPointer?
            try check(api.pointee.GetTensorMutableData(output, &p))
            guard let p else { throw NodeError(.onnxruntime, "the model returned no output") }
            if type == Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT) {
                result.append((Array(UnsafeBufferPointer(start: p.assumingMemoryBound(to: Float.self), count: count)), shape))
            } else {
                throw NodeError(.onnxruntime, "an output of element type \(type), not float")
            }
        }
        return result
    }

    /// Runs a one-input model on `input` of `shape`; returns the first `count` values of its output.
    func run(_ input: inout [Float], shape: [Int64], count: Int) throws -> [Float] {
        try input.withUnsafeMutableBytes { i in
            let value = try tensor(i, shape: shape, type: Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT))
            return try run([value]) { out in
                let f = out[0].assumingMemoryBound(to: Float.self)
                return (0..<count).map { f[$0] }
            }
        }
    }
}
