import Foundation
import Testing

/// The libraries loaded at first use (PulseAudio, PocketSphinx, eSpeak NG; FFmpeg is in
/// HostileMediaTests): each hidden in a mount namespace of its own (bound over by /dev/null), the node
/// that needs it fails with one message naming the library file and the Debian package, and the
/// process ends with its usual status, never a crash. A graph that needs none of them still runs.
@Suite("libraries loaded at first use", .serialized, .timeLimit(.minutes(3)),
       .enabled(if: getuid() == 0 && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")))
struct LibraryLoadingTests {
    static let libraries = "/usr/lib/x86_64-linux-gnu/"

    /// Runs `voicepipe ARGS` with `library` hidden.
    static func without(_ library: String, _ arguments: [String], environment extra: [String: String] = [:]) throws -> Finished {
        var env = ProcessInfo.processInfo.environment
        env["SWIFT_BACKTRACE"] = "enable=no"
        for (k, v) in extra { env[k] = v }
        return try Running("/usr/bin/unshare", ["-m", "/bin/bash", "-c",
                                                "mount --bind /dev/null \(libraries + library) && exec \"$0\" \"$@\"",
                                                voicepipeBinary] + arguments, environment: env).wait(timeout: 60)
    }

    @Test("without libpulse-simple, pulse-source names the library and libpulse0; exit 1")
    func withoutPulse() throws {
        try #require(FileManager.default.fileExists(atPath: Self.libraries + "libpulse-simple.so.0"))
        let out = tempDir().appendingPathComponent("r.wav").path
        let r = try Self.without("libpulse-simple.so.0", ["run", "pipelines/record.yaml", "--set", "out.path=\(out)"])
        #expect(r.status == 1, "exit \(r.status): \(r.stderr.suffix(600))")
        #expect(r.stderr.contains("PulseAudio's library libpulse-simple.so.0 could not be loaded")
                && r.stderr.contains("apt-get install libpulse0"), "\(r.stderr.suffix(600))")
    }

    @Test("without libpocketsphinx, asr engine pocketsphinx names the library and libpocketsphinx3; exit 1")
    func withoutPocketSphinx() throws {
        try #require(FileManager.default.fileExists(atPath: Self.libraries + "libpocketsphinx.so.3"))
        let r = try Self.without("libpocketsphinx.so.3", ["run", "pipelines/recognizer-file.yaml", "--quiet", "--set", "asr.engine=pocketsphinx"],
                                 environment: ["INPUT": packageRoot.appendingPathComponent("samples/sentences.wav").path])
        #expect(r.status == 1, "exit \(r.status): \(r.stderr.suffix(600))")
        #expect(r.stderr.contains("PocketSphinx's library libpocketsphinx.so.3 could not be loaded")
                && r.stderr.contains("apt-get install libpocketsphinx3"), "\(r.stderr.suffix(600))")
    }

    @Test("without libespeak-ng, validating a tts graph on espeak-ng names the library and the packages; exit 2")
    func withoutEspeak() throws {
        try #require(FileManager.default.fileExists(atPath: Self.libraries + "libespeak-ng.so.1"))
        let graph = try writeGraph("""
            version: 1
            nodes:
              src: { type: file-source, path: "\(packageRoot.appendingPathComponent("samples/sentences.wav").path)" }
              asr: { type: asr, engine: pocketsphinx }
              tts: { type: tts, engine: espeak-ng, voice: en-us }
              out: { type: null-sink }
            links:
              - src -> asr
              - asr.text -> tts
              - tts -> out
            """, in: tempDir())
        let r = try Self.without("libespeak-ng.so.1", ["validate", graph])
        #expect(r.status == 2, "exit \(r.status): \(r.stderr.suffix(600))")
        #expect(r.stderr.contains("eSpeak NG's library libespeak-ng.so.1 could not be loaded")
                && r.stderr.contains("apt-get install libespeak-ng1 espeak-ng-data"), "\(r.stderr.suffix(600))")
        // Nothing else depends on it: the same binary, the library still hidden, runs a graph without tts.
        let plain = try Self.without("libespeak-ng.so.1", ["validate", "pipelines/recognizer-file.yaml"],
                                     environment: ["INPUT": packageRoot.appendingPathComponent("samples/sentences.wav").path])
        #expect(plain.status == 0, "exit \(plain.status): \(plain.stderr.suffix(600))")
    }
}
