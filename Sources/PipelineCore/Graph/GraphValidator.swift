/// A node after validation: its type's descriptor and its checked parameters.
public struct ResolvedNode: Sendable {
    /// Node id.
    public var id: String
    /// Its type.
    public var descriptor: NodeDescriptor
    /// Checked parameters with defaults filled in.
    public var config: NodeConfig
    /// The parameters decoded into the type's configuration (see ``NodeConfiguration``), once, here.
    public var configuration: any Sendable
    /// The executor the node runs on (the graph's `executor:` or the type's class).
    public var executor: ExecutorClass
    /// Restart policy, if any.
    public var restart: RestartPolicy?
    /// Audio format at its default output, when known before opening anything.
    public var outputFormat: AudioFormat?
}

/// A link after validation, with concrete ports and edge settings.
public struct ResolvedLink: Sendable, Hashable {
    public var fromNode: String
    public var fromPort: String
    public var toNode: String
    public var toPort: String
    public var capacity: Int
    public var overflow: OverflowPolicy
    /// The link closes a loop (it feeds a feedback input of a node upstream of its producer, as
    /// `speaker.out -> aec.ref` does): its consumer must not wait for its end of stream.
    public var closesLoop: Bool = false

    /// `from.port -> to.port`.
    public var label: String { "\(fromNode).\(fromPort) -> \(toNode).\(toPort)" }
}

/// A graph that passed validation: every node type exists, every parameter checks, every link
/// joins compatible ports, and there is no cycle. Nodes are in topological order.
public struct ValidatedGraph: Sendable {
    /// Graph name.
    public var name: String
    /// File it came from.
    public var file: String
    /// Nodes in topological order (sources first).
    public var nodes: [ResolvedNode]
    /// Links.
    public var links: [ResolvedLink]
    /// Non-fatal notes.
    public var warnings: [String]
    /// The environment variables the graph was loaded with (given to node factories).
    public var environment: [String: String] = [:]
    /// `latency_budget_ms`, if the graph sets one.
    public var latencyBudgetMs: Int?

    /// The node with id `id`.
    public func node(_ id: String) -> ResolvedNode? { nodes.first(where: { $0.id == id }) }
}

/// Checks a parsed graph against a registry and reports every problem at once.
///
/// The path from a graph to running nodes goes one way: the text is parsed (``GraphLoader``, variables
/// substituted into scalar values), or a ``GraphBuilder`` declares the same ``GraphSpec`` in code; the
/// plugins the graph names add their node types to the registry; then the passes below check it, each
/// reading what the ones before it resolved and none loading or opening anything; the resulting
/// ``ValidatedGraph`` is planned (``PipelinePlan``) and only then are nodes instantiated.
public enum GraphValidator {
    /// `path` as written in `file`: relative paths name a file in the graph file's folder when one is
    /// there, else stay relative to the working directory; absolute paths and `--set` values are kept.
    static func resolve(_ path: String, from file: String) -> String {
        guard !path.isEmpty, !path.hasPrefix("/"), !path.hasPrefix("~"), !file.hasPrefix("<") else { return path }
        let folder = (file as NSString).deletingLastPathComponent
        guard !folder.isEmpty else { return path }
        let candidate = (folder as NSString).appendingPathComponent(path)
        return FileManager.default.fileExists(atPath: candidate) ? candidate : path
    }

    /// Loads the plugins `spec` names into a copy of `registry`, then checks `spec` against it
    /// (``check(_:registry:)``). Throws a ``GraphError`` listing every problem (parse problems and
    /// plugins that failed to load included).
    public static func validate(_ spec: GraphSpec, registry: NodeRegistry) throws -> ValidatedGraph {
        var registry = registry
        var spec = spec
        spec.issues += registry.loadPlugins(of: spec)
        return try check(spec, registry: registry)
    }

