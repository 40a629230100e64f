import Foundation

/// Text drawings of a graph (`voicepipe graph`) and the layout the live console draws with.
public enum GraphDrawing {
    /// Graphviz dot.
    public static func dot(_ g: ValidatedGraph) -> String {
        var out = "digraph \"\(g.name.isEmpty ? "voicepipe" : g.name)\" {\n  rankdir=LR;\n  node [shape=box, style=rounded, fontname=\"Helvetica\"];\n"
        for n in g.nodes {
            out += "  \"\(n.id)\" [label=\"\(n.id)\\n\(n.descriptor.type)\"];\n"
        }
        for l in g.links {
            let label = [l.fromPort == "out" ? nil : l.fromPort, l.toPort == "in" ? nil : "→\(l.toPort)", l.overflow == .block ? nil : l.overflow.rawValue]
                .compactMap { $0 }.joined(separator: " ")
            out += "  \"\(l.fromNode)\" -> \"\(l.toNode)\"" + (label.isEmpty ? "" : " [label=\"\(label)\"]") + ";\n"
        }
        return out + "}"
    }

    /// Mermaid flowchart.
    public static func mermaid(_ g: ValidatedGraph) -> String {
        func id(_ s: String) -> String { s.replacingOccurrences(of: "-", with: "_") }
        var out = "flowchart LR\n"
        for n in g.nodes { out += "  \(id(n.id))[\"\(n.id)<br/>\(n.descriptor.type)\"]\n" }
        for l in g.links {
            let label = [l.fromPort == "out" ? nil : l.fromPort, l.toPort == "in" ? nil : "→\(l.toPort)"].compactMap { $0 }.joined(separator: " ")
            out += "  \(id(l.fromNode)) -->" + (label.isEmpty ? " " : "|\(label)| ") + "\(id(l.toNode))\n"
        }
        return out
    }
}
