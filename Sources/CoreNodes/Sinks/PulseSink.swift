import PipelineCore

/// `pulse-sink`: plays audio on a PulseAudio sink (libpulse-simple), on a dedicated device thread.
public enum PulseSink {
    /// Registry entry.
    public static let descriptor = AudioNodeParameters.playbackDescriptor(
        type: "pulse-sink", backend: .pulse, summary: "Plays audio on a PulseAudio sink; drains at end of stream")
}
