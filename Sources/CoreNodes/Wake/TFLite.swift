import Foundation
import PipelineCore

/// Where the wake word files are: TensorFlow Lite's C library and openWakeWord's models.
///
/// Looked up in this order: `$VOICEPIPE_TFLITE` (the library file) and `$VOICEPIPE_WAKE_MODELS` (the
/// models folder), then `.deps/wake` (what `scripts/install-wake.sh` installs from the
/// `pyopen-wakeword` wheel) in the working directory and above the running executable.
enum WakeFiles {
    static let libraryName = "libtensorflowlite_c.so"

    static var prefixes: [String] { ProjectDependencies.prefixes("wake") }

    static func library(_ variables: [String: String]) -> String {
        if let env = variables["VOICEPIPE_TFLITE"], !env.isEmpty { return env }
        return prefixes.map { $0 + "/lib/" + libraryName }.first { FileManager.default.fileExists(atPath: $0) } ?? libraryName
    }

    /// The models folder: `explicit` when given, else the first one found.
    static func models(_ explicit: String?, _ variables: [String: String]) -> String? {
        if let explicit { return explicit }
        if let env = variables["VOICEPIPE_WAKE_MODELS"], !env.isEmpty { return env }
        return prefixes.map { $0 + "/models" }.first { FileManager.default.fileExists(atPath: $0 + "/melspectrogram.tflite") }
    }

    static var modelSearch: String {
        (["$VOICEPIPE_WAKE_MODELS"] + prefixes.map { $0 + "/models" }).joined(separator: ", ")
    }
}

/// TensorFlow Lite's C API, loaded with `dlopen` on first use (nothing links against it at build time).
struct TFLiteAPI: @unchecked Sendable {
    // Function pointers from the library: immutable after loading, process-wide, never unloaded.
    typealias ModelCreate = @convention(c) (UnsafePointer<CChar>) -> OpaquePointer?
    typealias InterpreterCreate = @convention(c) (OpaquePointer?, OpaquePointer?) -> OpaquePointer?
    typealias Status = @convention(c) (OpaquePointer?) -> Int32
    typealias GetTensor = @convention(c) (OpaquePointer?, Int32) -> OpaquePointer?
    typealias Resize = @convention(c) (OpaquePointer?, Int32, UnsafePointer<Int32>, Int32) -> Int32
    typealias Copy = @convention(c) (OpaquePointer?, UnsafeRawPointer?, Int) -> Int32
    typealias CopyOut = @convention(c) (OpaquePointer?, UnsafeMutableRawPointer?, Int) -> Int32
    typealias ByteSize = @convention(c) (OpaquePointer?) -> Int
    typealias NumDims = @convention(c) (OpaquePointer?) -> Int32
    typealias Dim = @convention(c) (OpaquePointer?, Int32) -> Int32
    typealias Delete = @convention(c) (OpaquePointer?) -> Void
    typealias TensorType = @convention(c) (OpaquePointer?) -> Int32
    /// `TfLiteTensorQuantizationParams` returns `{ float scale; int32_t zero_point; }` by value: eight
    /// bytes that the x86-64 and AArch64 C calling conventions both return in one general register, so
    /// it is read as a 64-bit integer (scale in the low half, zero point in the high half).
    typealias Quantization = @convention(c) (OpaquePointer?) -> UInt64

    let modelCreateFromFile: ModelCreate
    let interpreterCreate: InterpreterCreate
    let allocateTensors: Status
    let invoke: Status
    let inputTensor: GetTensor
    let outputTensor: GetTensor
    let resizeInput: Resize
    let copyFrom: Copy
    let copyTo: CopyOut
    let byteSize: ByteSize
    let numDims: NumDims
    let dim: Dim
    let interpreterDelete: Delete
    let modelDelete: Delete
    let tensorType: TensorType
    let quantization: Quantization

    private static let loaded = LockedValue<TFLiteAPI?>(nil)

    /// The API, loading the library on first use.
    static func shared(_ variables: [String: String]) throws -> TFLiteAPI {
        try loaded.withLock { (state: inout TFLiteAPI?) throws -> TFLiteAPI in
            if let api = state { return api }
            let path = WakeFiles.library(variables)
            guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
                let why = dlerror().map { String(cString: $0) } ?? "dlopen failed"
                throw NodeError(.tfliteMissing, "wake words need TensorFlow Lite's C library, which could not be loaded from \(path) (\(why)); run scripts/install-wake.sh, or set VOICEPIPE_TFLITE to a libtensorflowlite_c.so")
            }
            func sym<T>(_ name: String, _: T.Type) throws -> T {
                guard let p = dlsym(handle, name) else {
                    throw NodeError(.tfliteMissing, "\(path) has no \(name): not a TensorFlow Lite C library")
                }
                return unsafeBitCast(p, to: T.self)
            }
            let api = TFLiteAPI(
                modelCreateFromFile: try sym("TfLiteModelCreateFromFile", ModelCreate.self),
                interpreterCreate: try sym("TfLiteInterpreterCreate", InterpreterCreate.self),
                allocateTensors: try sym("TfLiteInterpreterAllocateTensors", Status.self),
                invoke: try sym("TfLiteInterpreterInvoke", Status.self),
                inputTensor: try sym("TfLiteInterpreterGetInputTensor", GetTensor.self),
                outputTensor: try sym("TfLiteInterpreterGetOutputTensor", GetTensor.self),
                resizeInput: try sym("TfLiteInterpreterResizeInputTensor", Resize.self),
                copyFrom: try sym("TfLiteTensorCopyFromBuffer", Copy.self),
                copyTo: try sym("TfLiteTensorCopyToBuffer", CopyOut.self),
                byteSize: try sym("TfLiteTensorByteSize", ByteSize.self),
                numDims: try sym("TfLiteTensorNumDims", NumDims.self),
                dim: try sym("TfLiteTensorDim", Dim.self),
                interpreterDelete: try sym("TfLiteInterpreterDelete", Delete.self),
                modelDelete: try sym("TfLiteModelDelete", Delete.self),
                tensorType: try sym("TfLiteTensorType", TensorType.self),
                quantization: try sym("TfLiteTensorQuantizationParams", Quantization.self))
            state = api
            return api
        }
    }
}

