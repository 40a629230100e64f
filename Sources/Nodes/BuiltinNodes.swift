import PipelineCore

/// The node types that ship with voicepipe.
///
/// ```swift
/// var registry = BuiltinNodes.registry()
/// registry.register(MyNode.descriptor)   // add your own
/// ```
public enum BuiltinNodes {
    /// Every built-in descriptor. Each family lists its own in `<Family>/<Family>Nodes.swift`.
    public static var all: [NodeDescriptor] {
        SourceNodes.all + SinkNodes.all + DSPNodes.all + CodecNodes.all + ASRNodes.all + SpeechNodes.all + ResponderNodes.all + AvatarNodes.all
            + NetworkNodes.all + AudioDeviceNodes.all + WakeNodes.all
    }

    /// A registry holding every built-in node type.
    public static func registry() -> NodeRegistry {
        var r = NodeRegistry()
        for d in all { r.register(d) }
        return r
    }
}
