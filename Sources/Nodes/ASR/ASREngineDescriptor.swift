import PipelineCore

/// How the `asr` node knows an engine: its name (the `engine` parameter), its typed configuration
/// (the node parameters it alone uses) and a factory.
public struct ASREngineDescriptor: Sendable {
    /// Value of the `engine` parameter.
    public var name: String
    /// One line for `voicepipe nodes`.
    public var summary: String
    /// The node parameters that only this engine uses (its configuration's parameters).
    public var parameters: [ParamSpec]
    /// Decodes the engine's configuration from the node's parameters.
    public var decode: @Sendable (any Decoder) throws -> any ASREngineConfiguration
    /// Creates the engine when the pipeline starts, from its configuration (as decoded by ``decode``),
    /// the node's configuration and the node's environment.
    public var make: @Sendable (any ASREngineConfiguration, ASRNode.Configuration, NodeEnvironment) throws -> any ASREngine

    /// Creates a descriptor for an engine configured by `Configuration`.
    public init<Configuration: ASREngineConfiguration>(
        name: String, summary: String, configuration: Configuration.Type,
        make: @escaping @Sendable (Configuration, ASRNode.Configuration, NodeEnvironment) throws -> any ASREngine
    ) {
        self.name = name
        self.summary = summary
        self.parameters = Configuration.parameters
        self.decode = { decoder in try Configuration(from: decoder) }
        self.make = { engineConfiguration, node, env in
            guard let c = engineConfiguration as? Configuration else {
                throw NodeError(.configurationMismatch, "node '\(env.id)': asr engine \(name): configuration is not a \(Configuration.self)")
            }
            return try make(c, node, env)
        }
    }
}

/// The engines the `asr` node can use. Adding an engine is one line in ``all``.
public enum ASREngines {
    /// Every engine, the default (`pocketsphinx`) first.
    public static var all: [ASREngineDescriptor] {
        [
            PocketSphinxEngine.descriptor,
            WhisperEngine.descriptor,
            TencentASREngine.descriptor,
            WyomingEngine.descriptor,
        ]
    }

    /// Every engine's parameters once: a name several engines use (`language`, `final_timeout_ms`)
    /// appears once, typed as the first engine declares it, its documentation joining theirs.
    public static var sharedParameters: [ParamSpec] {
        var out: [ParamSpec] = []
        for p in all.flatMap(\.parameters) {
            if let i = out.firstIndex(where: { $0.name == p.name }) {
                out[i].doc += "; " + p.doc
            } else {
                out.append(p)
            }
        }
        return out
    }

    /// The default engine's name.
    public static var defaultName: String { all[0].name }

    /// The engine named `name`.
    public static func descriptor(_ name: String) -> ASREngineDescriptor? {
        all.first(where: { $0.name == name })
    }
}
