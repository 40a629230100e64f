import PipelineCore

/// `alsa-sink`: plays audio on an ALSA PCM (libasound), on a dedicated device thread.
public enum ALSASink {
    /// Registry entry.
    public static let descriptor = AudioNodeParameters.playbackDescriptor(
        type: "alsa-sink", backend: .alsa, summary: "Plays audio on an ALSA PCM; drains at end of stream")
}
