/// Why a library loaded at first use is not there: the reason its `vp_*_load` function wrote (naming
/// the library file and the Debian package), or nil when it is loaded.
package func libraryProblem(_ load: (UnsafeMutablePointer<CChar>?, Int) -> Int32) -> String? {
    var why = [CChar](repeating: 0, count: 512)
    guard load(&why, why.count) != 1 else { return nil }
    return why.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}
