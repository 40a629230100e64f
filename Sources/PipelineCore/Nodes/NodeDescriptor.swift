/// A named, typed port of a node type.
public struct PortSpec: Sendable, Hashable {
    /// Port name (`in`, `out`, `events`, `text`, ...).
    public var name: String
    /// Frame kinds the port carries or accepts.
    public var kinds: Set<FrameKind>
    /// For encoded frames: the codecs accepted or produced (`nil` = any).
    public var codecs: Set<String>?
    /// For inputs: the graph is invalid when this input is left unconnected.
    public var required: Bool
    /// One line for `voicepipe nodes`.
    public var doc: String
    /// For inputs: a link into this port may close a loop (a loudspeaker's audio back to an echo
    /// canceller's reference, a barge-in decision back to the sink that plays the answer). The node
    /// never waits for this input's end of stream: it stops reading it when its other inputs end.
    /// A link that closes a loop through such a port must not block (it defaults to `drop-oldest`).
    public var feedback: Bool

    /// Creates a port specification.
    public init(_ name: String, _ kinds: Set<FrameKind>, codecs: Set<String>? = nil, required: Bool = true, feedback: Bool = false, doc: String = "") {
        self.name = name
        self.kinds = kinds
        self.codecs = codecs
        self.required = required
        self.feedback = feedback
        self.doc = doc
    }

    /// The optional `interrupt` input of sinks and responders: any event flushes what is queued.
    public static func interrupt(_ doc: String) -> PortSpec {
        PortSpec("interrupt", [.event], required: false, feedback: true, doc: doc)
    }

    /// The conventional `events` output.
    public static let events = PortSpec("events", [.event], required: false, doc: "events emitted by the node")

    /// Short description such as `audio` or `encoded(opus)`.
    public var kindDescription: String {
        kinds.map(\.rawValue).sorted().map { k in
            if k == "encoded", let codecs { return "encoded(" + codecs.sorted().joined(separator: "|") + ")" }
            return k
        }.joined(separator: "|")
    }
}

/// How a node type maps the audio format at its default input to the one at its audio outputs,
/// and which input formats it accepts. Used by validation, before anything opens.
///
/// The closures receive the node's decoded configuration (see ``typed(_:output:accepts:)``).
public struct FormatRule: Sendable {
    /// Output format, given the node's configuration and its input format (`nil` when unknown).
    public var output: @Sendable (any Sendable, AudioFormat?) -> AudioFormat?
    /// Returns a message when the node cannot take `format` on its audio input.
    public var accepts: @Sendable (any Sendable, AudioFormat) -> String?

    /// Creates a rule over an untyped configuration.
    public init(output: @escaping @Sendable (any Sendable, AudioFormat?) -> AudioFormat?,
                accepts: @escaping @Sendable (any Sendable, AudioFormat) -> String? = { _, _ in nil }) {
        self.output = output
        self.accepts = accepts
    }

    /// A rule written against a node type's configuration `C`.
    public static func typed<C: Sendable>(_ type: C.Type = C.self,
                                          output: @escaping @Sendable (C, AudioFormat?) -> AudioFormat?,
                                          accepts: @escaping @Sendable (C, AudioFormat) -> String? = { _, _ in nil }) -> FormatRule {
        FormatRule(output: { c, f in (c as? C).flatMap { output($0, f) } },
                   accepts: { c, f in (c as? C).flatMap { accepts($0, f) } })
    }

    /// Audio passes through unchanged; any format accepted.
    public static let passthrough = FormatRule(output: { _, f in f })
    /// No audio output.
    public static let none = FormatRule(output: { _, _ in nil })
    /// Always delivers `format` (`nil` = unknown until the node opens).
    public static func fixed(_ format: AudioFormat?) -> FormatRule { FormatRule(output: { _, _ in format }) }

    /// For untyped (``NodeConfig``) descriptors: delivers `rate`/`channels` from the parameters, falling
    /// back to the given defaults (`nil` = unknown until the node opens, e.g. a file's own format).
    public static func fromParameters(rate: Int?, channels: Int?) -> FormatRule {
        typed(NodeConfig.self, output: { config, _ in
            guard let r = config.int("rate") ?? rate, let c = config.int("channels") ?? channels else { return nil }
            return AudioFormat(sampleRate: r, channels: c)
        })
    }
}

/// Overflow policy of an edge when its queue is full.
public enum OverflowPolicy: String, Sendable, Hashable, CaseIterable, Decodable {
    /// Lossless back-pressure: the producer is suspended until there is room.
    case block
    /// The oldest queued frame is dropped (and counted) to make room.
    case dropOldest = "drop-oldest"
    /// The new frame is dropped (and counted).
    case dropNewest = "drop-newest"
}