    /// Checks `spec` against `registry` without side effects: node types and parameters, links and
    /// ports, order and cycles, loops, shared queues, required inputs, formats. The plugins `spec` names
    /// must already be in `registry` (``NodeRegistry/loadPlugins(of:)``).
    public static func check(_ spec: GraphSpec, registry: NodeRegistry) throws -> ValidatedGraph {
        var v = Validation(spec: spec)
        v.checkNodes(registry)
        v.checkLinks()
        v.orderNodes()
        v.checkLoops()
        v.checkSharedQueues()
        v.checkRequiredInputs()
        v.checkFormats()
        if !v.issues.isEmpty {
            throw GraphError(v.issues.sorted { ($0.location.file, $0.location.line, $0.location.column) < ($1.location.file, $1.location.line, $1.location.column) })
        }
        return ValidatedGraph(name: spec.name, file: spec.file, nodes: v.topo.compactMap { v.resolved[$0] },
                              links: v.links.map(\.0), warnings: v.warnings, environment: spec.environment,
                              latencyBudgetMs: spec.latencyBudgetMs)
    }

    /// What the passes share: each fills in what the later ones read.
    struct Validation {
        let spec: GraphSpec
        var issues: [GraphIssue]
        var warnings: [String]
        /// Node ids in declaration order.
        var order: [String] = []
        /// Nodes whose type and parameters resolved.
        var resolved: [String: ResolvedNode] = [:]
        /// Links whose ends and ports resolved, without repeats, with where each was declared.
        var links: [(ResolvedLink, SourceLocation)] = []
        /// `node.port` of feedback inputs that some link feeds.
        var feedbackPorts: Set<String> = []
        /// Labels of links whose overflow was not written.
        var defaultedOverflow: Set<String> = []
        /// Topological order (sources first); shorter than `order` when there is a cycle.
        var topo: [String] = []
        /// Links into each input, built once so that the later passes stay linear in nodes plus links.
        var incomingByInput: [Endpoint: [(ResolvedLink, SourceLocation)]] = [:]

        init(spec: GraphSpec) {
            self.spec = spec
            issues = spec.issues
            warnings = spec.warnings
        }

        func isFeedback(_ l: ResolvedLink) -> Bool { feedbackPorts.contains(l.toNode + "." + l.toPort) }

