import PipelineCore

/// `pulse-source`: live capture from a PulseAudio source (libpulse-simple), on a dedicated device thread.
public enum PulseSource {
    /// Registry entry.
    public static let descriptor = AudioNodeParameters.captureDescriptor(
        type: "pulse-source", backend: .pulse, summary: "Captures audio from a PulseAudio source (overruns recovered, counted, reported)")
}
