import Foundation
import Yams

typealias YNode = Yams.Node

/// A `--set ID.KEY=VALUE` override.
public struct Override: Sendable, Hashable {
    /// Node id.
    public var node: String
    /// Parameter name (`type` swaps the node's type).
    public var key: String
    /// Value as text; parsed like a YAML scalar (`16000` is an integer, `true` a boolean).
    public var value: String

    /// Parses `ID.KEY=VALUE`.
    public init(parsing text: String) throws {
        guard let eq = text.firstIndex(of: "="), let dot = text[..<eq].firstIndex(of: ".") else {
            throw GraphError([GraphIssue(.invalidOverride, at: .commandLine(),
                                         "--set \(text): expected ID.KEY=VALUE")])
        }
        node = String(text[..<dot])
        key = String(text[text.index(after: dot)..<eq])
        value = String(text[text.index(after: eq)...])
    }

    /// Creates an override.
    public init(node: String, key: String, value: String) {
        self.node = node
        self.key = key
        self.value = value
    }
}

/// Reads graph files: `${VAR}` substitution, YAML parsing with positions, `--set` overrides.
public enum GraphLoader {
    /// Default queue capacity of a link that does not give one.
    public static let defaultCapacity = 32
    /// Largest graph text accepted, in bytes (after `${VAR}` substitution).
    public static let maximumSize = 4 << 20
    /// Largest number of YAML nodes a graph may expand to once aliases are followed: a few
    /// hundred bytes of nested aliases can otherwise stand for billions of nodes.
    public static let maximumExpandedNodes = 200_000

