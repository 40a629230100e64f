import PipelineCore

/// Configuration shared by the ALSA and PulseAudio nodes, and their descriptors.
enum AudioNodeParameters {
    /// `device`, `rate`, `channels`, `frame_ms`, `latency_ms` of a capture source.
    struct Capture: NodeConfiguration {
        var device: String
        var rate: Int
        var channels: Int
        var frameMs: Int
        var latencyMs: Int
        var onDeviceLost: DeviceLossPolicy
        static var parameters: [ParamSpec] { AudioNodeParameters.capture(.alsa) }
        var format: AudioFormat { AudioFormat(sampleRate: rate, channels: channels) }
    }

    /// The same for a playback sink; `rate`/`channels` are absent unless the graph sets them
    /// (the incoming audio's format is used then).
    struct Playback: NodeConfiguration {
        var device: String
        var rate: Int?
        var channels: Int?
        var frameMs: Int
        var latencyMs: Int
        var driftCompensation: Bool
        var onDeviceLost: DeviceLossPolicy
        static var parameters: [ParamSpec] { AudioNodeParameters.playback(.alsa) }
    }

    /// `device`, `rate`, `channels`, `frame_ms`, `latency_ms` for a capture source.
    static func capture(_ backend: AudioBackendKind) -> [ParamSpec] {
        [
            ParamSpec("device", .string, default: "default", doc: deviceDoc(backend)),
            ParamSpec("rate", .int(1000...384_000), default: 16000, doc: "sample rate delivered (converted if the device cannot)"),
            ParamSpec("channels", .int(1...8), default: 1, doc: "channels delivered (converted if the device cannot)"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "frame length in milliseconds (also the device read size)"),
            ParamSpec("latency_ms", .int(5...5000), default: 100, doc: "device buffer in milliseconds"),
            lossParameter,
        ]
    }

    static let lossParameter = ParamSpec(
        "on_device_lost", .choice(DeviceLossPolicy.allCases.map(\.rawValue)), default: "fail",
        doc: "when the device disappears: fail (the node ends with device_lost), reopen (the default device) or wait (for the same device); device_lost / device_restored events")

    /// The same for a playback sink; `rate`/`channels` default to the incoming audio's format.
    static func playback(_ backend: AudioBackendKind) -> [ParamSpec] {
        [
            ParamSpec("device", .string, default: "default", doc: deviceDoc(backend)),
            ParamSpec("rate", .int(1000...384_000), doc: "device sample rate (default: the incoming audio's; audio is converted to it)"),
            ParamSpec("channels", .int(1...8), doc: "device channels (default: the incoming audio's)"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "device write size in milliseconds"),
            ParamSpec("latency_ms", .int(5...5000), default: 100, doc: "device buffer in milliseconds"),
            ParamSpec("drift_compensation", .bool, default: true,
                      doc: "hold the playback queue at its depth by resampling (at most ±0.1 %) when the audio's clock and the device's differ; clock_drift_ppm in --stats"),
            lossParameter,
        ]
    }

    static func deviceDoc(_ backend: AudioBackendKind) -> String {
        switch backend {
        case .alsa: "ALSA PCM name (default, hw:0,0, plughw:1, pulse, ...); see `voicepipe devices`"
        case .pulse: "PulseAudio source/sink name (default = the server's default); see `voicepipe devices`"
        case .memory: "in-memory device name (tests)"
        }
    }

    /// The stream a capture node's configuration asks for.
    static func spec(_ c: Capture, backend: AudioBackendKind, environment env: NodeEnvironment) -> AudioStreamSpec {
        AudioStreamSpec(backend: backend, device: c.device, format: c.format,
                        periodFrames: max(1, c.format.frames(ms: c.frameMs)), latencyMs: c.latencyMs, streamName: "voicepipe \(env.id)",
                        server: server(backend, env))
    }

    /// The stream a playback node's configuration asks for (16 kHz mono until the input's format is known).
    static func spec(_ c: Playback, backend: AudioBackendKind, environment env: NodeEnvironment) -> AudioStreamSpec {
        let format = AudioFormat(sampleRate: c.rate ?? 16000, channels: c.channels ?? 1)
        return AudioStreamSpec(backend: backend, device: c.device, format: format,
                               periodFrames: max(1, format.frames(ms: c.frameMs)), latencyMs: c.latencyMs, streamName: "voicepipe \(env.id)",
                               server: server(backend, env))
    }

    /// PulseAudio's server from the graph's environment (`PULSE_SERVER`), as libpulse itself would take it from
    /// the process's; the other backends have none.
    static func server(_ backend: AudioBackendKind, _ env: NodeEnvironment) -> String? {
        guard backend == .pulse, let server = env.variables["PULSE_SERVER"], !server.isEmpty else { return nil }
        return server
    }

    /// A capture source descriptor (`alsa-source`, `pulse-source`).
    static func captureDescriptor(type: String, backend: AudioBackendKind, summary: String) -> NodeDescriptor {
        var d = NodeDescriptor(
            type: type, summary: summary, family: "sources", inputs: [],
            outputs: [PortSpec("out", [.audio], doc: "captured audio"), .events],
            configuration: Capture.self,
            format: .typed(Capture.self, output: { c, _ in c.format }),
            defaultOverflow: .dropOldest,
            executor: .realtime,
            make: { c, env in AudioCaptureNode(spec: spec(c, backend: backend, environment: env), frameMs: c.frameMs, onDeviceLost: c.onDeviceLost) })
        d.parameters = capture(backend)
        return d
    }

    /// A playback sink descriptor (`alsa-sink`, `pulse-sink`).
    static func playbackDescriptor(type: String, backend: AudioBackendKind, summary: String) -> NodeDescriptor {
        var d = NodeDescriptor(
            type: type, summary: summary, family: "sinks",
            inputs: [PortSpec("in", [.audio], doc: "audio to play (any format; converted to the device's)"),
                     .interrupt("any event stops playback at once: queued audio and the device's buffer are discarded; `interrupted` tells what was heard")],
            outputs: [PortSpec("out", [.audio], doc: "what the device was given, as it takes it (an echo canceller's reference: speaker.out -> aec.ref)"),
                      .events],
            configuration: Playback.self,
            format: .none,
            executor: .realtime,
            make: { c, env in AudioPlaybackNode(spec: spec(c, backend: backend, environment: env), fixedFormat: c.rate != nil, compensateDrift: c.driftCompensation, onDeviceLost: c.onDeviceLost) })
        d.parameters = playback(backend)
        return d
    }
}
