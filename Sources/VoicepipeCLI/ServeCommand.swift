import ArgumentParser
import Foundation
import Logging
import PipelineCore
import VoicepipeServe

/// `voicepipe serve FILE`: pipelines as a network service (see ``ServeConfiguration``, ``ServeServer``).
struct ServeCommand: AsyncParsableCommand {
    /// glibc gives each thread that allocates its own arena (up to 8 per core). Sessions free their
    /// recognizer's ~95 MB from whichever thread ran it, and with many arenas the freed memory stays
    /// scattered: a worker running 6 sessions at a time grew by ~8 MB per session served (1.8 GB after 120)
    /// though nothing leaked. With one arena per core it stays flat (~660 MB). `MALLOC_ARENA_MAX` in the
    /// environment still decides when set.
    static func limitMallocArenas() {
        #if canImport(Glibc)
        guard ProcessInfo.processInfo.environment["MALLOC_ARENA_MAX"] == nil else { return }
        // mallopt and M_ARENA_MAX (-8) live in <malloc.h>, which Swift's Glibc module does not export.
        typealias MallOpt = @convention(c) (Int32, Int32) -> Int32
        guard let handle = dlopen(nil, RTLD_NOW), let symbol = dlsym(handle, "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: MallOpt.self)
        _ = mallopt(-8, Int32(max(2, ProcessInfo.processInfo.activeProcessorCount)))
        #endif
    }

    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve graph templates over the network: each connection is a session running its own graph",
        discussion: """
        FILE names where to listen, max_sessions, and routes (protocol tencent-asr | websocket, a path, a graph
        template with one app-source), and optionally nats (session events to JetStream). GET /healthz, /readyz (503 while draining or full) and /metrics (Prometheus).
        SIGTERM or SIGINT drains: no new sessions, running ones may finish for drain_grace_s, then end cleanly.
        Example: voicepipe serve pipelines/serve.yaml
        """)

    @Argument(help: "Serve configuration (YAML).") var file: String
    @Option(name: .long, help: "Override listen.port (0 = any free port; the port is printed).") var port: Int?
    @Flag(name: .long, help: "Check the configuration and every graph template, then exit.") var check = false
    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error.") var logLevel: String = "info"
    @OptionGroup var plugin: PluginOptions

    func run() async throws {
        Self.limitMallocArenas()
        let registry = try plugin.registry()
        var config: ServeConfiguration
        do {
            config = try ServeConfiguration.load(path: file, registry: registry)
        } catch let e as GraphError {
            FileHandle.standardError.write(Data((e.description + "\n").utf8))
            throw ExitCode(2)
        }
        if let port { config.listen.port = port }
        if check {
            print("\(file): ok (\(config.routes.count) route\(config.routes.count == 1 ? "" : "s"))")
            return
        }
        // The level applies to every session's graph too (their nodes log through their own loggers):
        // `--log-level debug` shows, say, each Whisper decoding of every session.
        LogBootstrap.once(level: Logger.Level(rawValue: logLevel) ?? .info)
        var logger = Logger(label: "voicepipe.serve")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        let server: ServeServer
        do {
            server = try ServeServer(configuration: config, logger: logger)
        } catch {
            FileHandle.standardError.write(Data("voicepipe serve: \(error)\n".utf8))
            throw ExitCode(2)
        }
        let bound: Int
        do {
            bound = try await server.start()
        } catch {
            FileHandle.standardError.write(Data("voicepipe serve: cannot listen on \(config.listen.host):\(config.listen.port): \(error)\n".utf8))
            throw ExitCode(1)
        }
        // One line on stdout that scripts and tests can read.
        let line = "listening on \(config.listen.host):\(bound) (\(config.routes.map { "\($0.name) \($0.path ?? ":\($0.port ?? 0)")" }.joined(separator: ", ")))\n"
        FileHandle.standardOutput.write(Data(line.utf8))
        let stop = AsyncStream<Void>.makeStream()
        SignalCenter.onFirstSignal { stop.continuation.yield(); stop.continuation.finish() }
        for await _ in stop.stream { break }
        await server.drain(grace: .seconds(config.drainGraceS))
        await server.closeEvents()
        await server.shutdown()
        SignalCenter.release()
        logger.notice("stopped")
    }
}
