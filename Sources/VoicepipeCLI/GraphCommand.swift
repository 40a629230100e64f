import ArgumentParser
import Foundation
import PipelineCore

/// `voicepipe graph FILE [--format dot|mermaid|svg]`: draws a graph.
struct GraphCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "graph", abstract: "Draw a graph as Graphviz dot, Mermaid, or SVG (through Graphviz)")

    enum Format: String, ExpressibleByArgument, CaseIterable { case dot, mermaid, svg }

    @Argument(help: "Graph file.") var file: String
    @Option(help: "dot, mermaid or svg.") var format: Format = .dot
    @Option(name: .customLong("set"), help: "Override a parameter: ID.KEY=VALUE.") var sets: [String] = []
    @OptionGroup var plugin: PluginOptions

    func run() async throws {
        let graph: ValidatedGraph
        do {
            graph = try GraphValidator.load(path: file, registry: try plugin.registry(), overrides: try parseOverrides(sets))
        } catch let e as GraphError {
            printError(e.description)
            throw ExitStatus.invalid
        }
        switch format {
        case .dot: print(GraphDrawing.dot(graph))
        case .mermaid: print(GraphDrawing.mermaid(graph))
        case .svg:
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/env")
            p.arguments = ["dot", "-Tsvg"]
            let input = Pipe()
            p.standardInput = input
            do { try p.run() } catch {
                printError("error: --format svg needs Graphviz's `dot` (apt-get install graphviz); use --format dot or mermaid instead")
                throw ExitStatus.runtimeFailure
            }
            input.fileHandleForWriting.write(Data(GraphDrawing.dot(graph).utf8))
            try input.fileHandleForWriting.close()
            p.waitUntilExit()
            if p.terminationStatus != 0 {
                printError("error: Graphviz's `dot` is not installed or failed (status \(p.terminationStatus)); apt-get install graphviz, or use --format dot|mermaid")
                throw ExitStatus.runtimeFailure
            }
        }
    }
}
