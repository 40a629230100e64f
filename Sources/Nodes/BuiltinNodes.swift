@_exported import CoreNodes
import PipelineCore

/// The node types that ship with voicepipe: ``CoreNodeTypes`` (files, devices, DSP, codecs, RTP, wake
/// words) and the services built on a network stack or a recognizer (asr, tts, chat, webhook, barge-in,
/// avatar, http-upload, nats-sink).
///
/// ```swift
/// var registry = BuiltinNodes.registry()
/// registry.register(MyNode.descriptor)   // add your own
/// ```
public enum BuiltinNodes {
    /// Every built-in descriptor. Each family lists its own in `<Family>/<Family>Nodes.swift`.
    public static var all: [NodeDescriptor] {
        CoreNodeTypes.all + ASRNodes.all + SpeechNodes.all + ResponderNodes.all + AvatarNodes.all
            + [HTTPUploadNode.descriptor, NATSSinkNode.descriptor]
    }

    /// A registry holding every built-in node type.
    public static func registry() -> NodeRegistry {
        var r = NodeRegistry()
        for d in all { r.register(d) }
        return r
    }
}