/// One TensorFlow Lite model with one input and one output: float (``run(_:)``) or quantized to 8 bits
/// (``runQuantized(_:)``).
///
/// Not thread-safe: one interpreter belongs to one node.
final class TFLiteModel {
    private let api: TFLiteAPI
    private let model: OpaquePointer
    private let interpreter: OpaquePointer
    private let input: OpaquePointer
    private let output: OpaquePointer

    /// Loads `path`, resizing the input to `shape` when given.
    init(path: String, inputShape shape: [Int32]? = nil, variables: [String: String] = [:]) throws {
        let api = try TFLiteAPI.shared(variables)
        self.api = api
        guard FileManager.default.isReadableFile(atPath: path), let m = api.modelCreateFromFile(path) else {
            throw NodeError(.wakeModel, "cannot load the wake word model \(path)")
        }
        guard let i = api.interpreterCreate(m, nil) else {
            api.modelDelete(m)
            throw NodeError(.wakeModel, "cannot create an interpreter for \(path)")
        }
        model = m
        interpreter = i
        if let shape {
            _ = shape.withUnsafeBufferPointer { api.resizeInput(i, 0, $0.baseAddress!, Int32(shape.count)) }
        }
        guard api.allocateTensors(i) == 0, let inT = api.inputTensor(i, 0), let outT = api.outputTensor(i, 0) else {
            api.interpreterDelete(i); api.modelDelete(m)
            throw NodeError(.wakeModel, "cannot allocate the tensors of \(path)")
        }
        input = inT
        output = outT
    }

    deinit {
        api.interpreterDelete(interpreter)
        api.modelDelete(model)
    }

    /// The input tensor's dimensions.
    var inputShape: [Int] { (0..<api.numDims(input)).map { Int(api.dim(input, $0)) } }

    /// TensorFlow Lite's element types that ``runQuantized(_:)`` handles.
    enum ElementType: Int32 { case float32 = 1, uint8 = 3, int8 = 9 }

    /// An 8-bit tensor's mapping to real values: real = scale · (q − zeroPoint).
    struct Quantization: Equatable {
        var scale: Float
        var zeroPoint: Int32
    }

    private func quantization(_ tensor: OpaquePointer) -> Quantization {
        let raw = api.quantization(tensor)
        return Quantization(scale: Float(bitPattern: UInt32(truncatingIfNeeded: raw)), zeroPoint: Int32(truncatingIfNeeded: raw >> 32))
    }

    var inputType: ElementType? { ElementType(rawValue: api.tensorType(input)) }
    var outputType: ElementType? { ElementType(rawValue: api.tensorType(output)) }
    var inputQuantization: Quantization { quantization(input) }
    var outputQuantization: Quantization { quantization(output) }

    /// Runs a model with an 8-bit input and output on real `values`: each is quantized with the input's
    /// scale and zero point (rounded, saturated to the type), and the output is mapped back.
    func runQuantized(_ values: [Float]) throws -> [Float] {
        let q = inputQuantization
        guard q.scale > 0, let inType = inputType, let outType = outputType, inType != .float32, outType != .float32 else {
            throw NodeError(.wakeModel, "the model is not quantized to 8 bits")
        }
        let (low, high): (Double, Double) = inType == .int8 ? (-128, 127) : (0, 255)
        let bytes = values.map { v -> UInt8 in
            let x = min(max((Double(v) / Double(q.scale) + Double(q.zeroPoint)).rounded(.toNearestOrEven), low), high)
            return inType == .int8 ? UInt8(bitPattern: Int8(x)) : UInt8(x)
        }
        let status = bytes.withUnsafeBytes { api.copyFrom(input, $0.baseAddress, $0.count) }
        guard status == 0, api.invoke(interpreter) == 0 else { throw NodeError(.wakeModel, "TensorFlow Lite failed to run a model") }
        var out = [UInt8](repeating: 0, count: api.byteSize(output))
        _ = out.withUnsafeMutableBytes { api.copyTo(output, $0.baseAddress, $0.count) }
        let o = outputQuantization
        return out.map { b in o.scale * (Float(outType == .int8 ? Int32(Int8(bitPattern: b)) : Int32(b)) - Float(o.zeroPoint)) }
    }

    /// Runs the model on `values`; returns the whole output.
    func run(_ values: [Float]) throws -> [Float] {
        let status = values.withUnsafeBytes { api.copyFrom(input, $0.baseAddress, $0.count) }
        guard status == 0, api.invoke(interpreter) == 0 else { throw NodeError(.wakeModel, "TensorFlow Lite failed to run a model") }
        var out = [Float](repeating: 0, count: api.byteSize(output) / 4)
        _ = out.withUnsafeMutableBytes { api.copyTo(output, $0.baseAddress, $0.count) }
        return out
    }
}
