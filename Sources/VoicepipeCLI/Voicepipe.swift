import ArgumentParser
import Foundation
import Logging
import Nodes
import PipelineCore

/// The `voicepipe` command line, reusable by packages that add their own node types:
///
/// ```swift
/// var registry = BuiltinNodes.registry()
/// registry.register(MyNode.descriptor)
/// await Voicepipe.main(registry: registry)
/// ```
///
/// `commands` adds subcommands of the package's own next to `run`, `validate`, `nodes`, `graph`
/// and `devices`.
public enum Voicepipe {
    /// Catches SIGINT, SIGTERM and SIGHUP (and ignores SIGPIPE) from this moment on; call it first
    /// in `main.swift` so that a signal during start-up is handled too. ``main(registry:commands:arguments:)``
    /// calls it as well.
    public static func installSignalHandlers() {
        SignalCenter.install()
    }

    /// The process-wide settings the command takes from its environment: `VOICEPIPE_RT_THREADS` (threads
    /// of the real-time executor, default 2) and `VOICEPIPE_REALTIME=0` (no real-time scheduling). The
    /// runtime reads no environment variable itself.
    static func applyProcessSettings(_ environment: [String: String]) {
        if let threads = environment["VOICEPIPE_RT_THREADS"].flatMap(Int.init) { RealtimeExecutor.sharedThreadCount = threads }
        if environment["VOICEPIPE_REALTIME"] == "0" { RealtimeScheduling.isEnabled = false }
    }

    /// Parses the process arguments and runs the command with `registry`'s node types.
    public static func main(registry: NodeRegistry = BuiltinNodes.registry(), commands: [any ParsableCommand.Type] = [],
                            arguments: [String]? = nil) async {
        SignalCenter.install()
        applyProcessSettings(ProcessInfo.processInfo.environment)
        CLIContext.registry.withLock { $0 = registry }
        CLIContext.extraCommands.withLock { $0 = commands }
        do {
            var command = try RootCommand.parseAsRoot(arguments)
            if !(command is RunCommand) && !(command is ServeCommand) { SignalCenter.releaseForNonRunCommand() }
            if var asyncCommand = command as? AsyncParsableCommand {
                try await asyncCommand.run()
            } else {
                try command.run()
            }
            WhisperLibrary.finishBeforeExit()
        } catch {
            WhisperLibrary.finishBeforeExit()
            // Usage errors are exit code 2, as documented (ArgumentParser's own default is 64).
            if RootCommand.exitCode(for: error) == .validationFailure {
                printError(RootCommand.fullMessage(for: error))
                exit(ExitStatus.invalid.rawValue)
            }
            RootCommand.exit(withError: error)
        }
    }
}

/// Process-wide settings of the CLI.
enum CLIContext {
    static let registry = LockedValue<NodeRegistry>(BuiltinNodes.registry())
    static let extraCommands = LockedValue<[any ParsableCommand.Type]>([])
    static var currentRegistry: NodeRegistry { registry.withLock { $0 } }
}

/// Exit codes: 0 normal end, 1 runtime failure, 2 invalid graph or usage.
enum ExitStatus {
    static let runtimeFailure = ExitCode(1)
    static let invalid = ExitCode(2)
}

struct RootCommand: AsyncParsableCommand {
    static var configuration: CommandConfiguration { CommandConfiguration(
        commandName: "voicepipe",
        abstract: "Real-time voice pipelines declared in YAML: capture, meter, detect speech, slice, encode, recognize, send.",
        discussion: """
        Exit codes: 0 normal end, 1 runtime failure, 2 invalid graph or usage.
        Examples:
          voicepipe run pipelines/recognizer-file.yaml
          voicepipe run pipelines/record.yaml --set mic.type=alsa-source
          voicepipe validate pipelines/*.yaml
          voicepipe nodes vad
          voicepipe graph pipelines/intercom.yaml --format mermaid
        """,
        subcommands: [RunCommand.self, ServeCommand.self, CallCommand.self, ValidateCommand.self, NodesCommand.self, GraphCommand.self, DevicesCommand.self]
            + CLIContext.extraCommands.withLock { $0 }
    ) }
}

/// `--plugin PATH` (repeatable): node types from shared libraries, loaded before anything else.
struct PluginOptions: ParsableArguments {
    @Option(name: .customLong("plugin"), help: ArgumentHelp("Load node types from a plugin (a shared library path, or a name found in VOICEPIPE_PLUGIN_PATH); repeatable.", valueName: "path"))
    var plugins: [String] = []

    /// The CLI's registry with the plugins loaded; a plugin that cannot be loaded ends the command
    /// with exit code 2 and says why.
    func registry() throws -> NodeRegistry {
        var registry = CLIContext.currentRegistry
        for p in plugins {
            do { try registry.loadPlugin(p, relativeTo: FileManager.default.currentDirectoryPath) } catch {
                printError("error: \(error.description)")
                throw ExitStatus.invalid
            }
        }
        return registry
    }
}

/// Log options shared by subcommands.
struct LogOptions: ParsableArguments {
    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error, critical.")
    var logLevel: String = "notice"

    func bootstrap() throws {
        guard let level = Logger.Level(rawValue: logLevel) else {
            throw ValidationError("--log-level: expected one of \(Logger.Level.allCases.map(\.rawValue).joined(separator: ", "))")
        }
        LogBootstrap.once(level: level)
    }
}

/// Bootstraps swift-log once per process (stderr, with the chosen level).
enum LogBootstrap {
    private static let done = LockedValue(false)
    static func once(level: Logger.Level) {
        let first = done.withLock { d -> Bool in defer { d = true }; return !d }
        guard first else { return }
        LoggingSystem.bootstrap { label in
            var h = StreamLogHandler.standardError(label: label)
            h.logLevel = level
            return EscapingLogHandler(inner: h)
        }
    }
}

/// Escapes control characters and bidi overrides in log messages and metadata before they reach
/// the terminal (server messages and file contents end up in logs).
struct EscapingLogHandler: LogHandler {
    var inner: StreamLogHandler

    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }
    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var e = event
        e.message = Logger.Message(stringLiteral: TerminalText.escape(event.message.description, keepNewlines: false))
        if let m = event.metadata {
            e.metadata = m.mapValues { .string(TerminalText.escape($0.description, keepNewlines: false)) }
        }
        inner.log(event: e)
    }
}

/// Writes to standard error.
func printError(_ text: String) {
    FileHandle.standardError.write(Data((TerminalText.escape(text) + "\n").utf8))
}

/// Parses `--set` values.
func parseOverrides(_ sets: [String]) throws -> [Override] {
    try sets.map { text in
        do { return try Override(parsing: text) } catch let e as GraphError {
            throw ValidationError(e.description)
        }
    }
}
