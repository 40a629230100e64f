#if canImport(Glibc)
import Glibc
#elseif canImport(Darwin)
import Darwin
#endif

/// What a plugin writes to export its node types. A plugin is a shared library that depends on the
/// `PipelineCore` library product only and exports one C entry point, `voicepipe_plugin_entry`:
///
/// ```swift
/// import PipelineCore
///
/// @_cdecl("voicepipe_plugin_entry")
/// public func voicepipePluginEntry(_ host: UnsafePointer<CChar>, _ registrar: UnsafeMutableRawPointer) -> UnsafePointer<CChar> {
///     VoicepipePlugin.entry(host: host, registrar: registrar, name: "gain") { plugin in
///         plugin.register(GainNode.descriptor)
///     }
/// }
/// ```
///
/// The host calls the entry point with its own build signature. The plugin's side (compiled into
/// the plugin, so it states what the plugin was built against) compares it with its own and only
/// touches the registrar when they are equal; either way it returns its signature, which the host
/// uses to refuse a plugin built against another voicepipe version or Swift toolchain before
/// anything of it runs.
public enum VoicepipePlugin {
    /// The C symbol every plugin exports.
    public static let entryPointName = "voicepipe_plugin_entry"

    /// The C type of the entry point: `const char *voicepipe_plugin_entry(const char *host, void *registrar)`.
    public typealias EntryPoint = @convention(c) (UnsafePointer<CChar>, UnsafeMutableRawPointer) -> UnsafePointer<CChar>?

    /// The voicepipe version this code is compiled as. Emitted into the client, so a plugin carries
    /// the value it was built with.
    @_alwaysEmitIntoClient
    public static var version: String { "0.2.0" }

    /// Revision of the plugin interface (the entry point and ``PluginRegistrar``).
    @_alwaysEmitIntoClient
    public static var interfaceRevision: Int { 1 }

    /// The Swift compiler this code is compiled with (major.minor; Swift has no stable ABI for
    /// library evolution here, so host and plugin must agree).
    @_alwaysEmitIntoClient
    public static var toolchain: String {
        #if compiler(>=7.0)
        return "7.x"
        #elseif compiler(>=6.4)
        return "6.4"
        #elseif compiler(>=6.3)
        return "6.3"
        #elseif compiler(>=6.2)
        return "6.2"
        #elseif compiler(>=6.1)
        return "6.1"
        #else
        return "6.0"
        #endif
    }

    /// `voicepipe-plugin/1 voicepipe=0.2.0 swift=6.3`: what host and plugin compare.
    @_alwaysEmitIntoClient
    public static var signature: String { "voicepipe-plugin/\(interfaceRevision) voicepipe=\(version) swift=\(toolchain)" }

    /// The plugin side of the entry point: registers node types through `register` when the host's
    /// signature equals the plugin's, and returns the plugin's signature (a C string the host reads).
    @_alwaysEmitIntoClient
    public static func entry(host: UnsafePointer<CChar>, registrar: UnsafeMutableRawPointer, name: String,
                             register: (PluginRegistrar) -> Void) -> UnsafePointer<CChar> {
        let mine = signature
        if String(cString: host) == mine {
            // The host passes its PluginRegistrar. If this plugin carries its own copy of PipelineCore
            // the cast fails (two copies of every type) and nothing is registered; the host says why.
            let object = Unmanaged<AnyObject>.fromOpaque(registrar).takeUnretainedValue()
            if let r = object as? PluginRegistrar {
                r.begin(plugin: name)
                register(r)
            }
        }
        return UnsafePointer(strdup(mine)!)
    }
}

/// Collects the node types a plugin registers (passed to its entry point by the host).
public final class PluginRegistrar: @unchecked Sendable {
    // Used by one thread at a time: the host calls the entry point synchronously and reads the
    // result after it returns.
    private(set) var pluginName: String?
    private(set) var descriptors: [NodeDescriptor] = []

    init() {}

    /// Called by ``VoicepipePlugin/entry(host:registrar:name:register:)``.
    public func begin(plugin name: String) { pluginName = name }

    /// Adds a node type.
    public func register(_ descriptor: NodeDescriptor) { descriptors.append(descriptor) }
}
