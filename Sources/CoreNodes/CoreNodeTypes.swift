import PipelineCore

/// The node types an app can have without a network stack: sources and sinks for files, devices and the
/// app itself, DSP (volume, VAD with its turn model, slicer, resampler, echo canceller), wake words,
/// the Opus and AAC codecs, RTP with its jitter buffer and the intercom's discovery.
///
/// `CoreNodes` builds on PipelineCore, Foundation and the C libraries these nodes load; it does not
/// build SwiftNIO, BoringSSL or AsyncHTTPClient. The `Nodes` library adds the recognizers, speech
/// synthesis, responders, the digital human, HTTP upload and NATS, and ``BuiltinNodes`` there lists
/// every type.
///
/// ```swift
/// var registry = CoreNodeTypes.registry()
/// registry.register(MyNode.descriptor)   // add your own
/// ```
public enum CoreNodeTypes {
    /// Every node type of this library.
    public static var all: [NodeDescriptor] {
        SourceNodes.all + SinkNodes.all + DSPNodes.all + CodecNodes.all + NetworkNodes.all + AudioDeviceNodes.all + WakeNodes.all
    }

    /// A registry holding every node type of this library.
    public static func registry() -> NodeRegistry {
        var r = NodeRegistry()
        for d in all { r.register(d) }
        return r
    }
}