        /// Pass 1: ids, node types and parameters; each node's configuration decoded once.
        mutating func checkNodes(_ registry: NodeRegistry) {
            var nodesWithIssues: Set<String> = []
            var scannedIssues = 0
            var seenIDs: Set<String> = []
            var declarationChecked: Set<String> = []
            var declarationProblems: [String: [String]] = [:]
            for ns in spec.nodes {
                if ns.id.isEmpty || ns.id.contains(where: { !($0.isLetter || $0.isNumber || $0 == "_" || $0 == "-") }) {
                    issues.append(GraphIssue(.structure, at: ns.location, node: ns.id, "node id may use letters, digits, '_' and '-' only"))
                }
                guard seenIDs.insert(ns.id).inserted else {
                    issues.append(GraphIssue(.duplicateID, at: ns.location, node: ns.id, "duplicate node id '\(shown(ns.id))' (each node id may appear once)"))
                    continue
                }
                order.append(ns.id)
                guard !ns.type.isEmpty else {
                    issues.append(GraphIssue(.missingParameter, at: ns.location, node: ns.id, "missing `type:`"))
                    continue
                }
                guard let d = registry.descriptor(ns.type) else {
                    let hint = suggestion(ns.type, among: registry.types).map { " (did you mean '\($0)'?)" } ?? ""
                    issues.append(GraphIssue(.unknownType, at: ns.typeLocation, node: ns.id,
                                             "unknown node type '\(shown(ns.type))'\(hint); `voicepipe nodes` lists the types"))
                    continue
                }
                if declarationChecked.insert(d.type).inserted {
                    declarationProblems[d.type] = registry.declarationProblems(d.type)
                }
                for problem in declarationProblems[d.type] ?? [] {
                    issues.append(GraphIssue(.invalidParameter, at: ns.typeLocation, node: ns.id,
                                             "node type \(d.type)\(d.plugin.map { " (plugin \($0.name))" } ?? "") declares its parameters inconsistently: \(problem)"))
                }
                var values: [String: ParamValue] = [:]
                for key in ns.paramOrder {
                    guard let (value, at) = ns.params[key] else { continue }
                    guard let p = d.parameter(key) else {
                        if ns.typeOverridden && !at.isCommandLine {
                            warnings.append("\(at): node '\(ns.id)': parameter '\(key)' does not apply to \(ns.type) (type set with --set); ignored")
                            continue
                        }
                        let hint = suggestion(key, among: d.parameters.map(\.name)).map { " (did you mean '\($0)'?)" } ?? ""
                        issues.append(GraphIssue(.unknownParameter, at: at, node: ns.id,
                                                 "unknown parameter '\(shown(key))' for \(d.type)\(hint); accepted: \(d.parameters.map(\.name).joined(separator: ", "))"))
                        continue
                    }
                    if value == .null { continue }
                    switch p.type.check(value) {
                    case .success(let v):
                        values[key] = v
                        if p.type == .path, !at.inCode, case .string(let path) = v {
                            values[key] = .string(GraphValidator.resolve(path, from: at.file))
                        }
                    case .failure(let e):
                        // Numbers and booleans that arrived as strings (e.g. from "${RATE}") are accepted when they parse.
                        if case .string(let s) = value, case .success(let v) = p.type.check(GraphLoader.scalarValue(s, plain: true)) {
                            values[key] = v
                        } else {
                            issues.append(GraphIssue(.invalidParameter, at: at, node: ns.id, "parameter '\(key)': \(e.message)"))
                        }
                    }
                }
                for p in d.parameters where values[p.name] == nil {
                    if let dv = p.defaultValue { values[p.name] = dv }
                    else if p.required {
                        issues.append(GraphIssue(.missingParameter, at: ns.location, node: ns.id,
                                                 "missing required parameter '\(p.name)' (\(p.type)): \(p.doc)"))
                    }
                }
                let config = NodeConfig(id: ns.id, type: d.type, values: values)
                var configuration: any Sendable = config
                while scannedIssues < issues.count {
                    if let n = issues[scannedIssues].node { nodesWithIssues.insert(n) }
                    scannedIssues += 1
                }
                if !nodesWithIssues.contains(ns.id) {
                    do {
                        configuration = try d.decode(config)
                        for message in d.check(configuration, spec.environment) {
                            issues.append(GraphIssue(.invalidParameter, at: ns.location, node: ns.id, message))
                        }
                    } catch let e as DecodingError {
                        issues.append(decodingIssue(e, node: ns, type: d.type))
                    } catch {
                        issues.append(GraphIssue(.invalidParameter, at: ns.location, node: ns.id, "\(error)"))
                    }
                }
                resolved[ns.id] = ResolvedNode(id: ns.id, descriptor: d, config: config, configuration: configuration,
                                               executor: ns.executor ?? (configuration as? any NodeConfiguration)?.executor ?? d.executor,
                                               restart: ns.restart, outputFormat: nil)
            }
        }

