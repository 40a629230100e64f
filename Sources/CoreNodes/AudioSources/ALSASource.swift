import PipelineCore

/// `alsa-source`: live capture from an ALSA PCM (libasound), on a dedicated device thread.
public enum ALSASource {
    /// Registry entry.
    public static let descriptor = AudioNodeParameters.captureDescriptor(
        type: "alsa-source", backend: .alsa, summary: "Captures audio from an ALSA PCM (overruns recovered, counted, reported)")
}
