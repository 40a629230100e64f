import Foundation
import PipelineCore
import VoicepipeTesting
import Synchronization
import Testing
@testable import CoreNodes
@testable import Nodes

/// The real-device test environment: a private PulseAudio daemon started by
/// `source scripts/pulse-env.sh start` (which exports PULSE_SERVER and ALSA_CONFIG_PATH).
///
/// Audio tests run unless VOICEPIPE_AUDIO_TESTS=0; when they run and the daemon is missing they
/// fail with a message saying how to start it, instead of passing silently.
enum AudioTestEnv {
    static let environment = ProcessInfo.processInfo.environment

    /// False only when a developer opted out with VOICEPIPE_AUDIO_TESTS=0.
    static var enabled: Bool { environment["VOICEPIPE_AUDIO_TESTS"] != "0" }

    /// Throws a clear error when the daemon cannot be reached.
    static func requireDaemon() throws {
        guard let server = environment["PULSE_SERVER"], !server.isEmpty else {
            throw AudioTestError("PULSE_SERVER is not set: run `source scripts/pulse-env.sh start` before `swift test` (or set VOICEPIPE_AUDIO_TESTS=0 to skip the audio device tests)")
        }
        guard environment["ALSA_CONFIG_PATH"] != nil else {
            throw AudioTestError("ALSA_CONFIG_PATH is not set: run `source scripts/pulse-env.sh start` before `swift test`")
        }
        let r = try shell("pactl", ["info"])
        guard r.status == 0 else {
            throw AudioTestError("no PulseAudio daemon at \(server) (pactl: \(r.error.trimmingCharacters(in: .whitespacesAndNewlines))): run `source scripts/pulse-env.sh start` first")
        }
    }

    /// The repository root (for the `voicepipe` binary and the pipelines).
    static var repositoryRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }
}

/// A failed precondition of the audio test environment.
struct AudioTestError: Error, CustomStringConvertible {
    let description: String
    init(_ message: String) { description = message }
}

/// Runs blocking helper processes off the cooperative pool.
let audioTestWorkers = Mutex<Int>(0)
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    let id = audioTestWorkers.withLock { $0 += 1; return $0 }
    let worker = BlockingWorker(name: "audio-test-\(id)")
    defer { worker.shutdown() }
    return try await worker.run(body)
}

/// A null sink of its own for one test, so tests running in parallel never hear each other.
/// A stream of silence keeps it rendering (an idle null sink's monitor stalls).
final class PrivateSink: Sendable {
    let name: String
    let module: String
    let keepalive: Process

    /// Creates the sink and waits until it renders in small steps: a new null sink first renders
    /// one block of its maximum latency (2 s) before the keep-alive stream's 10 ms request applies.
    static func make() async throws -> PrivateSink {
        let sink = try PrivateSink()
        try await Task.sleep(for: .milliseconds(2300))
        return sink
    }

    private init() throws {
        try AudioTestEnv.requireDaemon()
        name = "vp_test_" + UUID().uuidString.prefix(8).lowercased()
        (module, keepalive) = try Self.load(name, channels: 2)
    }

    /// Loads a null sink named `name` and starts its keep-alive stream; returns the module index and the stream.
    static func load(_ name: String, channels: Int) throws -> (module: String, keepalive: Process) {
        let r = try shell("pactl", ["load-module", "module-null-sink", "sink_name=\(name)", "rate=48000", "channels=\(channels)"])
        guard r.status == 0 else { throw AudioTestError("cannot create a null sink: \(r.error)") }
        let module = String(decoding: r.output, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        let p = Process()
        p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        p.arguments = ["pacat", "--playback", "--raw", "--format=s16le", "--rate=16000", "--channels=1", "--latency-msec=10",
                       "--client-name=keepalive", "-d", name]
        p.standardInput = FileHandle(forReadingAtPath: "/dev/zero")
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        return (module, p)
    }

    /// The monitor source: what is played on the sink.
    var monitor: String { name + ".monitor" }

    /// Removes the sink.
    func close() {
        // pacat drains on SIGTERM, which never ends with /dev/zero as input.
        kill(keepalive.processIdentifier, SIGKILL)
        keepalive.waitUntilExit()
        _ = try? shell("pactl", ["unload-module", module])
    }
}

/// Plays samples on a PulseAudio sink with `paplay` (blocks until played; off the pool).
func pacatPlay(_ samples: [Int16], rate: Int, device: String) async throws {
    let file = try AudioSignals.writeWAV(samples, rate: rate)
    let r = try await offPool { try shell("paplay", ["-d", device, file]) }
    guard r.status == 0 else { throw AudioTestError("paplay failed: \(r.error)") }
}

/// Records a PulseAudio source with `pacat -r` for `seconds` (off the pool); start it with
/// `async let` before playing.
func recordMonitor(device: String, seconds: Double, rate: Int = 16000) async throws -> [Int16] {
    let r = try await offPool {
        try shell("timeout", ["-s", "TERM", "-k", "1", String(seconds), "pacat", "--record", "--raw", "--format=s16le", "--rate=\(rate)",
                              "--channels=1", "--latency-msec=20", "-d", device])
    }
    return r.output.withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
}

/// Test signals.
enum AudioSignals {
    /// A linear chirp from `f0` to `f1` Hz at `level` dBFS, with 10 ms fades.
    static func chirp(rate: Int = 16000, seconds: Double = 0.8, from f0: Double = 300, to f1: Double = 3400, level: Double = -12) -> [Int16] {
        let n = Int(Double(rate) * seconds)
        let a = 32767 * pow(10, level / 20)
        let fade = rate / 100
        let k = (f1 - f0) / seconds
        return (0..<n).map { i in
            let t = Double(i) / Double(rate)
            var v = a * sin(2 * .pi * (f0 * t + k * t * t / 2))
            if i < fade { v *= Double(i) / Double(fade) }
            if i > n - fade { v *= Double(n - i) / Double(fade) }
            return Int16(v.rounded())
        }
    }

