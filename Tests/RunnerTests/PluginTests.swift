import Foundation
import Testing

/// Plugins loaded by the stock binary: Examples/gain-plugin built as the separate package a plugin
/// author has (it depends on PipelineCore only), then loaded with --plugin and with `plugins:`.
@Suite("Plugins", .serialized)
struct PluginTests {
    static let example = packageRoot.appendingPathComponent("Examples/gain-plugin")

    /// Builds the example plugin once per test process (debug, like the voicepipe binary under test),
    /// in a fresh build folder: what a plugin author gets from a clean checkout, and never a build
    /// that missed a file added to PipelineCore since the last one.
    static let built: Result<String, PluginBuildError> = {
        do {
            let scratch = tempDir().appendingPathComponent("gain-plugin-build").path
            let build = try Running("/usr/bin/env", ["swift", "build", "--package-path", example.path, "--scratch-path", scratch],
                                    cwd: example).wait(timeout: 900)
            guard build.status == 0 else { return .failure(PluginBuildError(message: String((build.stdout + build.stderr).suffix(3000)))) }
            return .success(scratch + "/debug")
        } catch {
            return .failure(PluginBuildError(message: "\(error)"))
        }
    }()

    struct PluginBuildError: Error { var message: String }

    func pluginDir() throws -> String { try Self.built.get() }

    @Test("--plugin loads the gain node into the stock binary, which runs a graph through it", .timeLimit(.minutes(20)))
    func loadsWithOption() throws {
        let dir = try pluginDir()
        let lib = dir + "/libgain.so"
        let out = tempDir().appendingPathComponent("gain.wav").path
        let graph = try writeGraph("""
        version: 1
        nodes:
          src:  { type: tone-source, level_db: -20, duration_ms: 1000, realtime: false }
          vol:  { type: volume }
          gain: { type: gain, db: 6 }
          out:  { type: wav-sink, path: "\(out)" }
          log:  { type: jsonl-sink, path: "-" }
        links:
          - src -> vol -> gain -> out
          - gain.events -> log
        """, in: tempDir())
        let r = try voicepipe(["run", graph, "--plugin", lib, "--quiet", "--stats"])
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("\"event\":\"gain_done\""), "\(r.stdout)")
        let data = try Data(contentsOf: URL(fileURLWithPath: out))
        let samples = data.dropFirst(44).withUnsafeBytes { Array($0.bindMemory(to: Int16.self)) }
        let peak = samples.map { abs(Int($0)) }.max() ?? 0
        #expect(abs(peak - 6523) < 40, "peak \(peak)")
        // Type identity across the boundary: the runtime fuses `vol -> gain` only when the plugin's
        // node `is any FrameProcessor` for the host (one copy of PipelineCore's types in the process);
        // with two copies the cast fails and the edge would be an ordinary queue. (The loader's own
        // check — the plugin casting the host's registrar to its PluginRegistrar — already passed.)
        #expect(r.stderr.contains("vol.out -> gain.in (fused)"), "\(r.stderr)")
        let nodes = try voicepipe(["nodes", "--plugin", lib])
        #expect(nodes.stdout.contains("gain") && nodes.stdout.contains("[plugin gain]"), "\(nodes.stdout)")
        let detail = try voicepipe(["nodes", "gain", "--plugin", lib, "--json"])
        #expect(detail.stdout.contains("\"plugin\":{\"name\":\"gain\""), "\(detail.stdout)")
    }

    @Test("`plugins:` names a plugin found in VOICEPIPE_PLUGIN_PATH; validate checks its parameters like a built-in's", .timeLimit(.minutes(20)))
    func loadsFromGraph() throws {
        let dir = try pluginDir()
        let out = tempDir().appendingPathComponent("gain.wav").path
        let ok = try voicepipe(["run", Self.example.appendingPathComponent("gain.yaml").path, "--quiet"],
                               environment: ["VOICEPIPE_PLUGIN_PATH": dir, "OUT": out, "GAIN_DB": "-6"])
        #expect(ok.status == 0, "\(ok.stderr)")
        let bad = try writeGraph("""
        version: 1
        plugins: [gain]
        nodes:
          src:  { type: tone-source, duration_ms: 100 }
          gain: { type: gain, db: 100, volume: 3 }
          out:  { type: null-sink }
        links:
          - src -> gain -> out
        """, in: tempDir())
        let r = try voicepipe(["validate", bad], environment: ["VOICEPIPE_PLUGIN_PATH": dir])
        #expect(r.status == 2)
        #expect(r.stderr.contains("g.yaml:5:") && r.stderr.contains("parameter 'db': expected number in -96.0...48.0"), "\(r.stderr)")
        #expect(r.stderr.contains("unknown parameter 'volume' for gain"), "\(r.stderr)")
        let missing = try voicepipe(["validate", bad], environment: ["VOICEPIPE_PLUGIN_PATH": "/nonexistent"])
        #expect(missing.status == 2)
        #expect(missing.stderr.contains("g.yaml:2:") && missing.stderr.contains("plugin 'gain'") && missing.stderr.contains("/nonexistent"), "\(missing.stderr)")
    }

    @Test("a plugin built against another voicepipe or toolchain is refused before anything runs (exit 2, both versions named)")
    func refusesOtherBuilds() throws {
        // A plugin that speaks the entry point's C ABI but says it was built against voicepipe 0.1.0
        // with Swift 5.10: the host must refuse it without calling anything else of it.
        let dir = tempDir()
        let c = dir.appendingPathComponent("old.c").path
        try """
        #include <string.h>
        static int touched = 0;
        const char *voicepipe_plugin_entry(const char *host, void *registrar) {
            (void)host; if (registrar == 0) touched = 1;
            return "voicepipe-plugin/1 voicepipe=0.1.0 swift=5.10";
        }
        """.write(toFile: c, atomically: true, encoding: .utf8)
        let lib = dir.appendingPathComponent("libold.so").path
        let cc = try Running("/usr/bin/env", ["cc", "-shared", "-fPIC", "-o", lib, c]).wait(timeout: 60)
        try #require(cc.status == 0, "\(cc.stderr)")
        let out = dir.appendingPathComponent("never.wav").path
        let graph = try writeGraph("""
        version: 1
        nodes:
          src: { type: tone-source, duration_ms: 100 }
          out: { type: wav-sink, path: "\(out)" }
        links:
          - src -> out
        """, in: dir)
        let r = try voicepipe(["run", graph, "--plugin", lib])
        #expect(r.status == 2)
        #expect(r.stderr.contains("libold.so") && r.stderr.contains("voicepipe 0.1.0 with Swift 5.10") && r.stderr.contains("this voicepipe is voicepipe 0.2.0"), "\(r.stderr)")
        #expect(!FileManager.default.fileExists(atPath: out), "the graph ran")

        // Not a plugin at all: no entry point.
        let plain = dir.appendingPathComponent("plain.c").path
        try "int nothing_here(void) { return 0; }\n".write(toFile: plain, atomically: true, encoding: .utf8)
        let plainLib = dir.appendingPathComponent("libplain.so").path
        _ = try Running("/usr/bin/env", ["cc", "-shared", "-fPIC", "-o", plainLib, plain]).wait(timeout: 60)
        let p = try voicepipe(["validate", graph, "--plugin", plainLib])
        #expect(p.status == 2 && p.stderr.contains("exports no `voicepipe_plugin_entry`"), "\(p.stderr)")
        let none = try voicepipe(["nodes", "--plugin", dir.appendingPathComponent("absent.so").path])
        #expect(none.status == 2 && none.stderr.contains("no file at"), "\(none.stderr)")
    }
}
