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

    /// Creates a port specification.
    public init(_ name: String, _ kinds: Set<FrameKind>, codecs: Set<String>? = nil, required: Bool = true, doc: String = "") {
        self.name = name
        self.kinds = kinds
        self.codecs = codecs
        self.required = required
        self.doc = doc
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
public struct FormatRule: Sendable {
    /// Output format, given the node's parameters and its input format (`nil` when unknown).
    public var output: @Sendable (NodeConfig, AudioFormat?) -> AudioFormat?
    /// Returns a message when the node cannot take `format` on its audio input.
    public var accepts: @Sendable (NodeConfig, AudioFormat) -> String?

    /// Creates a rule.
    public init(output: @escaping @Sendable (NodeConfig, AudioFormat?) -> AudioFormat?,
                accepts: @escaping @Sendable (NodeConfig, AudioFormat) -> String? = { _, _ in nil }) {
        self.output = output
        self.accepts = accepts
    }

    /// Audio passes through unchanged; any format accepted.
    public static let passthrough = FormatRule(output: { _, f in f })
    /// No audio output.
    public static let none = FormatRule(output: { _, _ in nil })

    /// The node delivers `rate`/`channels` from its parameters, falling back to the given defaults
    /// (`nil` = unknown until the node opens, e.g. a file's own format).
    public static func fromParameters(rate: Int?, channels: Int?) -> FormatRule {
        FormatRule(output: { config, _ in
            guard let r = config.int("rate") ?? rate, let c = config.int("channels") ?? channels else { return nil }
            return AudioFormat(sampleRate: r, channels: c)
        })
    }
}

/// Overflow policy of an edge when its queue is full.
public enum OverflowPolicy: String, Sendable, Hashable, CaseIterable {
    /// Lossless back-pressure: the producer is suspended until there is room.
    case block
    /// The oldest queued frame is dropped (and counted) to make room.
    case dropOldest = "drop-oldest"
    /// The new frame is dropped (and counted).
    case dropNewest = "drop-newest"
}

/// Everything the runtime needs to know about a node type: name, ports, parameters and a factory.
///
/// ```swift
/// let gain = NodeDescriptor(
///     type: "gain", summary: "Multiplies samples by a factor",
///     inputs: [PortSpec("in", [.audio])], outputs: [PortSpec("out", [.audio])],
///     parameters: [ParamSpec("factor", .double, default: .double(1), doc: "linear gain")],
///     make: { config in GainNode(factor: config.double("factor", default: 1)) })
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
    /// Extra validation of parameter combinations; returns messages for problems.
    public var check: @Sendable (NodeConfig) -> [String]
    /// Creates a node instance. Called when the pipeline starts (and again on restart).
    public var make: @Sendable (NodeConfig) throws -> any Node

    /// Creates a descriptor.
    public init(type: String, summary: String, family: String = "custom",
                inputs: [PortSpec] = [PortSpec("in", [.audio])],
                outputs: [PortSpec] = [PortSpec("out", [.audio])],
                parameters: [ParamSpec] = [],
                format: FormatRule = .passthrough,
                defaultOverflow: OverflowPolicy = .block,
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
        self.check = check
        self.make = make
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

    /// The descriptor for `type`.
    public func descriptor(_ type: String) -> NodeDescriptor? { byType[type] }

    /// All descriptors, sorted by family then type.
    public var all: [NodeDescriptor] {
        byType.values.sorted { ($0.family, $0.type) < ($1.family, $1.type) }
    }

    /// All type names, sorted.
    public var types: [String] { byType.keys.sorted() }
}