/// Where a node's task runs: with the latency-critical work (sources, sinks, RTP, jitter buffer) or with
/// bulk work (recognizers, encoders fed whole slices, uploads). A graph may override it per node
/// with `executor: realtime | bulk`.
public enum ExecutorClass: String, Sendable, Hashable, CaseIterable, Decodable {
    /// Timing-critical: runs apart from bulk work, at real-time priority where the system allows it.
    case realtime
    /// Throughput work that may take a while per frame.
    case bulk
}

/// Everything the runtime needs to know about a node type: name, ports, parameters and a factory.
///
/// A node type declares its configuration as a ``NodeConfiguration``; the validator decodes it once
/// and the factory receives the typed value with a ``NodeEnvironment``:
///
/// ```swift
/// let gain = NodeDescriptor(
///     type: "gain", summary: "Multiplies samples by a factor",
///     inputs: [PortSpec("in", [.audio])], outputs: [PortSpec("out", [.audio])],
///     configuration: GainConfiguration.self,
///     make: { config, env in GainNode(gainDb: config.gainDb) })
/// ```
public struct NodeDescriptor: Sendable {
    /// Type name used in YAML (`file-source`, `vad`, ...).
    public var type: String
    /// One line for `voicepipe nodes`.
    public var summary: String
    /// Family, for documentation (`sources`, `sinks`, `DSP`, `codecs`, `services`).
    public var family: String
    /// Input ports; a node type without inputs is a source.
    public var inputs: [PortSpec]
    /// Output ports; a node type without outputs is a sink.
    public var outputs: [PortSpec]
    /// Accepted parameters. Anything else in the YAML is an error.
    public var parameters: [ParamSpec]
    /// Audio format mapping, for validation.
    public var format: FormatRule
    /// Overflow policy of edges leaving this node when the link does not say
    /// (`drop-oldest` for live capture, `block` otherwise).
    public var defaultOverflow: OverflowPolicy
    /// The executor the node's task runs on unless the graph says otherwise.
    public var executor: ExecutorClass
    /// The plugin that registered this type (its name and path), `nil` for types linked in.
    public var plugin: PluginInfo?
    /// Its nodes are ``FrameProcessor``s that may be called directly in their producer's task when a
    /// plain chain links them (operator fusion, ``PipelinePlan``), instead of each running in a task of
    /// its own behind a queue. Declared by the type, so that a plan is made before any node exists; a
    /// type that declares it and builds a node that is not a frame processor fails when built.
    public var fusable: Bool
    /// Decodes checked parameter values (defaults applied) into the type's configuration.
    /// Throws `DecodingError` or ``ConfigurationError``; the validator reports it with the node's location.
    public var decode: @Sendable (NodeConfig) throws -> any Sendable
    /// Problems with combinations of parameters, given the decoded configuration.
    public var check: @Sendable (_ configuration: any Sendable, _ environment: [String: String]) -> [String]
    /// Creates a node instance from the decoded configuration. Called when the pipeline is built
    /// (and again on restart).
    public var build: @Sendable (any Sendable, NodeEnvironment) throws -> any Node
    /// Where `parameters` and the configuration's properties disagree (a parameter its decoding never
    /// reads, a name it reads that no parameter declares); see ``ParameterDecoder/schemaProblems(_:parameters:)``.
    /// Always empty for descriptors over the untyped ``NodeConfig``.
    public var declarationProblems: @Sendable ([ParamSpec]) -> [String]

    /// Creates a descriptor whose configuration is the typed value `Configuration`.
    public init<Configuration: NodeConfiguration>(
        type: String, summary: String, family: String = "custom",
        inputs: [PortSpec] = [PortSpec("in", [.audio])],
        outputs: [PortSpec] = [PortSpec("out", [.audio])],
        configuration: Configuration.Type,
        format: FormatRule = .passthrough,
        defaultOverflow: OverflowPolicy = .block,
        executor: ExecutorClass = .bulk,
        fusable: Bool = false,
        make: @escaping @Sendable (Configuration, NodeEnvironment) throws -> any Node
    ) {
        self.type = type
        self.summary = summary
        self.family = family
        self.inputs = inputs
        self.outputs = outputs
        self.parameters = Configuration.parameters
        self.format = format
        self.defaultOverflow = defaultOverflow
        self.executor = executor
        self.fusable = fusable
        self.plugin = nil
        self.decode = { config in try ParameterDecoder.decode(Configuration.self, from: config.values) }
        self.declarationProblems = { specs in ParameterDecoder.schemaProblems(Configuration.self, parameters: specs) }
        self.check = { c, environment in (c as? Configuration)?.problems(environment: environment) ?? [] }
        self.build = { c, env in
            guard let c = c as? Configuration else {
                throw NodeError(.configurationMismatch, "node '\(env.id)': configuration is not a \(Configuration.self)")
            }
            return try make(c, env)
        }
    }

