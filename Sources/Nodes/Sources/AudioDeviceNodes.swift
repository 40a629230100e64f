import PipelineCore

/// ALSA and PulseAudio capture and playback nodes.
enum AudioDeviceNodes {
    static var all: [NodeDescriptor] { [] }
}
