import Nodes
import VoicepipeCLI

// The stock binary: the built-in node types, plugins named with --plugin or `plugins:`, and the
// operator command for digital-human sessions.
Voicepipe.installSignalHandlers()
await Voicepipe.main(registry: BuiltinNodes.registry(), commands: [AvatarCommand.self])

#if VOICEPIPE_LIBFUZZER
// Built with libFuzzer's instrumentation (bench/asan-runs.sh shares bench/libfuzz's build), the binary
// links libFuzzer's runtime, which needs a fuzz target to exist; this one is never called.
@_cdecl("LLVMFuzzerTestOneInput")
func unusedFuzzTarget(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt { 0 }
#endif
