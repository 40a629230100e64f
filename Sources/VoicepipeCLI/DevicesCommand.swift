import ArgumentParser

/// `voicepipe devices`: ALSA PCMs and PulseAudio sources and sinks.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "devices", abstract: "List ALSA and PulseAudio capture and playback devices")

    func run() async throws {
        throw ValidationError("device listing is not available in this build")
    }
}
