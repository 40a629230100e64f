import Foundation

/// Why a library loaded at first use is not there: the reason its `vp_*_load` function wrote (naming
/// the library file and the Debian package), or nil when it is loaded.
package func libraryProblem(_ load: (UnsafeMutablePointer<CChar>?, Int) -> Int32) -> String? {
    var why = [CChar](repeating: 0, count: 512)
    guard load(&why, why.count) != 1 else { return nil }
    return why.withUnsafeBufferPointer { String(cString: $0.baseAddress!) }
}

/// The project-local folders where `scripts/install-*.sh` put what voicepipe loads at run time
/// (`.deps/onnx`, `.deps/whisper`, `.deps/wake`): under the working directory, and under the four
/// folders above the running executable (so that `.build/<config>/voicepipe` finds the project's
/// `.deps` from any working directory).
package enum ProjectDependencies {
    /// `<root>/.deps/<name>` for each root, in search order, without repeats.
    package static func prefixes(_ name: String) -> [String] {
        var roots = [FileManager.default.currentDirectoryPath]
        if let exe = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe") {
            var dir = (exe as NSString).deletingLastPathComponent
            for _ in 0..<4 {
                dir = (dir as NSString).deletingLastPathComponent
                roots.append(dir)
            }
        }
        var seen: Set<String> = []
        return roots.map { $0 + "/.deps/" + name }.filter { seen.insert($0).inserted }
    }
}

/// "<path>: no such file", and for a relative path where it was looked for: a graph's relative paths
/// name a file next to the graph file when one is there, else one in the working directory.
package func noSuchFileMessage(_ path: String) -> String {
    guard !path.hasPrefix("/") else { return "\(path): no such file" }
    return "\(path): no such file (a relative path is looked up next to the graph file, then in the working directory, \(FileManager.default.currentDirectoryPath))"
}
