import Foundation
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// Runs a graph given as YAML with the built-in registry and returns every event it emitted.
/// Fails the calling test by throwing if the graph is invalid or a node fails.
func runGraph(_ yaml: String, overrides: [Override] = [], environment: [String: String] = ProcessInfo.processInfo.environment,
              registry: NodeRegistry = BuiltinNodes.registry(), timeout: Duration = .seconds(60)) async throws -> [Event] {
    let pipeline = try Pipeline(yaml: yaml, registry: registry, overrides: overrides, environment: environment)
    return try await runPipeline(pipeline, timeout: timeout)
}

/// Runs a built pipeline, collecting its events; stops it gracefully after `timeout`.
func runPipeline(_ pipeline: Pipeline, timeout: Duration = .seconds(60)) async throws -> [Event] {
    let events = pipeline.events(buffer: 100_000)
    let collector = Task { var all: [Event] = []; for await e in events { all.append(e) }; return all }
    let watchdog = Task { try await Task.sleep(for: timeout); pipeline.stop() }
    defer { watchdog.cancel() }
    try await pipeline.run()
    return await collector.value
}

/// A unique path in a fresh temporary directory.
func temporaryPath(_ name: String) -> String {
    let dir = FileManager.default.temporaryDirectory.appendingPathComponent("voicepipe-tests-\(UUID().uuidString)")
    try? FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
    return dir.appendingPathComponent(name).path
}

/// Runs a command line tool and returns its exit status and standard output.
@discardableResult
func shell(_ command: String, _ arguments: [String], stdin: Data? = nil) throws -> (status: Int32, output: Data, error: String) {
    let p = Process()
    p.executableURL = URL(fileURLWithPath: command.hasPrefix("/") ? command : "/usr/bin/env")
    p.arguments = command.hasPrefix("/") ? arguments : [command] + arguments
    let out = Pipe(), err = Pipe()
    p.standardOutput = out
    p.standardError = err
    let inPipe = Pipe()
    if stdin != nil { p.standardInput = inPipe }
    try p.run()
    if let stdin { inPipe.fileHandleForWriting.write(stdin); try? inPipe.fileHandleForWriting.close() }
    let errData = Task.detachedRead(err.fileHandleForReading)
    let data = out.fileHandleForReading.readDataToEndOfFile()
    p.waitUntilExit()
    return (p.terminationStatus, data, String(decoding: errData.wait(), as: UTF8.self))
}

/// True when `tool` is on the PATH.
func haveTool(_ tool: String) -> Bool {
    (try? shell("which", [tool]).status) == 0
}

/// Reads a 16-bit PCM WAV written by voicepipe or sox (any header) into samples.
func readWAV(_ path: String) throws -> (format: AudioFormat, samples: [Int16]) {
    let h = try WAVHeader.read(path: path)
    let handle = FileHandle(forReadingAtPath: path)!
    defer { try? handle.close() }
    try handle.seek(toOffset: h.dataOffset)
    let data = handle.readData(ofLength: Int(h.dataBytes))
    var out: [Int16] = []
    data.withUnsafeBytes { h.encoding.decode($0, into: &out) }
    return (h.format, out)
}

/// Signal measurements for assertions.
enum Signal {
    /// RMS of samples (full scale 32768).
    static func rms(_ x: ArraySlice<Int16>) -> Double {
        guard !x.isEmpty else { return 0 }
        var s = 0.0
        for v in x { s += Double(v) * Double(v) }
        return (s / Double(x.count)).squareRoot()
    }
    static func rms(_ x: [Int16]) -> Double { rms(x[...]) }

    /// Level in dBFS, AES17 convention (a full-scale sine reads 0).
    static func dbfs(_ x: [Int16]) -> Double { 20 * log10(max(rms(x), 1e-9) / 32768) + 3.0103 }

    /// Normalized cross-correlation peak of `b` against `a` over lags 0..<maxLag: (lag, coefficient in -1...1).
    static func bestCorrelation(_ a: [Int16], _ b: [Int16], maxLag: Int, step: Int = 1) -> (lag: Int, coefficient: Double) {
        let fa = a.map(Double.init), fb = b.map(Double.init)
        var best = (lag: 0, coefficient: -2.0)
        var lag = 0
        while lag < maxLag {
            let n = min(fa.count, fb.count - lag)
            if n <= 0 { break }
            var sab = 0.0, saa = 0.0, sbb = 0.0
            for i in 0..<n { let x = fa[i], y = fb[i + lag]; sab += x * y; saa += x * x; sbb += y * y }
            let c = saa > 0 && sbb > 0 ? sab / (saa * sbb).squareRoot() : 0
            if c > best.coefficient { best = (lag, c) }
            lag += step
        }
        return best
    }

    /// A sine at `level` dBFS (AES17).
    static func sine(frequency: Double, rate: Int, seconds: Double, level: Double = -20) -> [Int16] {
        let a = 32767 * pow(10, level / 20)
        return (0..<Int(Double(rate) * seconds)).map { Int16((a * sin(2 * .pi * frequency * Double($0) / Double(rate))).rounded()) }
    }
}

extension Task where Success == Data, Failure == Never {
    /// Reads a pipe to its end on a background thread (so stdout and stderr cannot deadlock each other).
    static func detachedRead(_ handle: FileHandle) -> PipeReader { PipeReader(handle) }
}

/// Reads a file handle to its end on its own thread.
final class PipeReader: @unchecked Sendable {
    private var data = Data()
    private let done = DispatchSemaphore(value: 0)
    init(_ handle: FileHandle) {
        Thread { [self] in data = handle.readDataToEndOfFile(); done.signal() }.start()
    }
    func wait() -> Data { done.wait(); return data }
}

