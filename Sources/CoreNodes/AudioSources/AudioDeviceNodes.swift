import PipelineCore

/// ALSA and PulseAudio capture and playback nodes.
enum AudioDeviceNodes {
    static var all: [NodeDescriptor] { [ALSASource.descriptor, PulseSource.descriptor, ALSASink.descriptor, PulseSink.descriptor] }
}