    /// Creates a descriptor whose factory reads the untyped ``NodeConfig`` (parameters by name).
    /// Prefer the typed form; this one stays for node types written before it.
    public init(type: String, summary: String, family: String = "custom",
                inputs: [PortSpec] = [PortSpec("in", [.audio])],
                outputs: [PortSpec] = [PortSpec("out", [.audio])],
                parameters: [ParamSpec] = [],
                format: FormatRule = .passthrough,
                defaultOverflow: OverflowPolicy = .block,
                executor: ExecutorClass = .bulk,
                fusable: Bool = false,
                check: @escaping @Sendable (NodeConfig) -> [String] = { _ in [] },
                make: @escaping @Sendable (NodeConfig) throws -> any Node) {
        self.type = type
        self.summary = summary
        self.family = family
        self.inputs = inputs
        self.outputs = outputs
        self.parameters = parameters
        self.format = format
        self.defaultOverflow = defaultOverflow
        self.executor = executor
        self.fusable = fusable
        self.plugin = nil
        self.decode = { $0 }
        self.declarationProblems = { _ in [] }
        self.check = { c, _ in (c as? NodeConfig).map(check) ?? [] }
        self.build = { c, env in
            guard let c = c as? NodeConfig else {
                throw NodeError(.configurationMismatch, "node '\(env.id)': configuration is not a NodeConfig")
            }
            return try make(c)
        }
    }

    /// Decodes `values` (defaults applied for what is missing) and builds a node, outside any graph:
    /// for tests and embedding apps. Throws ``ConfigurationError`` for values the type does not accept.
    public func instantiate(_ values: [String: ParamValue] = [:], environment: NodeEnvironment? = nil) throws -> any Node {
        let env = environment ?? NodeEnvironment(id: type)
        return try build(configuration(values, id: env.id, variables: env.variables), env)
    }

    /// The decoded configuration for `values` (checked, defaults applied; `variables` are the environment
    /// variables checks may look at, as a graph's would be).
    public func configuration(_ values: [String: ParamValue] = [:], id: String = "node", variables: [String: String] = [:]) throws -> any Sendable {
        let checked = try ParamSpec.checked(values, against: parameters)
        let c = try decode(NodeConfig(id: id, type: type, values: checked))
        let problems = check(c, variables)
        if !problems.isEmpty { throw ConfigurationError(problems.joined(separator: "; ")) }
        return c
    }

    /// True for node types without inputs.
    public var isSource: Bool { inputs.isEmpty }

    /// The input used when a link names no port: `in`, else the first input.
    public var defaultInput: PortSpec? { inputs.first(where: { $0.name == "in" }) ?? inputs.first }
    /// The output used when a link names no port: `out`, else the first output that is not `events`.
    public var defaultOutput: PortSpec? {
        outputs.first(where: { $0.name == "out" }) ?? outputs.first(where: { $0.name != "events" }) ?? outputs.first
    }

    /// The parameter specification named `name`.
    public func parameter(_ name: String) -> ParamSpec? { parameters.first(where: { $0.name == name }) }
}

/// The set of node types a graph may use.
///
/// The built-in types come from `BuiltinNodes.registry()` in the `Nodes` module; an app or a user's
/// package adds its own with ``register(_:)`` and runs the same CLI with the result.
public struct NodeRegistry: Sendable {
    private var byType: [String: NodeDescriptor] = [:]

    /// An empty registry.
    public init() {}

    /// Adds (or replaces) a node type.
    public mutating func register(_ descriptor: NodeDescriptor) {
        byType[descriptor.type] = descriptor
    }

    /// Where the parameter list of `type` and its configuration disagree (empty when they agree, or for
    /// an unknown type). The validator asks this of every type a graph uses, once per validation, and
    /// refuses a type whose two declarations disagree, naming each disagreement. (Checked when a type is
    /// used rather than when it is registered: checking all of them in every process, `voicepipe
    /// --version` included, cost 6 ms of start-up in the Swift runtime's conformance look-ups.)
    public func declarationProblems(_ type: String) -> [String] {
        guard let d = byType[type] else { return [] }
        return d.declarationProblems(d.parameters)
    }

    /// The descriptor for `type`.
    public func descriptor(_ type: String) -> NodeDescriptor? { byType[type] }

    /// All descriptors, sorted by family then type.
    public var all: [NodeDescriptor] {
        byType.values.sorted { ($0.family, $0.type) < ($1.family, $1.type) }
    }

    /// All type names, sorted.
    public var types: [String] { byType.keys.sorted() }
}
