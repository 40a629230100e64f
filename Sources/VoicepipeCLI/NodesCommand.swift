import ArgumentParser
import Foundation
import PipelineCore

/// `voicepipe nodes [TYPE] [--json]`: node types, ports and parameters.
struct NodesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "nodes", abstract: "List node types, their ports and parameters")

    @Argument(help: "Show one node type in detail.") var type: String?
    @Flag(help: "Machine-readable output.") var json = false
    @Flag(help: "A Markdown table (the one in the README).") var markdown = false
    @OptionGroup var plugin: PluginOptions

    func run() async throws {
        let registry = try plugin.registry()
        var list = registry.all
        if let type {
            guard let d = registry.descriptor(type) else {
                printError("error: unknown node type '\(type)'; known: \(registry.types.joined(separator: ", "))")
                throw ExitStatus.invalid
            }
            list = [d]
        }
        if json {
            print(NodeDocs.json(list))
        } else if markdown {
            print(NodeDocs.markdown(list), terminator: "")
        } else if type != nil {
            print(NodeDocs.detail(list[0]))
        } else {
            print(NodeDocs.table(list))
        }
    }
}

/// Renders node descriptors for people and scripts.
public enum NodeDocs {
    /// One line per type, grouped by family.
    public static func table(_ list: [NodeDescriptor]) -> String {
        let width = (list.map(\.type.count).max() ?? 10) + 2
        var out = ""
        var family = ""
        for d in list {
            if d.family != family {
                family = d.family
                out += (out.isEmpty ? "" : "\n") + "\(family):\n"
            }
            out += "  " + d.type.padding(toLength: width, withPad: " ", startingAt: 0) + d.summary
                + (d.plugin.map { " [plugin \($0.name)]" } ?? "") + "\n"
        }
        return out + "\n`voicepipe nodes TYPE` shows a type's ports and parameters."
    }

    /// Ports and parameters of one type.
    public static func detail(_ d: NodeDescriptor) -> String {
        var out = "\(d.type) (\(d.family)): \(d.summary)\n"
        if let p = d.plugin { out += "plugin: \(p.name) (\(p.path))\n" }
        out += "\ninputs:\n"
        if d.inputs.isEmpty { out += "  (none: a source)\n" }
        for p in d.inputs { out += "  \(p.name): \(p.kindDescription)\(p.required ? "" : " (optional)")\(p.doc.isEmpty ? "" : " — \(p.doc)")\n" }
        out += "outputs:\n"
        if d.outputs.isEmpty { out += "  (none: a sink)\n" }
        for p in d.outputs { out += "  \(p.name): \(p.kindDescription)\(p.doc.isEmpty ? "" : " — \(p.doc)")\n" }
        out += "parameters:\n"
        if d.parameters.isEmpty { out += "  (none)\n" }
        for p in d.parameters {
            var line = "  \(p.name): \(p.type)"
            if p.required { line += ", required" } else if let v = p.defaultValue { line += ", default \(p.secret ? "(from environment)" : v.description)" }
            out += line + "\n      \(p.doc)\n"
        }
        out += "  restart: { max: N, backoff_ms: M } (any node) restarts the node after a failure\n"
        out += "  executor: realtime | bulk (any node), type default \(d.executor.rawValue): realtime runs the node on the real-time executor, apart from bulk work (a node's parameters may change it: a file-source or tone-source with realtime: false is bulk)\n"
        out += "\nedges leaving it default to overflow: \(d.defaultOverflow.rawValue)\n"
        return out
    }

    /// JSON array of descriptors.
    public static func json(_ list: [NodeDescriptor]) -> String {
        func port(_ p: PortSpec) -> String {
            var s = "{\"name\":\(EventJSON.quote(p.name)),\"kinds\":[\(p.kinds.map(\.rawValue).sorted().map(EventJSON.quote).joined(separator: ","))]"
            if let c = p.codecs { s += ",\"codecs\":[\(c.sorted().map(EventJSON.quote).joined(separator: ","))]" }
            return s + ",\"required\":\(p.required),\"doc\":\(EventJSON.quote(p.doc))}"
        }
        func param(_ p: ParamSpec) -> String {
            var s = "{\"name\":\(EventJSON.quote(p.name)),\"type\":\(EventJSON.quote(p.type.description)),\"required\":\(p.required)"
            if let v = p.defaultValue, !p.secret { s += ",\"default\":\(paramJSON(v))" }
            if p.secret { s += ",\"secret\":true" }
            return s + ",\"doc\":\(EventJSON.quote(p.doc))}"
        }
        let items = list.map { d in
            "{\"type\":\(EventJSON.quote(d.type)),\"family\":\(EventJSON.quote(d.family)),\"summary\":\(EventJSON.quote(d.summary)),"
                + "\"inputs\":[\(d.inputs.map(port).joined(separator: ","))],\"outputs\":[\(d.outputs.map(port).joined(separator: ","))],"
                + "\"parameters\":[\(d.parameters.map(param).joined(separator: ","))],\"default_overflow\":\(EventJSON.quote(d.defaultOverflow.rawValue)),"
                + "\"executor\":\(EventJSON.quote(d.executor.rawValue))"
                + (d.plugin.map { ",\"plugin\":{\"name\":\(EventJSON.quote($0.name)),\"path\":\(EventJSON.quote($0.path))}" } ?? "") + "}"
        }
        return "[" + items.joined(separator: ",\n") + "]"
    }

    static func paramJSON(_ v: ParamValue) -> String {
        switch v {
        case .string(let s): EventJSON.quote(s)
        case .int(let i): String(i)
        case .double(let d): EventJSON.number(d)
        case .bool(let b): b ? "true" : "false"
        case .null: "null"
        case .list(let l): "[" + l.map(paramJSON).joined(separator: ",") + "]"
        case .map(let m): "{" + m.keys.sorted().map { EventJSON.quote($0) + ":" + paramJSON(m[$0]!) }.joined(separator: ",") + "}"
        }
    }

    /// The README's node table (Markdown), generated from the registry.
    public static func markdown(_ list: [NodeDescriptor]) -> String {
        var out = "| type | family | inputs | outputs | parameters | summary |\n|---|---|---|---|---|---|\n"
        for d in list {
            let ins = d.inputs.map { "`\($0.name)` \($0.kindDescription)" }.joined(separator: ", ")
            let outs = d.outputs.map { "`\($0.name)` \($0.kindDescription)" }.joined(separator: ", ")
            let params = d.parameters.map { "`\($0.name)`" }.joined(separator: ", ")
            out += "| `\(d.type)` | \(d.family) | \(ins.isEmpty ? "—" : ins) | \(outs.isEmpty ? "—" : outs) | \(params.isEmpty ? "—" : params) | \(d.summary) |\n"
        }
        return out
    }
}
