import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// The Wyoming ASR test server (`Tests/Fixtures/wyoming_asr_server.py`, built on the `wyoming`
/// package from `.deps/venv`, see scripts/install-python-deps.sh) as a child process. Its
/// transcript describes the audio it received: `samples=N rate=R tone=F` or `... silence`.
final class WyomingTestServer: @unchecked Sendable {
    let process: Process
    let port: Int
    private let stderr: PipeReader

    /// The virtual environment's python, or a clear failure.
    static func python() throws -> String {
        let path = FileManager.default.currentDirectoryPath + "/.deps/venv/bin/python3"
        guard FileManager.default.isExecutableFile(atPath: path) else {
            throw NodeError("wyoming_missing", "\(path) not found: run scripts/install-python-deps.sh (scripts/test.sh does)")
        }
        return path
    }

    /// Starts the server on a free port (or `port`) with `flags`; returns once it listens.
    init(_ flags: [String] = [], port: Int = 0) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: try Self.python())
        p.arguments = [FileManager.default.currentDirectoryPath + "/Tests/Fixtures/wyoming_asr_server.py",
                       "--uri", "tcp://127.0.0.1:\(port)"] + flags
        let out = Pipe(), err = Pipe()
        p.standardOutput = out
        p.standardError = err
        try p.run()
        process = p
        stderr = PipeReader(err.fileHandleForReading)
        // The first stdout line is "PORT <n>".
        var line = Data()
        let handle = out.fileHandleForReading
        while !line.contains(UInt8(ascii: "\n")) {
            let chunk = handle.availableData
            if chunk.isEmpty { break }
            line.append(chunk)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard text.hasPrefix("PORT "), let n = Int(text.dropFirst(5).trimmingCharacters(in: .whitespacesAndNewlines)) else {
            p.terminate()
            throw NodeError("wyoming_server", "the Wyoming test server did not start: \(text) \(String(decoding: stderr.wait(), as: UTF8.self))")
        }
        self.port = n
    }

    var uri: String { "tcp://127.0.0.1:\(port)" }

    /// Stops the server and returns its log (one line per event).
    @discardableResult
    func stop() -> String {
        if process.isRunning { process.terminate() }
        let deadline = Date().addingTimeInterval(5)
        while process.isRunning && Date() < deadline { usleep(20_000) }
        if process.isRunning { kill() }
        return String(decoding: stderr.wait(), as: UTF8.self)
    }

    /// Kills it at once (a crashed server).
    func kill() {
        if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    deinit { if process.isRunning { process.terminate() } }
}

/// A 16 kHz mono WAV of silence and tones: `parts` of (frequency or 0 for silence, seconds).
func toneWAV(_ parts: [(hz: Int, seconds: Double)]) throws -> String {
    let path = temporaryPath("tones.wav")
    var samples: [Int16] = []
    for part in parts {
        let n = Int(part.seconds * 16000)
        for i in 0..<n {
            samples.append(part.hz == 0 ? 0 : Int16(8000 * sin(2 * Double.pi * Double(part.hz) * Double(i) / 16000)))
        }
    }
    let writer = try WAVWriter(path: path, format: AudioFormat(sampleRate: 16000, channels: 1))
    try writer.write(samples)
    try writer.close()
    return path
}
