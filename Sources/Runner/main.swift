import Nodes
import VoicepipeCLI

// The stock binary: the built-in node types, plugins named with --plugin or `plugins:`, and the
// operator command for digital-human sessions.
Voicepipe.installSignalHandlers()
await Voicepipe.main(registry: BuiltinNodes.registry(), commands: [AvatarCommand.self])