        /// Pass 2: each link's ends, ports, kinds and codecs.
        mutating func checkLinks() {
            let known = Set(order)
            let knownNames = Array(known)
            var suggestions = 0
            var found: [(ResolvedLink, SourceLocation)] = []
            for l in spec.links {
                var ok = true
                for end in [l.from.node, l.to.node] where !known.contains(end) {
                    // Suggestions are bounded: a graph of thousands of bad links stays fast to check.
                    suggestions += 1
                    let hint = suggestions > 50 ? "" : suggestion(end, among: knownNames).map { " (did you mean '\($0)'?)" } ?? ""
                    issues.append(GraphIssue(.unknownNode, at: l.location, node: end, "link refers to unknown node '\(shown(end))'\(hint)"))
                    ok = false
                }
                guard ok, let fromNode = resolved[l.from.node], let toNode = resolved[l.to.node] else { continue }
                guard let out = outputPort(fromNode.descriptor, l.from.port, inChain: l.from.inChain, at: l.location, node: l.from.node, issues: &issues),
                      let inp = inputPort(toNode.descriptor, l.to.port, inChain: l.to.inChain, at: l.location, node: l.to.node, issues: &issues) else { continue }
                let common = out.kinds.intersection(inp.kinds)
                if common.isEmpty {
                    issues.append(GraphIssue(.incompatibleLink, at: l.location, node: l.to.node,
                                             "cannot link \(l.from.node).\(out.name) (\(out.kindDescription)) to \(l.to.node).\(inp.name) (\(inp.kindDescription))"))
                    continue
                }
                if common == [.encoded], let oc = out.codecs, let ic = inp.codecs, oc.isDisjoint(with: ic) {
                    issues.append(GraphIssue(.incompatibleLink, at: l.location, node: l.to.node,
                                             "cannot link \(l.from.node).\(out.name) (\(out.kindDescription)) to \(l.to.node).\(inp.name) (\(inp.kindDescription)): codecs differ"))
                    continue
                }
                let overflow = l.overflow ?? fromNode.descriptor.defaultOverflow
                let link = ResolvedLink(fromNode: l.from.node, fromPort: out.name, toNode: l.to.node, toPort: inp.name,
                                        capacity: l.capacity ?? GraphLoader.defaultCapacity, overflow: overflow)
                if inp.feedback {
                    feedbackPorts.insert(link.toNode + "." + link.toPort)
                    if l.overflow == nil { defaultedOverflow.insert(link.label) }
                }
                found.append((link, l.location))
            }
            var seen: Set<ResolvedLink> = []
            links = found.filter { seen.insert($0.0).inserted }
        }

        /// Pass 3: topological order by Kahn's algorithm, and cycles. Links into feedback inputs (an echo
        /// canceller's reference, an `interrupt`) may close a loop: they do not order the nodes.
        mutating func orderNodes() {
            var outgoing: [String: [ResolvedLink]] = [:]
            var indegree: [String: Int] = [:]
            for id in order { indegree[id] = 0 }
            for (l, _) in links where !isFeedback(l) {
                outgoing[l.fromNode, default: []].append(l)
                indegree[l.toNode, default: 0] += 1
            }
            var queue = order.filter { indegree[$0] == 0 }
            var head = 0
            while head < queue.count {
                let n = queue[head]
                head += 1
                topo.append(n)
                for l in outgoing[n] ?? [] {
                    indegree[l.toNode]! -= 1
                    if indegree[l.toNode] == 0 { queue.append(l.toNode) }
                }
            }
            guard topo.count < order.count else { return }
            let sorted = Set(topo)
            let inCycle = order.filter { !sorted.contains($0) }
            let cycleSet = Set(inCycle)
            let at = links.first(where: { cycleSet.contains($0.0.toNode) && cycleSet.contains($0.0.fromNode) })?.1
                ?? SourceLocation(file: spec.file, line: 0, column: 0)
            issues.append(GraphIssue(.cycle, at: at, node: inCycle.first,
                                     "links form a cycle through \(inCycle.joined(separator: " -> ")); a graph must be acyclic except through feedback inputs (such as aec.ref and the sinks' interrupt)"))
        }

