import Nodes
import PipelineCore
import VoicepipeCLI

// The built-in node types plus this package's own.
var registry = BuiltinNodes.registry()
registry.register(GainNode.descriptor)
await Voicepipe.main(registry: registry)
