import Nodes
import VoicepipeCLI

await Voicepipe.main(registry: BuiltinNodes.registry())
