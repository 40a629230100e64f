import Foundation

/// Declares a graph in Swift code. It makes the same ``GraphSpec`` a graph file makes, and the same
/// validator checks it, so a graph built here is reported, planned and run exactly as one read from
/// YAML. Problems are located at the Swift call that declared the node or link.
///
/// ```swift
/// var g = GraphBuilder(name: "meter")
/// g.node("mic", "file-source", ["path": "speech.wav"])
/// g.node("vol", "volume", ["interval_ms": 100])
/// g.node("out", "null-sink")
/// g.chain("mic", "vol", "out")
/// let pipeline = try Pipeline(g, registry: BuiltinNodes.registry())
/// ```
///
/// Values are taken as they are: a builder has no `${VAR}` substitution and no `--set` overrides,
/// since Swift code composes its values itself.
public struct GraphBuilder: Sendable {
    /// What has been declared so far, as the validator sees it.
    public private(set) var spec: GraphSpec

    /// Starts an empty graph. `file` names the graph in messages (the declaring source file by default).
    public init(name: String = "graph", file: String = #fileID, environment: [String: String] = [:]) {
        spec = GraphSpec(file: file, name: name, nodes: [], links: [], issues: [], warnings: [])
        spec.environment = environment
    }

    /// Sinks report frames older than this as `late` (a graph file's `latency_budget_ms:`).
    public var latencyBudgetMs: Int? {
        get { spec.latencyBudgetMs }
        set { spec.latencyBudgetMs = newValue }
    }

    /// The environment variables node factories and configuration checks see.
    public var environment: [String: String] {
        get { spec.environment }
        set { spec.environment = newValue }
    }

    /// Declares node `id` of node type `type` with `parameters` (checked against the type's parameters
    /// at validation, as a graph file's are).
    public mutating func node(_ id: String, _ type: String, _ parameters: [String: ParamValue] = [:],
                              restart: RestartPolicy? = nil, executor: ExecutorClass? = nil,
                              file: String = #fileID, line: Int = #line, column: Int = #column) {
        let at = SourceLocation.code(file: file, line: line, column: column)
        let order = parameters.keys.sorted()
        var params: [String: (value: ParamValue, location: SourceLocation)] = [:]
        for key in order { params[key] = (parameters[key]!, at) }
        spec.nodes.append(NodeSpec(id: id, type: type, location: at, typeLocation: at, params: params, paramOrder: order,
                                   restart: restart, executor: executor))
    }

    /// Links `from` (`node` or `node.port`, an output) to `to` (`node` or `node.port`, an input).
    public mutating func link(_ from: String, to: String, capacity: Int? = nil, overflow: OverflowPolicy? = nil,
                              file: String = #fileID, line: Int = #line, column: Int = #column) {
        let at = SourceLocation.code(file: file, line: line, column: column)
        if let capacity, !(1...1_000_000).contains(capacity) {
            spec.issues.append(GraphIssue(.invalidLink, at: at, "capacity: expected an integer in 1...1000000 (there is no unbounded edge), got \(capacity)"))
        }
        spec.links.append(LinkSpec(from: Endpoint(parsing: from), to: Endpoint(parsing: to), capacity: capacity, overflow: overflow, location: at))
    }

    /// Links a chain `a -> b.port -> c`, as a graph file's link chain does: a middle element's port
    /// names its input for the incoming link and, when it has an output of that name, its output for
    /// the outgoing one.
    public mutating func chain(_ elements: String..., file: String = #fileID, line: Int = #line, column: Int = #column) {
        let at = SourceLocation.code(file: file, line: line, column: column)
        guard elements.count >= 2, !elements.contains(where: { $0.trimmingCharacters(in: .whitespaces).isEmpty }) else {
            spec.issues.append(GraphIssue(.invalidLink, at: at, "a chain links at least two elements (got \(elements))"))
            return
        }
        spec.links += LinkSpec.chain(elements, location: at)
    }

    /// Names a plugin (a shared-library path, or a name looked up in `VOICEPIPE_PLUGIN_PATH`) whose node
    /// types the graph uses.
    public mutating func plugin(_ name: String, file: String = #fileID, line: Int = #line, column: Int = #column) {
        spec.plugins.append(PluginReference(name: name, location: SourceLocation.code(file: file, line: line, column: column)))
    }

    /// Loads the graph's plugins into `registry` and validates the graph: every problem at once, as a
    /// ``GraphError``.
    public func validate(registry: NodeRegistry) throws -> ValidatedGraph {
        try GraphValidator.validate(spec, registry: registry)
    }
}

extension Pipeline {
    /// Validates and builds the graph `builder` declares (nothing runs yet).
    public convenience init(_ builder: GraphBuilder, registry: NodeRegistry, options: Options = Options()) throws {
        try self.init(graph: builder.validate(registry: registry), options: options)
    }
}
