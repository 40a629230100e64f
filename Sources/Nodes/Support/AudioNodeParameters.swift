import PipelineCore

/// Parameters and descriptors shared by the ALSA and PulseAudio nodes.
enum AudioNodeParameters {
    /// `device`, `rate`, `channels`, `frame_ms`, `latency_ms` for a capture source.
    static func capture(_ backend: AudioBackendKind) -> [ParamSpec] {
        [
            ParamSpec("device", .string, default: .string("default"), doc: deviceDoc(backend)),
            ParamSpec("rate", .int(1000...384_000), default: .int(16000), doc: "sample rate delivered (converted if the device cannot)"),
            ParamSpec("channels", .int(1...8), default: .int(1), doc: "channels delivered (converted if the device cannot)"),
            ParamSpec("frame_ms", .int(1...1000), default: .int(20), doc: "frame length in milliseconds (also the device read size)"),
            ParamSpec("latency_ms", .int(5...5000), default: .int(100), doc: "device buffer in milliseconds"),
        ]
    }

    /// The same for a playback sink; `rate`/`channels` default to the incoming audio's format.
    static func playback(_ backend: AudioBackendKind) -> [ParamSpec] {
        [
            ParamSpec("device", .string, default: .string("default"), doc: deviceDoc(backend)),
            ParamSpec("rate", .int(1000...384_000), doc: "device sample rate (default: the incoming audio's; audio is converted to it)"),
            ParamSpec("channels", .int(1...8), doc: "device channels (default: the incoming audio's)"),
            ParamSpec("frame_ms", .int(1...1000), default: .int(20), doc: "device write size in milliseconds"),
            ParamSpec("latency_ms", .int(5...5000), default: .int(100), doc: "device buffer in milliseconds"),
        ]
    }

    static func deviceDoc(_ backend: AudioBackendKind) -> String {
        switch backend {
        case .alsa: "ALSA PCM name (default, hw:0,0, plughw:1, pulse, ...); see `voicepipe devices`"
        case .pulse: "PulseAudio source/sink name (default = the server's default); see `voicepipe devices`"
        case .memory: "in-memory device name (tests)"
        }
    }

    /// The stream a node's configuration asks for.
    static func spec(_ c: NodeConfig, backend: AudioBackendKind) -> AudioStreamSpec {
        let format = AudioFormat(sampleRate: c.int("rate", default: 16000), channels: c.int("channels", default: 1))
        let frameMs = c.int("frame_ms", default: 20)
        return AudioStreamSpec(backend: backend, device: c.string("device", default: "default"), format: format,
                               periodFrames: max(1, format.frames(ms: frameMs)), latencyMs: c.int("latency_ms", default: 100),
                               streamName: "voicepipe \(c.id)")
    }

    /// A capture source descriptor (`alsa-source`, `pulse-source`).
    static func captureDescriptor(type: String, backend: AudioBackendKind, summary: String) -> NodeDescriptor {
        NodeDescriptor(
            type: type, summary: summary, family: "sources", inputs: [],
            outputs: [PortSpec("out", [.audio], doc: "captured audio"), .events],
            parameters: capture(backend),
            format: .fromParameters(rate: 16000, channels: 1),
            defaultOverflow: .dropOldest,
            make: { c in AudioCaptureNode(spec: spec(c, backend: backend), frameMs: c.int("frame_ms", default: 20)) })
    }

    /// A playback sink descriptor (`alsa-sink`, `pulse-sink`).
    static func playbackDescriptor(type: String, backend: AudioBackendKind, summary: String) -> NodeDescriptor {
        NodeDescriptor(
            type: type, summary: summary, family: "sinks",
            inputs: [PortSpec("in", [.audio], doc: "audio to play (any format; converted to the device's)")],
            outputs: [.events],
            parameters: playback(backend),
            format: .none,
            make: { c in AudioPlaybackNode(spec: spec(c, backend: backend), fixedFormat: c.has("rate")) })
    }
}
