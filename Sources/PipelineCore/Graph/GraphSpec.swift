/// One end of a link: a node id and optionally a port name.
public struct Endpoint: Sendable, Hashable, CustomStringConvertible {
    /// Node id.
    public var node: String
    /// Port name; `nil` means the node's default port.
    public var port: String?
    /// The endpoint is a middle element of a chain (`a -> b.p -> c`): its port name is written once for
    /// both of its links, so it may name the port on the other side (an input named `p` with no output
    /// `p` means the default output, and the other way round). Resolved in validation.
    public var inChain: Bool = false

    /// Parses `node` or `node.port`.
    public init(parsing text: String) {
        let t = text.trimmingCharacters(in: .whitespaces)
        if let dot = t.firstIndex(of: ".") {
            node = String(t[..<dot])
            port = String(t[t.index(after: dot)...])
        } else {
            node = t
            port = nil
        }
    }

    /// Creates an endpoint.
    public init(node: String, port: String? = nil) {
        self.node = node
        self.port = port
    }

    public var description: String { port.map { "\(node).\($0)" } ?? node }
}

/// `restart: { max: N, backoff_ms: M }` on a node.
public struct RestartPolicy: Sendable, Hashable {
    /// Restarts allowed before the failure stops the pipeline.
    public var max: Int
    /// Wait before each restart.
    public var backoffMs: Int

    /// Creates a policy.
    public init(max: Int, backoffMs: Int) {
        self.max = max
        self.backoffMs = backoffMs
    }
}

/// A node as written in the graph file, before validation.
public struct NodeSpec: Sendable {
    /// Node id (the key under `nodes:`).
    public var id: String
    /// Node type.
    public var type: String
    /// Where the node's entry starts.
    public var location: SourceLocation
    /// Where its `type` value is.
    public var typeLocation: SourceLocation
    /// Parameters (without `type` and `restart`) with their locations.
    public var params: [String: (value: ParamValue, location: SourceLocation)]
    /// Parameter names in file order.
    public var paramOrder: [String]
    /// Restart policy, if declared.
    public var restart: RestartPolicy?
    /// The type was replaced by `--set ID.type=`.
    public var typeOverridden = false
    /// `executor: realtime | bulk`, when the graph overrides the type's class.
    public var executor: ExecutorClass?
}

/// An entry of a graph's `plugins:` list: a shared-library path or a plugin name.
public struct PluginReference: Sendable, Hashable {
    /// As written: a path (relative paths are taken from the graph file's folder) or a name looked
    /// up in `VOICEPIPE_PLUGIN_PATH`.
    public var name: String
    /// Where it is written.
    public var location: SourceLocation

    /// Creates a reference.
    public init(name: String, location: SourceLocation) {
        self.name = name
        self.location = location
    }
}

/// One link of the graph: `from` output to `to` input, with its edge settings.
public struct LinkSpec: Sendable {
    /// Producer end (an output port).
    public var from: Endpoint
    /// Consumer end (an input port).
    public var to: Endpoint
    /// Queue capacity (default: 32 frames).
    public var capacity: Int?
    /// Overflow policy (default: the producer type's `defaultOverflow`).
    public var overflow: OverflowPolicy?
    /// Where the link is written.
    public var location: SourceLocation
}

extension LinkSpec {
    /// The links of a chain `a -> b.port -> c` (its elements, at least two, none empty): a middle element's
    /// port names its input for the incoming link and, if it has an output of that name, its output for the
    /// outgoing one (resolved in validation).
    static func chain(_ parts: [String], location: SourceLocation) -> [LinkSpec] {
        (0..<max(parts.count - 1, 0)).map { i in
            var from = Endpoint(parsing: parts[i])
            var to = Endpoint(parsing: parts[i + 1])
            if i > 0 { from.inChain = true }
            if i + 1 < parts.count - 1 { to.inChain = true }
            return LinkSpec(from: from, to: to, capacity: nil, overflow: nil, location: location)
        }
    }
}

/// A graph file, parsed but not yet validated.
public struct GraphSpec: Sendable {
    /// File name used in messages.
    public var file: String
    /// `name:`.
    public var name: String
    /// Nodes in file order.
    public var nodes: [NodeSpec]
    /// Links in file order.
    public var links: [LinkSpec]
    /// Problems found while parsing (reported together with validation's).
    public var issues: [GraphIssue]
    /// Non-fatal notes (e.g. parameters dropped when `--set ID.type=` swapped a type).
    public var warnings: [String]
    /// `plugins:`, in file order.
    public var plugins: [PluginReference] = []
    /// `latency_budget_ms:`: sinks report frames older than this as `late`.
    public var latencyBudgetMs: Int?
    /// The environment variables the graph was loaded with (given to node factories).
    public var environment: [String: String] = [:]
}

import Foundation
