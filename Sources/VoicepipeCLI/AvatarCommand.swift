import ArgumentParser

/// `voicepipe avatar`: operator commands for digital-human sessions.
struct AvatarCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "avatar", abstract: "Digital-human sessions: list, status, close")

    func run() async throws {
        throw ValidationError("avatar commands are not available in this build")
    }
}
