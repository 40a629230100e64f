import Foundation

/// The package root, found from this file's path.
let packageRoot: URL = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()

/// The built `voicepipe` binary (debug build of this package), or VOICEPIPE_TEST_BINARY (the sanitizer
/// runs point it at their own build, so the processes the tests start are checked too).
var voicepipeBinary: String {
    if let p = ProcessInfo.processInfo.environment["VOICEPIPE_TEST_BINARY"], !p.isEmpty { return p }
    for config in ["debug", "release"] {
        let p = packageRoot.appendingPathComponent(".build/\(config)/voicepipe").path
        if FileManager.default.isExecutableFile(atPath: p) { return p }
    }
    return packageRoot.appendingPathComponent(".build/debug/voicepipe").path
}

/// Result of a finished process.
struct Finished {
    var status: Int32
    var stdout: String
    var stderr: String
    var seconds: Double
}

/// A running `voicepipe` (or other) process with its output captured.
final class Running: @unchecked Sendable {
    let process = Process()
    private let out = Pipe(), err = Pipe()
    private var outData = Data(), errData = Data()
    private let group = DispatchGroup()
    let started = Date()

    init(_ executable: String, _ arguments: [String], environment: [String: String]? = nil, cwd: URL = packageRoot) throws {
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.currentDirectoryURL = cwd
        if let environment { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        process.standardOutput = out
        process.standardError = err
        process.standardInput = FileHandle.nullDevice
        try process.run()
        group.enter(); group.enter()
        Thread { self.outData = self.out.fileHandleForReading.readDataToEndOfFile(); self.group.leave() }.start()
        Thread { self.errData = self.err.fileHandleForReading.readDataToEndOfFile(); self.group.leave() }.start()
    }

    func signal(_ sig: Int32) { kill(process.processIdentifier, sig) }

    /// Waits for the process to end (killing it after `timeout` seconds).
    func wait(timeout: Double = 60) -> Finished {
        let deadline = Date().addingTimeInterval(timeout)
        while process.isRunning && Date() < deadline { usleep(10_000) }
        if process.isRunning { process.terminate(); usleep(200_000); if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        process.waitUntilExit()
        group.wait()
        return Finished(status: process.terminationStatus, stdout: String(decoding: outData, as: UTF8.self),
                        stderr: String(decoding: errData, as: UTF8.self), seconds: Date().timeIntervalSince(started))
    }
}

/// Runs `voicepipe ARGS...` to completion.
func voicepipe(_ arguments: [String], environment: [String: String]? = nil, timeout: Double = 60) throws -> Finished {
    try Running(voicepipeBinary, arguments, environment: environment).wait(timeout: timeout)
}

/// A fresh temporary directory.
func tempDir() -> URL {
    let d = FileManager.default.temporaryDirectory.appendingPathComponent("voicepipe-cli-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: d, withIntermediateDirectories: true)
    return d
}

/// Writes a graph file and returns its path.
func writeGraph(_ yaml: String, in dir: URL, name: String = "g.yaml") throws -> String {
    let p = dir.appendingPathComponent(name).path
    try yaml.write(toFile: p, atomically: true, encoding: .utf8)
    return p
}

/// Builds WAV files byte by byte, independently of the code under test.
enum WAVBytes {
    static func le(_ v: UInt32, _ n: Int) -> [UInt8] { (0..<n).map { UInt8((v >> (8 * UInt32($0))) & 0xFF) } }

    /// A WAV file with the given format tag, bits per sample and raw sample bytes.
    static func file(tag: UInt16, rate: Int, channels: Int, bits: Int, data: [UInt8], extensible: Bool = false, dataSizeOverride: UInt32? = nil) -> Data {
        var fmt: [UInt8] = le(UInt32(extensible ? 0xFFFE : tag), 2) + le(UInt32(channels), 2) + le(UInt32(rate), 4)
            + le(UInt32(rate * channels * bits / 8), 4) + le(UInt32(channels * bits / 8), 2) + le(UInt32(bits), 2)
        if extensible {
            fmt += le(22, 2) + le(UInt32(bits), 2) + le(0, 4) + le(UInt32(tag), 2)
            fmt += [0x00, 0x00, 0x00, 0x00, 0x10, 0x00, 0x80, 0x00, 0x00, 0xAA, 0x00, 0x38, 0x9B, 0x71]
        }
        var d: [UInt8] = Array("RIFF".utf8) + le(UInt32(4 + 8 + fmt.count + 8 + data.count), 4) + Array("WAVE".utf8)
        d += Array("fmt ".utf8) + le(UInt32(fmt.count), 4) + fmt
        d += Array("LIST".utf8) + le(4, 4) + Array("INFO".utf8)   // an extra chunk to skip
        d += Array("data".utf8) + le(dataSizeOverride ?? UInt32(data.count), 4) + data
        return Data(d)
    }
}
