import ArgumentParser
import DigitalHuman
import Foundation
import Nodes
import PipelineCore

/// `voicepipe avatar`: operator commands for Tencent digital-human sessions. It belongs to the stock
/// `voicepipe` binary only; packages that reuse `VoicepipeCLI` do not inherit one vendor's command
/// (they pass their own commands to `Voicepipe.main(registry:commands:)`).
struct AvatarCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "avatar", abstract: "Digital-human sessions: list, status, close, layout; the project's configuration",
        discussion: """
        Credentials come from --appkey/--access-token or IVH_APPKEY/IVH_ACCESS_TOKEN.
        Examples:
          voicepipe avatar sessions
          voicepipe avatar status m318552187863054171 --json
          voicepipe avatar close m318552187863054171
          voicepipe avatar layout m318552187863054171 --space '{"ImagePosition": 0.2, "ImagePositionVertical": 0, "ImageZoom": 1.2}'
          voicepipe avatar config
        """,
        subcommands: [AvatarSessionsCommand.self, AvatarStatusCommand.self, AvatarCloseCommand.self,
                      AvatarLayoutCommand.self, AvatarConfigCommand.self])
}

/// Connection options shared by the `avatar` subcommands.
struct AvatarOptions: ParsableArguments {
    @Option(name: .long, help: "API gateway.") var baseURL: String = IVHConfiguration.defaultBaseURL
    @Option(name: .long, help: "Project appkey (default: $IVH_APPKEY).") var appkey: String?
    @Option(name: .long, help: "Project access token (default: $IVH_ACCESS_TOKEN).") var accessToken: String?
    @Option(name: .long, help: "PEM file of extra trusted CA certificates.") var caFile: String?
    @Option(name: .long, help: "Request time limit in seconds.") var timeout: Double = 10
    @Flag(name: .long, help: "Machine-readable output.") var json = false

    /// A client, or a usage error naming what is missing.
    func client() throws -> IVHClient {
        let env = ProcessInfo.processInfo.environment
        let key = appkey ?? env["IVH_APPKEY"] ?? ""
        let token = accessToken ?? env["IVH_ACCESS_TOKEN"] ?? ""
        guard !key.isEmpty else { throw ValidationError("no appkey: pass --appkey or set IVH_APPKEY") }
        guard !token.isEmpty else { throw ValidationError("no access token: pass --access-token or set IVH_ACCESS_TOKEN") }
        do {
            return try IVHClient(IVHConfiguration(baseURL: baseURL, appkey: key, accessToken: token, caFile: caFile,
                                                  timeout: .milliseconds(Int64(timeout * 1000))))
        } catch {
            printError("error: \(error)")
            throw ExitStatus.runtimeFailure
        }
    }

    /// Runs `body` with a client, shuts it down, and turns API failures into exit code 1 with the
    /// documented meaning of the code.
    func with(_ body: (IVHClient) async throws -> Void) async throws {
        let client = try client()
        var failure: (any Error)?
        do { try await body(client) } catch { failure = error }
        try? await client.shutdown()
        guard let failure else { return }
        if let e = failure as? IVHError {
            if json {
                var fields: [(String, String)] = [("error", EventJSON.quote(e.stableCode)), ("message", EventJSON.quote(e.description))]
                if let c = e.code { fields.append(("code", String(c))) }
                print("{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}")
            }
            printError("error: \(e.description)")
            throw ExitStatus.runtimeFailure
        }
        throw failure
    }
}

/// Writes a line to standard error.
private func printError(_ text: String) {
    FileHandle.standardError.write(Data((text + "\n").utf8))
}

/// Exit code 1: the service refused or failed.
enum ExitStatus {
    static let runtimeFailure = ExitCode(1)
}

extension IVHSession {
    /// One JSON object.
    var json: String {
        var f: [(String, String)] = [("session_id", EventJSON.quote(id)), ("status", String(status)),
                                     ("status_name", EventJSON.quote(statusName)), ("play_url", EventJSON.quote(playURL))]
        if let userID { f.append(("user_id", EventJSON.quote(userID))) }
        if let driverType { f.append(("driver_type", String(driverType))) }
        if let isStarted { f.append(("started", isStarted ? "true" : "false")) }
        if let speakStatus { f.append(("speak_status", EventJSON.quote(speakStatus))) }
        return "{" + f.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }
}

