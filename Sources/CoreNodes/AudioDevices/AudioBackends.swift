import PipelineCore

/// Opens capture and playback streams on the backend a spec names (the factory of habit 4).
public enum AudioBackends {
    /// Opens a capture stream. Blocking: call it on a device thread.
    public static func openCapture(_ spec: AudioStreamSpec) throws -> any CaptureBackend {
        switch spec.backend {
        case .alsa: try ALSACapture(spec)
        case .pulse: try PulseCapture(spec)
        case .memory: try AudioBackendRegistry.openCapture(spec)
        }
    }

    /// Opens a playback stream. Blocking: call it on a device thread.
    public static func openPlayback(_ spec: AudioStreamSpec) throws -> any PlaybackBackend {
        switch spec.backend {
        case .alsa: try ALSAPlayback(spec)
        case .pulse: try PulsePlayback(spec)
        case .memory: try AudioBackendRegistry.openPlayback(spec)
        }
    }
}
