import Foundation
import PipelineCore

/// G.722 (64 kbit/s wideband, 16 kHz audio; RTP payload type 9) from spandsp, loaded with `dlopen` on first
/// use: nothing links against it at build time, and a route that never negotiates G.722 never loads it.
///
/// The library is `libspandsp.so.2` (Debian: libspandsp2); `VOICEPIPE_SPANDSP` names another file.
struct G722Library: @unchecked Sendable {
    // Function pointers into a library never unloaded: immutable after loading, process-wide.
    typealias Init = @convention(c) (OpaquePointer?, Int32, Int32) -> OpaquePointer?
    typealias Encode = @convention(c) (OpaquePointer?, UnsafeMutablePointer<UInt8>?, UnsafePointer<Int16>?, Int32) -> Int32
    typealias Decode = @convention(c) (OpaquePointer?, UnsafeMutablePointer<Int16>?, UnsafePointer<UInt8>?, Int32) -> Int32
    typealias Free = @convention(c) (OpaquePointer?) -> Int32

    let encodeInit: Init
    let encode: Encode
    let encodeFree: Free
    let decodeInit: Init
    let decode: Decode
    let decodeFree: Free

    struct Missing: Error, CustomStringConvertible {
        var description: String
    }

    private static let loaded = LockedValue<Result<G722Library, Missing>?>(nil)

    static func shared(environment: [String: String] = ProcessInfo.processInfo.environment) throws(Missing) -> G722Library {
        let r = loaded.withLock { state -> Result<G722Library, Missing> in
            if let s = state { return s }
            let r = load(path: environment["VOICEPIPE_SPANDSP"] ?? "libspandsp.so.2")
            state = r
            return r
        }
        return try r.get()
    }

    private static func load(path: String) -> Result<G722Library, Missing> {
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let why = dlerror().map { String(cString: $0) } ?? "dlopen failed"
            return .failure(Missing(description: "G.722 needs spandsp's library \(path), which could not be loaded (\(why)); install it (Debian: apt-get install libspandsp2)"))
        }
        func sym<T>(_ name: String, _: T.Type) -> T? { dlsym(handle, name).map { unsafeBitCast($0, to: T.self) } }
        guard let ei = sym("g722_encode_init", Init.self), let e = sym("g722_encode", Encode.self), let ef = sym("g722_encode_free", Free.self),
              let di = sym("g722_decode_init", Init.self), let d = sym("g722_decode", Decode.self), let df = sym("g722_decode_free", Free.self) else {
            return .failure(Missing(description: "\(path) has no g722_encode/g722_decode: not spandsp"))
        }
        return .success(G722Library(encodeInit: ei, encode: e, encodeFree: ef, decodeInit: di, decode: d, decodeFree: df))
    }
}

/// One direction's G.722 state (not thread-safe; one per call and direction).
final class G722Encoder {
    private let lib: G722Library
    private let state: OpaquePointer

    init() throws {
        lib = try G722Library.shared()
        guard let s = lib.encodeInit(nil, 64000, 0) else { throw G722Library.Missing(description: "g722_encode_init failed") }
        state = s
    }
    deinit { _ = lib.encodeFree(state) }

    /// 16 kHz samples → G.722 bytes (one byte per two samples).
    func encode(_ samples: [Int16]) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: samples.count / 2 + 1)
        let n = samples.withUnsafeBufferPointer { s in
            out.withUnsafeMutableBufferPointer { o in lib.encode(state, o.baseAddress, s.baseAddress, Int32(s.count)) }
        }
        return Array(out.prefix(Int(max(n, 0))))
    }
}

final class G722Decoder {
    private let lib: G722Library
    private let state: OpaquePointer

    init() throws {
        lib = try G722Library.shared()
        guard let s = lib.decodeInit(nil, 64000, 0) else { throw G722Library.Missing(description: "g722_decode_init failed") }
        state = s
    }
    deinit { _ = lib.decodeFree(state) }

    /// G.722 bytes → 16 kHz samples (two per byte).
    func decode(_ bytes: [UInt8]) -> [Int16] {
        var out = [Int16](repeating: 0, count: bytes.count * 2 + 2)
        let n = bytes.withUnsafeBufferPointer { b in
            out.withUnsafeMutableBufferPointer { o in lib.decode(state, o.baseAddress, b.baseAddress, Int32(b.count)) }
        }
        return Array(out.prefix(Int(max(n, 0))))
    }
}