/// `voicepipe avatar sessions`: sessions in progress.
struct AvatarSessionsCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "sessions", abstract: "List the sessions in progress")
    @OptionGroup var options: AvatarOptions

    func run() async throws {
        try await options.with { client in
            let list = try await client.listSessions()
            if options.json {
                print("[" + list.map(\.json).joined(separator: ",") + "]")
                return
            }
            if list.isEmpty { print("no sessions in progress"); return }
            for s in list {
                var line = "\(s.id)  \(s.statusName)"
                if let u = s.userID { line += "  user=\(u)" }
                if let d = s.driverType { line += "  driver=\(d)" }
                if let st = s.isStarted { line += st ? "  started" : "  not started" }
                if !s.playURL.isEmpty { line += "  \(s.playURL)" }
                print(line)
            }
        }
    }
}

/// `voicepipe avatar status ID`.
struct AvatarStatusCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "status", abstract: "Show a session's status")
    @Argument(help: "Session id.") var id: String
    @OptionGroup var options: AvatarOptions

    func run() async throws {
        try await options.with { client in
            let s = try await client.status(id)
            if options.json { print(s.json); return }
            print("session:  \(s.id)")
            print("status:   \(s.statusName) (\(s.status))")
            if !s.playURL.isEmpty { print("play:     \(s.playURL)") }
            if let sp = s.speakStatus, !sp.isEmpty { print("speaking: \(sp)") }
            if let st = s.isStarted { print("started:  \(st ? "yes" : "no")") }
        }
    }
}

/// `voicepipe avatar close ID`.
struct AvatarCloseCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "close", abstract: "Close a session and release its concurrency slot")
    @Argument(help: "Session id.") var id: String
    @OptionGroup var options: AvatarOptions

    func run() async throws {
        try await options.with { client in
            try await client.closeSession(id)
            print(options.json ? "{\"session_id\":\(EventJSON.quote(id)),\"closed\":true}" : "closed \(id)")
        }
    }
}

/// `voicepipe avatar layout ID --space JSON [--image JSON]`: configsession.
struct AvatarLayoutCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "layout", abstract: "Change a running session's background, position and zoom (configsession)")
    @Argument(help: "Session id.") var id: String
    @Option(help: "SpaceParam as a JSON object: BackgroundUrl, ImagePosition (-0.5...0.5), ImagePositionVertical (-0.5...0.25), ImageZoom.") var space: String?
    @Option(help: "ImageParam as a JSON object (3D avatars).") var image: String?
    @OptionGroup var options: AvatarOptions

    static func object(_ text: String?, _ name: String) throws -> [String: ParamValue]? {
        guard let text else { return nil }
        guard let o = (try? JSONSerialization.jsonObject(with: Data(text.utf8))) as? [String: Any] else {
            throw ValidationError("--\(name): expected a JSON object")
        }
        var out: [String: ParamValue] = [:]
        for (k, v) in o {
            switch v {
            case let s as String: out[k] = .string(s)
            case let n as NSNumber where String(cString: n.objCType) == "c": out[k] = .bool(n.boolValue)
            case let n as NSNumber: out[k] = Int(exactly: n.doubleValue).map { .int($0) } ?? .double(n.doubleValue)
            default: throw ValidationError("--\(name): \(k) must be a string, number or boolean")
            }
        }
        return out
    }

    func validate() throws {
        if space == nil && image == nil { throw ValidationError("give --space or --image") }
        _ = try Self.object(space, "space")
        _ = try Self.object(image, "image")
    }

    func run() async throws {
        let spaceParam = try Self.object(space, "space"), imageParam = try Self.object(image, "image")
        try await options.with { client in
            try await client.configureSession(id, spaceParam: spaceParam, imageParam: imageParam)
            print(options.json ? "{\"session_id\":\(EventJSON.quote(id)),\"configured\":true}" : "configured \(id)")
        }
    }
}

/// `voicepipe avatar config`: the project's configuration (driver types, protocols, ...).
struct AvatarConfigCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(commandName: "config", abstract: "Show the project's configuration (queryconfig)")
    @OptionGroup var options: AvatarOptions

    func run() async throws {
        try await options.with { client in print(try await client.queryConfiguration()) }
    }
}
