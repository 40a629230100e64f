import ArgumentParser
import Foundation
import Logging
import PipelineCore
import Synchronization
import VoicepipeServe

/// `voicepipe run FILE...`: runs graphs until end of stream or SIGINT/SIGTERM.
struct RunCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "run",
        abstract: "Run graphs until end of stream or SIGINT/SIGTERM",
        discussion: """
        On SIGINT/SIGTERM/SIGHUP the sources stop, queued frames drain and sinks flush (a WAV header
        is finalized), then voicepipe exits 0; a second signal exits at once (128 + signal) after
        rewriting the headers of the WAV files still open. A closed standard output (`| head`) stops
        the pipeline the same way.
        Exit codes: 0 normal end, 1 a node failed, 2 invalid graph or usage.
        """)

    @Argument(help: "Graph files (several run side by side in one process).") var files: [String]
    @Option(name: .customLong("set"), help: "Override a parameter: ID.KEY=VALUE (ID.type=... swaps the node's type).") var sets: [String] = []
    @Flag(help: "Print a per-edge table of sent / dropped / max depth at exit (and a `stats` event on stdout when events go there).") var stats = false
    @Flag(help: "No live progress line.") var quiet = false
    @Option(help: "Run this many instances of each graph in one process.") var instances: Int = 1
    @Option(help: "Serve a live console of the running graphs at http://HOST:PORT/console (loopback only unless VOICEPIPE_CONSOLE_TOKEN is set).")
    var console: String?
    @OptionGroup var plugin: PluginOptions
    @OptionGroup var log: LogOptions

    func validate() throws {
        if instances < 1 || instances > 10_000 { throw ValidationError("--instances must be in 1...10000") }
        if let console {
            guard let (host, _) = ConsoleServer.address(console) else { throw ValidationError("--console: expected HOST:PORT, e.g. 127.0.0.1:8090") }
            let token = ProcessInfo.processInfo.environment["VOICEPIPE_CONSOLE_TOKEN"] ?? ""
            if !ConsoleServer.isLoopbackHost(host) && token.isEmpty {
                throw ValidationError("--console \(console): the console listens beyond this machine only with a token; set VOICEPIPE_CONSOLE_TOKEN")
            }
        }
    }

    func run() async throws {
        try log.bootstrap()
        SignalCenter.hold()   // held since start-up already; kept until the pipelines start
        defer { SignalCenter.release() }
        let overrides = try parseOverrides(sets)
        let registry = try plugin.registry()
        var graphs: [ValidatedGraph] = []
        var invalid = false
        for file in files {
            do {
                let g = try GraphValidator.load(path: file, registry: registry, overrides: overrides)
                for w in g.warnings { printError("warning: \(w)") }
                graphs.append(g)
            } catch let e as GraphError {
                printError(e.description)
                invalid = true
            }
        }
        if invalid { throw ExitStatus.invalid }

        var pipelines: [Pipeline] = []
        do {
            for g in graphs {
                for i in 0..<instances {
                    var logger = Logger(label: "voicepipe")
                    if instances > 1 { logger[metadataKey: "instance"] = "\(i)" }
                    var options = Pipeline.Options()
                    options.logger = logger
                    // VOICEPIPE_NO_FUSION=1 gives every node its own task (for measurements).
                    options.fusion = g.environment["VOICEPIPE_NO_FUSION"] != "1"
                    pipelines.append(try Pipeline(graph: g, options: options))
                }
            }
        } catch let e as PipelineError {
            printError("error: \(e.description)")
            throw ExitStatus.runtimeFailure
        }

        let all = pipelines
        SignalCenter.onFirstSignal { for p in all { p.stop() } }
        let consoleServer = try await startConsole(all)

        let progress: Task<Void, Never>? = (!quiet && isatty(STDERR_FILENO) == 1) ? Task { await ProgressLine.run(all) } : nil

        let failures = await withTaskGroup(of: PipelineError?.self) { group -> [PipelineError] in
            for p in pipelines {
                group.addTask {
                    do { try await p.run(); return nil } catch let e as PipelineError { return e } catch {
                        return PipelineError(node: "?", code: .nodeFailed, message: "\(error)")
                    }
                }
            }
            var out: [PipelineError] = []
            for await r in group { if let r { out.append(r) } }
            return out
        }
        progress?.cancel()
        await consoleServer?.close()
        if progress != nil { FileHandle.standardError.write(Data("\r\u{1B}[K".utf8)) }

        if stats {
            for (i, p) in pipelines.enumerated() {
                printError(StatsTable.render(p, title: pipelines.count > 1 ? "\(p.graph.file) #\(i)" : p.graph.file))
                if p.graph.nodes.contains(where: { $0.descriptor.type == "jsonl-sink" && $0.config.string("path", default: "-") == "-" }) {
                    print(StatsTable.event(p).jsonLine())
                }
            }
        }
        if let f = failures.first {
            printError("error: \(f.description)")
            throw ExitStatus.runtimeFailure
        }
    }
}

