import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

/// Where a node type came from when a plugin registered it.
public struct PluginInfo: Sendable, Hashable {
    /// The name the plugin gives itself.
    public var name: String
    /// The shared library's path.
    public var path: String
    /// The plugin's build signature (voicepipe version, plugin interface, Swift toolchain).
    public var signature: String
}

/// A plugin that could not be loaded. `voicepipe` exits with code 2 on it, before anything runs.
public struct PluginError: Error, Sendable, CustomStringConvertible {
    /// Stable code: `plugin_not_found`, `plugin_open_failed`, `plugin_no_entry_point`,
    /// `plugin_version_mismatch`, `plugin_duplicate_core`, `plugin_empty`.
    public var code: String
    /// The plugin as it was named (path or name).
    public var plugin: String
    /// What happened and what to do.
    public var message: String

    public var description: String { "plugin '\(plugin)': \(message)" }
}

/// Loads plugins (shared libraries exporting `voicepipe_plugin_entry`) and returns their node types.
///
/// Each library is opened once per process; loading it again returns the same types. Libraries
/// are never closed: node instances and descriptors refer to their code.
public enum PluginLoader {
    /// The environment variable holding the folders searched for plugins named without a path.
    public static let searchPathVariable = "VOICEPIPE_PLUGIN_PATH"

    private static let loaded = LockedValue<[String: [NodeDescriptor]]>([:])

    /// Resolves `reference` to a file: a path (with a `/` or ending in `.so`; relative ones from
    /// `directory`) or a name found in the `VOICEPIPE_PLUGIN_PATH` folders as `NAME`, `libNAME.so`
    /// or `NAME.so`.
    public static func resolve(_ reference: String, relativeTo directory: String? = nil,
                               environment: [String: String] = ProcessInfo.processInfo.environment) throws(PluginError) -> String {
        let fm = FileManager.default
        if reference.contains("/") || reference.hasSuffix(".so") {
            var path = reference
            if !path.hasPrefix("/"), let directory { path = (directory as NSString).appendingPathComponent(path) }
            path = (path as NSString).standardizingPath
            guard fm.fileExists(atPath: path) else {
                throw PluginError(code: "plugin_not_found", plugin: reference, message: "no file at \(path)")
            }
            return path
        }
        let dirs = (environment[searchPathVariable] ?? "").split(separator: ":").map(String.init).filter { !$0.isEmpty }
        for dir in dirs {
            for candidate in ["lib\(reference).so", "\(reference).so", reference] {
                let path = (dir as NSString).appendingPathComponent(candidate)
                var isDir: ObjCBool = false
                if fm.fileExists(atPath: path, isDirectory: &isDir), !isDir.boolValue { return path }
            }
        }
        let searched = dirs.isEmpty ? "\(searchPathVariable) is not set" : "searched \(dirs.joined(separator: ", ")) (\(searchPathVariable))"
        throw PluginError(code: "plugin_not_found", plugin: reference,
                          message: "not found: \(searched); give a path (./libNAME.so) or add its folder to \(searchPathVariable)")
    }

