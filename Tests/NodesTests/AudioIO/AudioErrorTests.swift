import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// Missing devices and a missing server: a clear error naming backend and device, within 2 s,
/// and `voicepipe run` exits 1 without hanging.
@Suite("AudioErrors", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioErrorTests {
    /// Runs a one-node graph and returns the failure and how long it took to come.
    func failure(of yaml: String) async throws -> (error: PipelineError, elapsed: Duration) {
        let start = ContinuousClock.now
        do {
            _ = try await runGraph(yaml, timeout: .seconds(10))
        } catch let e as PipelineError {
            return (e, ContinuousClock.now - start)
        }
        throw AudioTestError("the graph did not fail")
    }

    @Test("a nonexistent device fails at once, naming backend and device",
          arguments: [("pulse-source", "PulseAudio"), ("alsa-source", "ALSA"), ("pulse-sink", "PulseAudio"), ("alsa-sink", "ALSA")])
    func nonexistentDevice(type: String, backend: String) async throws {
        try AudioTestEnv.requireDaemon()
        let yaml = type.hasSuffix("source")
            ? captureGraph(type: type, device: "vp_no_such_device", path: temporaryPath("x.wav"))
            : """
              version: 1
              nodes:
                src: { type: tone-source, duration_ms: 200, realtime: false }
                spk: { type: \(type), device: vp_no_such_device }
              links:
                - src -> spk
              """
        let (error, elapsed) = try await failure(of: yaml)
        #expect(error.code == "device_not_found")
        #expect(error.message.contains("\(backend) device 'vp_no_such_device'"), "\(error.message)")
        #expect(elapsed < .seconds(2), "took \(elapsed)")
    }

    @Test("pulse nodes connect to the server of the graph's environment, not the process's, and name it when it is dead",
          arguments: ["pulse-source", "pulse-sink"])
    func serverFromTheGraphEnvironment(type: String) async throws {
        try AudioTestEnv.requireDaemon()   // the process's own server is alive
        let dead = "unix:" + temporaryPath("no-server-\(type)")
        let yaml = type.hasSuffix("source")
            ? captureGraph(type: type, device: "default", path: temporaryPath("x.wav"))
            : """
              version: 1
              nodes:
                src: { type: tone-source, duration_ms: 200, realtime: false }
                spk: { type: \(type) }
              links:
                - src -> spk
              """
        var environment = ProcessInfo.processInfo.environment
        environment["PULSE_SERVER"] = dead
        let start = ContinuousClock.now
        do {
            _ = try await runGraph(yaml, environment: environment, timeout: .seconds(10))
            Issue.record("the graph ran on the process's server")
        } catch let e as PipelineError {
            #expect(e.code == "server_unavailable", "\(e)")
            #expect(e.message.contains("server '\(dead)'"), "\(e.message)")
        }
        #expect(ContinuousClock.now - start < .seconds(5))
        // The same graph with the process's environment reaches the live server (a capture is stopped after 1 s).
        _ = try await runGraph(yaml, timeout: .seconds(1))
    }

    @Test("a busy device is reported as busy (memory backend: real cards are absent in CI)")
    func busyDevice() throws {
        let name = "busy-\(UUID().uuidString)"
        MemoryAudio.addCapture(name, samples: [Int16](repeating: 0, count: 1600), format: AudioFormat(sampleRate: 16000, channels: 1))
        defer { MemoryAudio.remove(name) }
        let spec = AudioStreamSpec(backend: .memory, device: name, format: AudioFormat(sampleRate: 16000, channels: 1), periodFrames: 160, latencyMs: 100, streamName: "t")
        let first = try AudioBackends.openCapture(spec)
        defer { first.close() }
        #expect { try AudioBackends.openCapture(spec) } throws: { ($0 as? NodeError)?.code == "device_busy" }
    }
}

/// The real `voicepipe` binary against a dead PulseAudio server and a missing device.
@Suite("AudioCLI", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioCLITests {
    static var binary: String { AudioTestEnv.repositoryRoot.appendingPathComponent(".build/debug/voicepipe").path }

    /// Runs `voicepipe` with extra environment; returns status, stderr and the time it took.
    func voicepipe(_ args: [String], environment extra: [String: String]) async throws -> (status: Int32, stderr: String, elapsed: Duration) {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            throw AudioTestError("\(Self.binary) is missing: build it with `swift build` before the tests")
        }
        let root = AudioTestEnv.repositoryRoot.path
        return try await offPool {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: Self.binary)
            p.arguments = args
            p.currentDirectoryURL = URL(fileURLWithPath: root)
            var env = ProcessInfo.processInfo.environment
            for (k, v) in extra { env[k] = v }
            p.environment = env
            let err = Pipe()
            p.standardError = err
            p.standardOutput = FileHandle.nullDevice
            let start = ContinuousClock.now
            try p.run()
            let reader = PipeReader(err.fileHandleForReading)
            // No hang: a stuck process is killed after 10 s (and the test fails on the status).
            let watchdog = DispatchWorkItem { if p.isRunning { p.terminate() } }
            DispatchQueue.global().asyncAfter(deadline: .now() + 10, execute: watchdog)
            p.waitUntilExit()
            watchdog.cancel()
            return (p.terminationStatus, String(decoding: reader.wait(), as: UTF8.self), ContinuousClock.now - start)
        }
    }

    @Test("no PulseAudio server: pulse-source fails with exit code 1 and a clear message")
    func deadServerPulse() async throws {
        let dead = "unix:" + temporaryPath("no-server")
        let r = try await voicepipe(["run", "pipelines/record.yaml", "--set", "out.path=\(temporaryPath("r.wav"))"], environment: ["PULSE_SERVER": dead])
        #expect(r.status == 1, "stderr: \(r.stderr)")
        #expect(r.stderr.contains("PulseAudio device 'default'"), "stderr: \(r.stderr)")
        #expect(r.stderr.contains("cannot reach PulseAudio"), "stderr: \(r.stderr)")
        #expect(r.elapsed < .seconds(5), "took \(r.elapsed)")
    }

    @Test("no PulseAudio server behind ALSA's default PCM: alsa-sink fails with exit code 1")
    func deadServerALSA() async throws {
        let dead = "unix:" + temporaryPath("no-server")
        let r = try await voicepipe(["run", "pipelines/play.yaml", "--set", "spk.type=alsa-sink"], environment: ["PULSE_SERVER": dead, "INPUT": try AudioSignals.writeWAV(AudioSignals.chirp(), rate: 16000)])
        #expect(r.status == 1, "stderr: \(r.stderr)")
        #expect(r.stderr.contains("ALSA device 'default'"), "stderr: \(r.stderr)")
        #expect(r.elapsed < .seconds(5), "took \(r.elapsed)")
    }

    @Test("a missing device with --set mic.type=alsa-source: exit code 1, backend and device named")
    func missingDeviceSwappedBackend() async throws {
        try AudioTestEnv.requireDaemon()
        let r = try await voicepipe(["run", "pipelines/record.yaml", "--set", "mic.type=alsa-source", "--set", "mic.device=vp_missing",
                                     "--set", "out.path=\(temporaryPath("r.wav"))"], environment: [:])
        #expect(r.status == 1)
        #expect(r.stderr.contains("ALSA device 'vp_missing' not found"), "stderr: \(r.stderr)")
    }

    @Test("voicepipe run pipelines/play.yaml plays the file to its end and exits 0")
    func playPipeline() async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let chirp = AudioSignals.chirp()
        let input = try AudioSignals.writeWAV(chirp, rate: 16000)
        async let recording = recordMonitor(device: sink.monitor, seconds: 5.5)
        try await Task.sleep(for: .milliseconds(500))   // pacat (a child process) starts recording the monitor first
        let r = try await voicepipe(["run", "pipelines/play.yaml", "--set", "spk.device=\(sink.name)"], environment: ["INPUT": input])
        #expect(r.status == 0, "stderr: \(r.stderr)")
        let recorded = try await recording
        let m = AudioMatch.locate(chirp, in: recorded)
        #expect(m.coefficient > AudioCaptureTests.matchBound, "correlation \(m.coefficient)")
    }
}
