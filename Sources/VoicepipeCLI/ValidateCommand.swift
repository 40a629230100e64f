import ArgumentParser
import Foundation
import PipelineCore
import VoicepipeServe

/// `voicepipe validate FILE...`: checks graphs without opening anything. A `voicepipe serve`
/// configuration (top-level `routes:`, no `nodes:`) is checked as `voicepipe serve FILE --check` does,
/// every graph template included.
struct ValidateCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "validate", abstract: "Check graph files; open nothing (exit 2 if any is invalid)")

    @Argument(help: "Graph files.") var files: [String]
    @Option(name: .customLong("set"), help: "Override a parameter: ID.KEY=VALUE (ID.type=... swaps the node's type).") var sets: [String] = []
    @OptionGroup var plugin: PluginOptions
    @OptionGroup var log: LogOptions

    func run() async throws {
        try log.bootstrap()
        let overrides = try parseOverrides(sets)
        let registry = try plugin.registry()
        var failed = false
        for file in files {
            do {
                if ServeConfiguration.looksLikeServeConfiguration(path: file) {
                    let c = try ServeConfiguration.load(path: file, registry: registry)
                    print("\(file): ok (serve configuration, \(c.routes.count) route\(c.routes.count == 1 ? "" : "s"))")
                    continue
                }
                let g = try GraphValidator.load(path: file, registry: registry, overrides: overrides)
                for w in g.warnings { printError("warning: \(w)") }
                print("\(file): ok (\(g.nodes.count) nodes, \(g.links.count) links)")
            } catch let e as GraphError {
                failed = true
                printError(e.description)
            }
        }
        if failed { throw ExitStatus.invalid }
    }
}