    /// Writes a mono WAV to a fresh temporary path.
    static func writeWAV(_ samples: [Int16], rate: Int) throws -> String {
        let path = temporaryPath("signal.wav")
        let w = try WAVWriter(path: path, format: AudioFormat(sampleRate: rate, channels: 1))
        try w.write(samples)
        try w.close()
        return path
    }
}

/// Finds a reference signal in a longer recording.
enum AudioMatch {
    /// Lag of `reference` in `captured` and the normalized cross-correlation there (-1...1):
    /// a coarse search on 5 ms energy envelopes, then a sample-exact search around it.
    static func locate(_ reference: [Int16], in captured: [Int16]) -> (lag: Int, coefficient: Double) {
        let block = 80
        func envelope(_ x: [Int16]) -> [Double] {
            stride(from: 0, to: x.count - block + 1, by: block).map { s in
                var e = 0.0
                for i in s..<s + block { e += abs(Double(x[i])) }
                return e
            }
        }
        let er = envelope(reference), ec = envelope(captured)
        guard !er.isEmpty, ec.count >= er.count else { return (0, 0) }
        var bestLag = 0, best = -1.0
        let rr = er.reduce(0) { $0 + $1 * $1 }
        for lag in 0...(ec.count - er.count) {
            var sab = 0.0, sbb = 0.0
            for i in 0..<er.count { let y = ec[lag + i]; sab += er[i] * y; sbb += y * y }
            let c = sbb > 0 ? sab / (rr * sbb).squareRoot() : 0
            if c > best { best = c; bestLag = lag }
        }
        let margin = 3 * block
        let start = max(0, bestLag * block - margin)
        let end = min(captured.count, bestLag * block + reference.count + margin)
        let window = Array(captured[start..<end])
        let fine = Signal.bestCorrelation(reference, window, maxLag: max(1, window.count - reference.count + 1))
        return (start + fine.lag, fine.coefficient)
    }
}

/// Builds a graph with a capture node and a WAV sink.
func captureGraph(type: String, device: String, path: String, rate: Int = 16000, extra: String = "") -> String {
    """
    version: 1
    name: capture-test
    nodes:
      mic: { type: \(type), device: "\(device)", rate: \(rate), channels: 1, frame_ms: 20\(extra) }
      out: { type: wav-sink, path: "\(path)" }
    links:
      - mic -> out
    """
}

/// Runs `pipeline` in the background; returns a task whose value is its events.
func startPipeline(_ pipeline: Pipeline) -> Task<[Event], any Error> {
    let events = pipeline.events(buffer: 100_000)
    let collector = Task { var all: [Event] = []; for await e in events { all.append(e) }; return all }
    return Task {
        try await pipeline.run()
        return await collector.value
    }
}

/// Frames collected by a `frame-collector` sink, with their arrival times (the testing kit's recorder).
typealias FrameBox = FrameRecorder

/// `frame-collector`: the testing kit's collecting sink; `stall_ms` stops it reading for that long
/// after the first frame (a stalled consumer).
enum FrameCollector {
    static func descriptor(_ box: FrameBox) -> NodeDescriptor { CollectingSink.descriptor(type: "frame-collector", recorder: box) }
}