        /// Pass 4: links that close a loop. Such a link must never wait: under `block` each node of the
        /// loop could wait for the next. They default to drop-oldest; `block` written on one is an error.
        /// A link into a feedback input closes a loop when its consumer reaches its producer through any path.
        mutating func checkLoops() {
            var allOutgoing: [String: [String]] = [:]
            for (l, _) in links { allOutgoing[l.fromNode, default: []].append(l.toNode) }
            func reaches(_ from: String, _ to: String) -> Bool {
                if from == to { return true }
                var seen: Set<String> = [from]
                var stack = [from]
                while let n = stack.popLast() {
                    for m in allOutgoing[n] ?? [] where seen.insert(m).inserted {
                        if m == to { return true }
                        stack.append(m)
                    }
                }
                return false
            }
            var loosened: Set<String> = []
            for i in links.indices where isFeedback(links[i].0) {
                let l = links[i].0
                guard reaches(l.toNode, l.fromNode) else { continue }
                links[i].0.closesLoop = true
                guard l.overflow == .block else { continue }
                if defaultedOverflow.contains(l.label) {
                    links[i].0.overflow = .dropOldest
                    loosened.insert(l.toNode + "." + l.toPort)
                } else {
                    issues.append(GraphIssue(.invalidLink, at: links[i].1, node: l.toNode,
                                             "\(l.label) closes a loop, so it cannot block (each node of the loop could wait for the next); use overflow: drop-oldest or drop-newest"))
                }
            }
            // Links fanning into a loosened input share its queue and its policy.
            for i in links.indices where loosened.contains(links[i].0.toNode + "." + links[i].0.toPort)
                && defaultedOverflow.contains(links[i].0.label) {
                links[i].0.overflow = .dropOldest
            }
        }

        /// Pass 5: links that fan into one input share its queue, so they must agree on its capacity and policy.
        mutating func checkSharedQueues() {
            var firstInto: [String: (ResolvedLink, SourceLocation)] = [:]
            for (l, at) in links {
                incomingByInput[Endpoint(node: l.toNode, port: l.toPort), default: []].append((l, at))
                let key = "\(l.toNode).\(l.toPort)"
                guard let (first, firstAt) = firstInto[key] else { firstInto[key] = (l, at); continue }
                if first.capacity != l.capacity || first.overflow != l.overflow {
                    issues.append(GraphIssue(.invalidLink, at: at, node: l.toNode,
                                             "\(l.label) shares the queue of input '\(l.toNode).\(l.toPort)' with \(first.label) (\(firstAt)) but asks for capacity \(l.capacity), overflow \(l.overflow.rawValue) where that link has capacity \(first.capacity), overflow \(first.overflow.rawValue); give links into one input the same capacity and overflow"))
                }
            }
        }

        /// Pass 6: every required input is fed.
        mutating func checkRequiredInputs() {
            for ns in spec.nodes {
                guard let r = resolved[ns.id], r.descriptor.inputs.contains(where: \.required) else { continue }
                for p in r.descriptor.inputs where p.required && incomingByInput[Endpoint(node: ns.id, port: p.name)] == nil {
                    issues.append(GraphIssue(.unconnectedInput, at: ns.location, node: ns.id,
                                             "input '\(p.name)' (\(p.kindDescription)) is not connected; add a link `something -> \(ns.id)\(p.name == "in" ? "" : "." + p.name)`"))
                }
            }
        }

        /// Pass 7: audio formats, in topological order: what each node delivers, and whether the next accepts it.
        mutating func checkFormats() {
            for id in topo {
                guard var r = resolved[id] else { continue }
                let incoming = incomingByInput[Endpoint(node: id, port: r.descriptor.defaultInput?.name ?? "in")] ?? []
                var inFormat: AudioFormat?
                for (l, at) in incoming {
                    guard let up = resolved[l.fromNode], let f = up.outputFormat, l.fromPort != "events" else { continue }
                    if let msg = r.descriptor.format.accepts(r.configuration, f) {
                        issues.append(GraphIssue(.incompatibleLink, at: at, node: id, "\(l.fromNode) delivers \(f): \(msg)"))
                    }
                    inFormat = f
                }
                r.outputFormat = r.descriptor.format.output(r.configuration, inFormat)
                resolved[id] = r
            }
        }
    }

