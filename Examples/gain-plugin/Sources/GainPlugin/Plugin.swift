import PipelineCore

/// The plugin's one C entry point. voicepipe calls it with its build signature; the node types are
/// registered only when the plugin was built against the same voicepipe and Swift toolchain.
@_cdecl("voicepipe_plugin_entry")
public func voicepipePluginEntry(_ host: UnsafePointer<CChar>, _ registrar: UnsafeMutableRawPointer) -> UnsafePointer<CChar> {
    VoicepipePlugin.entry(host: host, registrar: registrar, name: "gain") { plugin in
        plugin.register(GainNode.descriptor)
    }
}