    /// Loads a graph file from disk.
    public static func load(path: String, environment: [String: String] = ProcessInfo.processInfo.environment,
                            overrides: [Override] = []) throws -> GraphSpec {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw GraphError([GraphIssue(.structure, at: SourceLocation(file: path, line: 0, column: 0),
                                         "cannot read graph file (does it exist?)")])
        }
        guard let text = String(data: data, encoding: .utf8) else {
            throw GraphError([GraphIssue(.syntax, at: SourceLocation(file: path, line: 0, column: 0), "graph file is not UTF-8 text")])
        }
        return parse(text, file: path, environment: environment, overrides: overrides)
    }

    /// Parses graph text. Problems are collected in the result's `issues`, never thrown.
    public static func parse(_ text: String, file: String = "<string>",
                             environment: [String: String] = ProcessInfo.processInfo.environment,
                             overrides: [Override] = []) -> GraphSpec {
        var spec = GraphSpec(file: file, name: "", nodes: [], links: [], issues: [], warnings: [])
        spec.environment = environment
        guard text.utf8.count <= maximumSize else {
            spec.issues.append(GraphIssue(.syntax, at: SourceLocation(file: file, line: 0, column: 0),
                                          "graph text is \(text.utf8.count) bytes; the limit is \(maximumSize) bytes"))
            return spec
        }
        // Variables are substituted after parsing, into scalar values (see GraphVariables): the parser
        // reads the file's own structure, with stand-ins where the references are.
        var variables = GraphVariables(text, file: file, environment: environment, issues: &spec.issues)
        var repeated = Set<KeyPosition>()
        guard let root = compose(variables.text, file: file, issues: &spec.issues, repeated: &repeated) else {
            if spec.issues.isEmpty {
                spec.issues.append(GraphIssue(.structure, at: SourceLocation(file: file, line: 0, column: 0),
                                              "the graph is empty (no YAML document); a graph is a mapping with `version: 1`, `nodes:` and `links:`"))
            }
            return spec
        }
        var budget = maximumExpandedNodes
        guard fitsExpansion(root, budget: &budget) else {
            spec.issues.append(GraphIssue(.syntax, at: loc(root, file),
                                          "the graph expands to more than \(maximumExpandedNodes) YAML nodes once aliases (*name) are followed; refusing it (an alias bomb?)"))
            return spec
        }
        guard let top = root.mapping else {
            spec.issues.append(GraphIssue(.structure, at: loc(root, file), "a graph is a mapping with `nodes:` and `links:`"))
            return spec
        }
        for (k, raw) in top {
            if let at = position(k), repeated.contains(at) { continue }
            let key = variables.substitute(k.string ?? "", issues: &spec.issues)
            // A link chain is split at its arrows before its parts are substituted: a value holding `->`
            // adds no link.
            if key == "links" {
                parseLinks(raw, file: file, repeated: repeated, variables: &variables, into: &spec)
                continue
            }
            let v = variables.substitute(raw, issues: &spec.issues)
            switch key {
            case "version":
                if v.int != 1 { spec.issues.append(GraphIssue(.structure, at: loc(v, file), "unsupported version \(v.string ?? "?"); expected 1")) }
            case "name": spec.name = v.string ?? ""
            case "nodes": parseNodes(v, file: file, repeated: repeated, into: &spec)
            case "plugins": parsePlugins(v, file: file, into: &spec)
            case "latency_budget_ms":
                if let ms = v.int, (1...600_000).contains(ms) { spec.latencyBudgetMs = ms } else {
                    spec.issues.append(GraphIssue(.structure, at: loc(v, file), "latency_budget_ms: expected an integer in 1...600000 (milliseconds), got '\(v.string ?? "?")'"))
                }
            case let key where key.hasPrefix("x-"):
                // Extension keys hold shared settings for YAML anchors (`*name` elsewhere); not read otherwise.
                break
            default:
                spec.issues.append(GraphIssue(.structure, at: loc(k, file), "unknown top-level key '\(key)'; expected version, name, plugins, latency_budget_ms, nodes, links (or x-… for anchors)"))
            }
        }
        if top["nodes"] == nil {
            spec.issues.append(GraphIssue(.structure, at: loc(root, file), "missing `nodes:`"))
        }
        apply(overrides, to: &spec)
        return spec
    }

    // MARK: - Substitution

    /// Replaces `${VAR}` and `${VAR:-default}` in `text`; `$$` stands for a literal `$`. Textual: what a
    /// value holds becomes part of the text. Graphs and serve configurations are not read this way any more
    /// (their variables are substituted into scalar values after parsing, ``GraphVariables``).
    public static func substitute(_ text: String, file: String, environment: [String: String], issues: inout [GraphIssue]) -> String {
        guard text.contains("$") else { return text }
        var out = ""
        out.reserveCapacity(text.utf8.count)
        var line = 1, column = 1
        var i = text.startIndex
        while i < text.endIndex {
            let c = text[i]
            if c == "$" {
                let next = text.index(after: i)
                if next < text.endIndex, text[next] == "$" {
                    out.append("$"); i = text.index(after: next); column += 2; continue
                }
                if next < text.endIndex, text[next] == "{", let close = text[next...].firstIndex(of: "}") {
                    let body = String(text[text.index(after: next)..<close])
                    let name: String, fallback: String?
                    if let r = body.range(of: ":-") {
                        name = String(body[..<r.lowerBound]); fallback = String(body[r.upperBound...])
                    } else {
                        name = body; fallback = nil
                    }
                    if let v = environment[name], !(v.isEmpty && fallback != nil) {
                        out += v
                    } else if let fallback {
                        out += fallback
                    } else {
                        issues.append(GraphIssue(.undefinedVariable, at: SourceLocation(file: file, line: line, column: column),
                                                 "environment variable \(name) is not set and has no default (write ${\(name):-default})"))
                    }
                    column += text[i...close].count
                    i = text.index(after: close)
                    continue
                }
            }
            out.append(c)
            if c == "\n" { line += 1; column = 1 } else { column += 1 }
            i = text.index(after: i)
        }
        return out
    }

    // MARK: - YAML

    /// Where a key sits in the graph text (1-based, as YAML marks count).
    struct KeyPosition: Hashable {
        var line: Int
        var column: Int
    }

    /// Parses the graph text. YAML forbids a key twice in one mapping, and the composer refuses such a
    /// document whole; so libyaml's parser first reads the text's events (``YAMLKeyScan``), which name
    /// every later occurrence of a key exactly where it is. Each is reported as `duplicateID`, added to
    /// `repeated` (the readers below skip those positions), and blanked at the span the parser gave
    /// (a stand-in as wide, so that every other position stays put) before the one composition.
    static func compose(_ text: String, file: String, issues: inout [GraphIssue], repeated: inout Set<KeyPosition>) -> YNode? {
        let found = YAMLKeyScan.repeatedKeys(in: text)
        var composed = text
        if !found.isEmpty {
            var lines = text.components(separatedBy: "\n")
            for (i, r) in found.enumerated() {
                issues.append(GraphIssue(.duplicateID, at: SourceLocation(file: file, line: r.line, column: r.column), node: r.node,
                                         "duplicate key '\(r.key)' (each node id and parameter may appear once)"))
                repeated.insert(KeyPosition(line: r.line, column: r.column))
                guard r.endLine == r.line, r.line <= lines.count else { continue }
                var scalars = Array(lines[r.line - 1].unicodeScalars)
                let from = r.column - 1, to = min(r.endColumn - 1, scalars.count)
                guard from >= 0, from < to else { continue }
                scalars.replaceSubrange(from..<to, with: placeholder(i, width: to - from).unicodeScalars)
                var line = String.UnicodeScalarView()
                line.append(contentsOf: scalars)
                lines[r.line - 1] = String(line)
            }
            composed = lines.joined(separator: "\n")
        }
        do {
            return try Yams.compose(yaml: composed)
        } catch let YamlError.duplicatedKeysInMapping(duplicates, context) {
            // A key the scan could not blank (one written across lines): reported where the composer saw it.
            issues.append(GraphIssue(.duplicateID, at: SourceLocation(file: file, line: context.mark.line, column: context.mark.column),
                                     "duplicate keys: \(duplicates.joined(separator: ", ")) (each node id and parameter may appear once)"))
            return nil
        } catch let error as YamlError {
            issues.append(yamlIssue(error, file: file))
            return nil
        } catch {
            issues.append(GraphIssue(.syntax, at: SourceLocation(file: file, line: 0, column: 0), "\(error)"))
            return nil
        }
    }

    /// The `index`-th stand-in for a repeated key: `width` characters (more only past 26^width stand-ins)
    /// from the circled letters ⓐ-ⓩ, which no graph's keys use.
    static func placeholder(_ index: Int, width: Int) -> String {
        var digits: [Character] = []
        var k = index
        repeat {
            digits.append(Character(Unicode.Scalar(0x24D0 + UInt32(k % 26))!))
            k /= 26
        } while k > 0
        while digits.count < width { digits.append("ⓐ") }
        return String(digits.reversed())
    }

    static func position(_ node: YNode) -> KeyPosition? {
        node.mark.map { KeyPosition(line: $0.line, column: $0.column) }
    }

    static func yamlIssue(_ error: YamlError, file: String) -> GraphIssue {
        switch error {
        case let .scanner(context, problem, mark, _), let .parser(context, problem, mark, _), let .composer(context, problem, mark, _):
            let what = [context?.text, problem].compactMap { $0 }.filter { !$0.isEmpty }.joined(separator: ": ")
            return GraphIssue(.syntax, at: SourceLocation(file: file, line: mark.line, column: mark.column), "YAML syntax error: \(what)")
        default:
            return GraphIssue(.syntax, at: SourceLocation(file: file, line: 0, column: 0), "YAML error: \(error)")
        }
    }

    /// Walks `node` as if aliases were copies, spending one unit of `budget` per node; false once
    /// the budget is spent (the walk stops there, so it costs at most `budget` steps).
    static func fitsExpansion(_ node: YNode, budget: inout Int) -> Bool {
        budget -= 1
        guard budget >= 0 else { return false }
        switch node {
        case .scalar, .alias: return true
        case .mapping(let m):
            for (k, v) in m {
                guard fitsExpansion(k, budget: &budget), fitsExpansion(v, budget: &budget) else { return false }
            }
            return true
        case .sequence(let seq):
            for v in seq { guard fitsExpansion(v, budget: &budget) else { return false } }
            return true
        }
    }

    static func loc(_ node: YNode, _ file: String) -> SourceLocation {
        SourceLocation(file: file, line: node.mark?.line ?? 0, column: node.mark?.column ?? 0)
    }

    /// Converts a YAML node to a parameter value (plain scalars are typed; quoted ones are strings).
    static func value(_ node: YNode) -> ParamValue {
        switch node {
        case .scalar(let s):
            return scalarValue(s.string, plain: s.style == .plain)
        case .mapping(let m):
            var out: [String: ParamValue] = [:]
            for (k, v) in m { out[k.string ?? ""] = value(v) }
            return .map(out)
        case .sequence(let seq):
            return .list(seq.map(value))
        case .alias:
            return .null
        }
    }

    /// Types a scalar the way YAML's core schema does.
    public static func scalarValue(_ s: String, plain: Bool) -> ParamValue {
        guard plain else { return .string(s) }
        switch s {
        case "", "~", "null", "Null", "NULL": return .null
        case "true", "True", "TRUE": return .bool(true)
        case "false", "False", "FALSE": return .bool(false)
        default: break
        }
        if let i = Int(s) { return .int(i) }
        if s.hasPrefix("0x"), let i = Int(s.dropFirst(2), radix: 16) { return .int(i) }
        if let d = Double(s), s.contains(where: { $0 == "." || $0 == "e" || $0 == "E" }) { return .double(d) }
        return .string(s)
    }

    // MARK: - Nodes

    static func parseNodes(_ node: YNode, file: String, repeated: Set<KeyPosition> = [], into spec: inout GraphSpec) {
        guard let m = node.mapping else {
            spec.issues.append(GraphIssue(.structure, at: loc(node, file), "`nodes:` must be a mapping from node id to parameters"))
            return
        }
        if m.count == 0 {
            spec.issues.append(GraphIssue(.structure, at: loc(node, file), "`nodes:` is empty; a graph needs at least one node"))
        }
        for (k, v) in m {
            let id = k.string ?? ""
            if let at = position(k), repeated.contains(at) { continue }
            let at = loc(k, file)
            guard let params = v.mapping else {
                spec.issues.append(GraphIssue(.structure, at: loc(v, file), node: id, "a node is a mapping with at least `type:`"))
                continue
            }
            var ns = NodeSpec(id: id, type: "", location: at, typeLocation: at, params: [:], paramOrder: [], restart: nil)
            for (pk, pv) in params {
                let key = pk.string ?? ""
                if let at = position(pk), repeated.contains(at) { continue }
                switch key {
                case "type":
                    ns.type = pv.string ?? ""
                    ns.typeLocation = loc(pv, file)
                case "restart":
                    guard let r = pv.mapping, let max = r["max"]?.int, max >= 0 else {
                        spec.issues.append(GraphIssue(.invalidParameter, at: loc(pv, file), node: id, "restart: expected { max: N, backoff_ms: M }"))
                        continue
                    }
                    let backoff = r["backoff_ms"]?.int ?? 500
                    for (rk, _) in r where !["max", "backoff_ms"].contains(rk.string ?? "") {
                        spec.issues.append(GraphIssue(.unknownParameter, at: loc(rk, file), node: id, "restart: unknown key '\(rk.string ?? "")'; expected max, backoff_ms"))
                    }
                    ns.restart = RestartPolicy(max: max, backoffMs: backoff)
                case "executor":
                    guard let e = ExecutorClass(rawValue: pv.string ?? "") else {
                        spec.issues.append(GraphIssue(.invalidParameter, at: loc(pv, file), node: id,
                                                      "executor: expected \(ExecutorClass.allCases.map(\.rawValue).joined(separator: " | ")), got '\(pv.string ?? "")'"))
                        continue
                    }
                    ns.executor = e
                default:
                    ns.params[key] = (value(pv), loc(pk, file))
                    ns.paramOrder.append(key)
                }
            }
            spec.nodes.append(ns)
        }
    }

    // MARK: - Plugins

    static func parsePlugins(_ node: YNode, file: String, into spec: inout GraphSpec) {
        guard let seq = node.sequence else {
            spec.issues.append(GraphIssue(.structure, at: loc(node, file), "`plugins:` must be a list of shared-library paths or plugin names"))
            return
        }
        for item in seq {
            guard let s = item.string, item.scalar != nil, !s.isEmpty else {
                spec.issues.append(GraphIssue(.structure, at: loc(item, file), "a plugin is a path (`./libgain.so`) or a name found in VOICEPIPE_PLUGIN_PATH"))
                continue
            }
            spec.plugins.append(PluginReference(name: s, location: loc(item, file)))
        }
    }

    // MARK: - Links

    static func parseLinks(_ node: YNode, file: String, repeated: Set<KeyPosition> = [], into spec: inout GraphSpec) {
        var none = GraphVariables("", file: file, environment: [:], issues: &spec.issues)
        parseLinks(node, file: file, repeated: repeated, variables: &none, into: &spec)
    }

    /// Reads `links:` as written (`node` not yet substituted): a chain is split at its arrows, then each
    /// part substituted; a mapping is substituted whole.
    static func parseLinks(_ node: YNode, file: String, repeated: Set<KeyPosition> = [], variables: inout GraphVariables, into spec: inout GraphSpec) {
        guard let seq = node.sequence else {
            spec.issues.append(GraphIssue(.structure, at: loc(node, file), "`links:` must be a list"))
            return
        }
        for raw in seq {
            let at = loc(raw, file)
            if let written = raw.string, raw.scalar != nil {
                let parts = written.components(separatedBy: "->").map { variables.substitute($0, issues: &spec.issues).trimmingCharacters(in: .whitespaces) }
                let s = parts.joined(separator: " -> ")
                if parts.count < 2 || parts.contains(where: \.isEmpty) {
                    spec.issues.append(GraphIssue(.invalidLink, at: at, "a link chain is `a -> b.port -> c` (got \"\(s)\")"))
                    continue
                }
                spec.links += LinkSpec.chain(parts, location: at)
            } else if let m = variables.substitute(raw, issues: &spec.issues).mapping {
                var link = LinkSpec(from: Endpoint(node: ""), to: Endpoint(node: ""), capacity: nil, overflow: nil, location: at)
                for (k, v) in m {
                    if let at = position(k), repeated.contains(at) { continue }
                    switch k.string ?? "" {
                    case "from": link.from = Endpoint(parsing: v.string ?? "")
                    case "to": link.to = Endpoint(parsing: v.string ?? "")
                    case "capacity":
                        if let c = v.int, c >= 1, c <= 1_000_000 { link.capacity = c } else {
                            spec.issues.append(GraphIssue(.invalidLink, at: loc(v, file), "capacity: expected an integer in 1...1000000 (there is no unbounded edge)"))
                        }
                    case "overflow":
                        if let p = OverflowPolicy(rawValue: v.string ?? "") { link.overflow = p } else {
                            spec.issues.append(GraphIssue(.invalidLink, at: loc(v, file), "overflow: expected block | drop-oldest | drop-newest, got '\(v.string ?? "")'"))
                        }
                    default:
                        spec.issues.append(GraphIssue(.invalidLink, at: loc(k, file), "unknown link key '\(k.string ?? "")'; expected from, to, capacity, overflow"))
                    }
                }
                if link.from.node.isEmpty || link.to.node.isEmpty {
                    spec.issues.append(GraphIssue(.invalidLink, at: at, "a link mapping needs `from:` and `to:`"))
                    continue
                }
                spec.links.append(link)
            } else {
                spec.issues.append(GraphIssue(.invalidLink, at: at, "a link is `a -> b` or { from: a, to: b, capacity: N, overflow: block }"))
            }
        }
    }

    // MARK: - Overrides

    static func apply(_ overrides: [Override], to spec: inout GraphSpec) {
        let cli = SourceLocation.commandLine()
        for o in overrides {
            guard let i = spec.nodes.firstIndex(where: { $0.id == o.node }) else {
                spec.issues.append(GraphIssue(.invalidOverride, at: cli, node: o.node,
                                              "--set \(o.node).\(o.key): no node '\(o.node)' in \(spec.file) (nodes: \(spec.nodes.map(\.id).joined(separator: ", ")))"))
                continue
            }
            if o.key == "executor" {
                if let e = ExecutorClass(rawValue: o.value) { spec.nodes[i].executor = e } else {
                    spec.issues.append(GraphIssue(.invalidOverride, at: cli, node: o.node,
                                                  "--set \(o.node).executor: expected \(ExecutorClass.allCases.map(\.rawValue).joined(separator: " | ")), got '\(o.value)'"))
                }
                continue
            }
            if o.key == "type" {
                spec.nodes[i].type = o.value
                spec.nodes[i].typeLocation = .commandLine("--set \(o.node).type")
                spec.nodes[i].typeOverridden = true
                continue
            }
            var v = scalarValue(o.value, plain: true)
            if o.value.hasPrefix("{") || o.value.hasPrefix("["), let n = try? Yams.compose(yaml: o.value) { v = value(n) }
            if !spec.nodes[i].params.keys.contains(o.key) { spec.nodes[i].paramOrder.append(o.key) }
            spec.nodes[i].params[o.key] = (v, .commandLine("--set \(o.node).\(o.key)"))
        }
    }
}