    /// Opens the plugin at `path`, checks what it was built against and returns its node types,
    /// each marked with ``NodeDescriptor/plugin``.
    public static func load(path: String, as reference: String? = nil) throws(PluginError) -> [NodeDescriptor] {
        let key = (path as NSString).resolvingSymlinksInPath
        if let done = loaded.withLock({ $0[key] }) { return done }
        let named = reference ?? path
        guard let handle = dlopen(path, RTLD_NOW | RTLD_LOCAL) else {
            let why = dlerror().map { String(cString: $0) } ?? "unknown error"
            throw PluginError(code: "plugin_open_failed", plugin: named, message: "cannot be opened: \(why)")
        }
        guard let symbol = dlsym(handle, VoicepipePlugin.entryPointName) else {
            throw PluginError(code: "plugin_no_entry_point", plugin: named,
                              message: "\(path) exports no `\(VoicepipePlugin.entryPointName)`; is it a voicepipe plugin? (see Examples/gain-plugin)")
        }
        let entry = unsafeBitCast(symbol, to: VoicepipePlugin.EntryPoint.self)
        let registrar = PluginRegistrar()
        let host = VoicepipePlugin.signature
        let returned = withExtendedLifetime(registrar) {
            host.withCString { entry($0, Unmanaged.passUnretained(registrar).toOpaque()) }
        }
        let theirs = returned.map { String(cString: $0) } ?? "(nothing)"
        guard theirs == host else {
            throw PluginError(code: "plugin_version_mismatch", plugin: named,
                              message: "built against \(describe(theirs)); this voicepipe is \(describe(host)). Rebuild the plugin against this voicepipe (\(path))")
        }
        guard let name = registrar.pluginName else {
            throw PluginError(code: "plugin_duplicate_core", plugin: named,
                              message: "its PipelineCore types are not the host's (it carries its own copy of PipelineCore instead of linking libPipelineCore.so); build it against the PipelineCore library product (\(path))")
        }
        guard !registrar.descriptors.isEmpty else {
            throw PluginError(code: "plugin_empty", plugin: named, message: "registered no node types (\(path))")
        }
        let info = PluginInfo(name: name, path: path, signature: theirs)
        let descriptors = registrar.descriptors.map { d -> NodeDescriptor in
            var d = d
            d.plugin = info
            return d
        }
        loaded.withLock { $0[key] = descriptors }
        return descriptors
    }

    /// "voicepipe 0.2.0 with Swift 6.3 (plugin interface 1)" from a signature.
    static func describe(_ signature: String) -> String {
        var fields: [String: String] = [:]
        for part in signature.split(separator: " ") {
            if let eq = part.firstIndex(of: "=") { fields[String(part[..<eq])] = String(part[part.index(after: eq)...]) }
        }
        guard let v = fields["voicepipe"], let s = fields["swift"] else { return "'\(signature)'" }
        let rev = signature.split(separator: " ").first.flatMap { $0.split(separator: "/").last } ?? "?"
        return "voicepipe \(v) with Swift \(s) (plugin interface \(rev))"
    }
}

extension NodeRegistry {
    /// Loads a plugin (path or name, see ``PluginLoader/resolve(_:relativeTo:environment:)``) and
    /// registers its node types. A plugin type may not replace a type that is already registered.
    public mutating func loadPlugin(_ reference: String, relativeTo directory: String? = nil,
                                    environment: [String: String] = ProcessInfo.processInfo.environment) throws(PluginError) {
        let path = try PluginLoader.resolve(reference, relativeTo: directory, environment: environment)
        let types = try PluginLoader.load(path: path, as: reference)
        for d in types {
            if let existing = descriptor(d.type), existing.plugin?.path != d.plugin?.path {
                let from = existing.plugin.map { "plugin '\($0.name)'" } ?? "voicepipe"
                throw PluginError(code: "plugin_type_conflict", plugin: reference,
                                  message: "node type '\(d.type)' is already provided by \(from); rename it in the plugin")
            }
        }
        for d in types { register(d) }
    }
}

extension NodeRegistry {
    /// Loads every plugin `spec` names (`plugins:` in a graph file, ``GraphBuilder/plugin(_:file:line:column:)``
    /// in code) and registers its node types: the step before validation, and the only one on the way
    /// from a graph to running nodes that loads code. Relative paths are taken from the graph file's
    /// folder. Returns a problem for each plugin that could not be loaded, located where it is named.
    public mutating func loadPlugins(of spec: GraphSpec) -> [GraphIssue] {
        let directory = spec.file.hasPrefix("<") ? nil : (spec.file as NSString).deletingLastPathComponent
        var issues: [GraphIssue] = []
        for ref in spec.plugins {
            // A plugin named in Swift code is found from the working directory, not from the source file's folder.
            let directory = ref.location.inCode ? nil : directory
            do {
                try loadPlugin(ref.name, relativeTo: directory.map { $0.isEmpty ? "." : $0 }, environment: spec.environment)
            } catch {
                issues.append(GraphIssue(.plugin, at: ref.location, "\(error.description)"))
            }
        }
        return issues
    }
}