extension RunCommand {
    /// `--console HOST:PORT`: the run's graphs on the console, as `file#instance`.
    func startConsole(_ pipelines: [Pipeline]) async throws -> ConsoleServer? {
        guard let console, let (host, port) = ConsoleServer.address(console) else { return nil }
        let started = ContinuousClock.now
        let live = pipelines.enumerated().map { i, p in
            LiveSession(id: "\(((p.graph.file as NSString).lastPathComponent as NSString).deletingPathExtension)#\(i)", route: p.graph.file, started: started, pipeline: p)
        }
        let token = ProcessInfo.processInfo.environment["VOICEPIPE_CONSOLE_TOKEN"].flatMap { $0.isEmpty ? nil : $0 }
        do {
            let server = try await ConsoleServer(host: host, port: port, token: token, sessions: { live })
            printError("console: http://\(host.contains(":") ? "[\(host)]" : host):\(server.port)/console")
            return server
        } catch {
            printError("error: --console \(console): cannot listen: \(error)")
            throw ExitStatus.runtimeFailure
        }
    }
}

/// The live progress line for file sources (stderr, terminals only).
enum ProgressLine {
    static func run(_ pipelines: [Pipeline]) async {
        let start = ContinuousClock.now
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(250))
            var parts: [String] = []
            let wall = (ContinuousClock.now - start) / .seconds(1)
            for p in pipelines.prefix(4) {
                for (id, e) in p.progress.sorted(by: { $0.key < $1.key }) {
                    var s = "\(id): \(String(format: "%.1f", e.position)) s"
                    if let t = e.total, t > 0 { s += String(format: " / %.1f s (%.0f%%)", t, min(100, 100 * e.position / t)) }
                    if wall > 0 { s += String(format: " %.1fx", e.position / wall) }
                    parts.append(s)
                }
            }
            if !parts.isEmpty {
                FileHandle.standardError.write(Data(("\r\u{1B}[K" + parts.joined(separator: "  ")).utf8))
            }
        }
    }
}

/// The `--stats` table and event.
enum StatsTable {
    static func render(_ p: Pipeline, title: String) -> String {
        let edges = p.edgeStats
        let w = max(24, edges.map(\.label.count).max() ?? 0)
        var out = "stats for \(title):\n"
        out += "  " + "edge".padding(toLength: w, withPad: " ", startingAt: 0)
            + "       sent    dropped  max depth  capacity  overflow     age ms p50 / p99 / max\n"
        for e in edges {
            out += "  " + e.label.padding(toLength: w, withPad: " ", startingAt: 0)
                + String(format: " %10llu %10llu %10d %9d  ", e.sent, e.dropped, e.maxDepth, e.capacity)
                + e.overflow.rawValue.padding(toLength: 12, withPad: " ", startingAt: 0)
                + (e.age.map { String(format: " %8.1f / %.1f / %.1f", $0.p50Ms, $0.p99Ms, $0.maxMs) } ?? "") + "\n"
        }
        let sinks = p.sinkAges
        if !sinks.isEmpty {
            out += "  end-to-end media age at sinks (ms, p50 / p99 / max):\n"
            for (id, a) in sinks {
                out += "    \(id): " + String(format: "%.1f / %.1f / %.1f", a.p50Ms, a.p99Ms, a.maxMs)
                    + (p.graph.latencyBudgetMs.map { " (budget \($0))" } ?? "") + "\n"
            }
        }
        let nodes = p.nodeStats.filter { $0.restarts > 0 || !$0.counters.isEmpty || !$0.gauges.isEmpty }
        if !nodes.isEmpty {
            out += "  nodes:\n"
            for n in nodes {
                var fields = n.counters.sorted(by: { $0.key < $1.key }).map { "\($0.key)=\($0.value)" }
                    + n.gauges.sorted(by: { $0.key < $1.key }).map { "\($0.key)=" + String(format: "%.1f", $0.value) }
                if n.restarts > 0 { fields.insert("restarts=\(n.restarts)", at: 0) }
                out += "    \(n.id): " + fields.joined(separator: " ") + "\n"
            }
        }
        if p.eventsDropped > 0 { out += "  events dropped by slow subscribers: \(p.eventsDropped)\n" }
        return out
    }

    static func event(_ p: Pipeline) -> Event {
        func ms(_ v: Double) -> EventValue { .double((v * 100).rounded() / 100) }
        let edges: [EventValue] = p.edgeStats.map { e in
            var o: [String: EventValue] = ["edge": .string(e.label), "sent": .int(Int64(e.sent)), "dropped": .int(Int64(e.dropped)),
                                           "max_depth": .int(Int64(e.maxDepth)), "capacity": .int(Int64(e.capacity)), "overflow": .string(e.overflow.rawValue)]
            if let a = e.age { o["age_ms"] = .object(["p50": ms(a.p50Ms), "p99": ms(a.p99Ms), "max": ms(a.maxMs)]) }
            return .object(o)
        }
        let nodes: [EventValue] = p.nodeStats.map { n in
            var o: [String: EventValue] = ["node": .string(n.id), "restarts": .int(Int64(n.restarts))]
            for (k, v) in n.counters { o[k] = .int(Int64(v)) }
            for (k, v) in n.gauges { o[k] = .double((v * 10).rounded() / 10) }
            return .object(o)
        }
        return Event(.stats, node: "pipeline", ts: nil, fields: [("edges", .array(edges)), ("nodes", .array(nodes))])
    }
}