    /// A configuration that the parameter schema accepted but its struct could not decode.
    static func decodingIssue(_ error: DecodingError, node ns: NodeSpec, type: String) -> GraphIssue {
        let (path, what): ([any CodingKey], String) = switch error {
        case .typeMismatch(_, let c), .valueNotFound(_, let c), .dataCorrupted(let c): (c.codingPath, c.debugDescription)
        case .keyNotFound(let k, let c): (c.codingPath + [k], c.debugDescription)
        @unknown default: ([], "\(error)")
        }
        let name = path.first.map { ParameterDecoder.snakeCase($0.stringValue) }
        let at = name.flatMap { ns.params[$0]?.location } ?? ns.location
        let param = name.map { "parameter '\($0)': " } ?? ""
        return GraphIssue(.invalidParameter, at: at, node: ns.id, "\(param)\(what) (\(type))")
    }

    /// Loads and validates a file in one step.
    public static func load(path: String, registry: NodeRegistry, overrides: [Override] = [],
                            environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ValidatedGraph {
        try validate(GraphLoader.load(path: path, environment: environment, overrides: overrides), registry: registry)
    }

    static func outputPort(_ d: NodeDescriptor, _ name: String?, inChain: Bool = false, at: SourceLocation, node: String, issues: inout [GraphIssue]) -> PortSpec? {
        guard let name else {
            if let p = d.defaultOutput { return p }
            issues.append(GraphIssue(.unknownPort, at: at, node: node, "\(d.type) has no outputs (it is a sink)"))
            return nil
        }
        if inChain {
            if let p = d.outputs.first(where: { $0.name == name }) { return p }
            if d.inputs.contains(where: { $0.name == name }), let p = d.defaultOutput { return p }
        }
        if let p = d.outputs.first(where: { $0.name == name }) { return p }
        issues.append(GraphIssue(.unknownPort, at: at, node: node,
                                 "\(d.type) has no output port '\(name)'; outputs: \(d.outputs.map(\.name).joined(separator: ", "))"))
        return nil
    }

    static func inputPort(_ d: NodeDescriptor, _ name: String?, inChain: Bool = false, at: SourceLocation, node: String, issues: inout [GraphIssue]) -> PortSpec? {
        guard let name else {
            if let p = d.defaultInput { return p }
            issues.append(GraphIssue(.unknownPort, at: at, node: node, "\(d.type) has no inputs (it is a source)"))
            return nil
        }
        if inChain {
            if let p = d.inputs.first(where: { $0.name == name }) { return p }
            if d.outputs.contains(where: { $0.name == name }), let p = d.defaultInput { return p }
        }
        if let p = d.inputs.first(where: { $0.name == name }) { return p }
        issues.append(GraphIssue(.unknownPort, at: at, node: node,
                                 "\(d.type) has no input port '\(name)'; inputs: \(d.inputs.isEmpty ? "none" : d.inputs.map(\.name).joined(separator: ", "))"))
        return nil
    }

    /// A name from the graph as shown in a message: long names are cut, so a message names the
    /// problem instead of echoing megabytes of input.
    static func shown(_ name: String) -> String {
        guard name.count > 80 else { return name }
        return String(name.prefix(60)) + "…(\(name.count) characters)"
    }

    /// The closest name by edit distance, if close enough to be a likely typo.
    static func suggestion(_ word: String, among names: [String]) -> String? {
        // A name far longer than any candidate cannot be a typo of one; the edit distance is
        // quadratic, so long input is not compared at all.
        guard word.utf8.count <= 64 else { return nil }
        func distance(_ a: [Character], _ b: [Character]) -> Int {
            if a.isEmpty { return b.count }
            if b.isEmpty { return a.count }
            var prev = Array(0...b.count)
            for i in 1...a.count {
                var cur = [i] + Array(repeating: 0, count: b.count)
                for j in 1...b.count {
                    cur[j] = min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
                }
                prev = cur
            }
            return prev[b.count]
        }
        let w = Array(word)
        let best = names.map { ($0, distance(w, Array($0))) }.min { $0.1 < $1.1 }
        guard let best, best.1 <= max(2, word.count / 3) else { return nil }
        return best.0
    }
}

import Foundation
