import ArgumentParser
import Foundation
import Logging
import PipelineCore
import VoicepipeServe

/// `voicepipe call URI GRAPH`: places a SIP call and runs the graph for it (see ``SIPDialer``).
struct CallCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "call",
        abstract: "Place a SIP call (UDP or TCP, optionally through a registrar) and run a graph for it: its app-source hears the callee, its app-sink speaks",
        discussion: """
        GRAPH has one app-source (the callee's audio arrives there at its rate, digits as dtmf events, and \
        call_start / call_end) and at most one app-sink fed audio (what the callee hears). The call ends when \
        the callee hangs up, when the graph ends or its app-sink's stream ends and has been sent (voicepipe \
        sends BYE), after --max-duration, or at SIGINT/SIGTERM. \
        The signalling goes over UDP, or over TCP with --transport tcp or ;transport=tcp in the URI (of the \
        registrar when there is one, else of the callee). With --registrar, voicepipe registers as \
        sip:USER@REGISTRAR-HOST (digest with --auth-user and VOICEPIPE_SIP_PASSWORD when challenged), sends \
        the call through the registrar (its outbound proxy), and unregisters when the call is over. \
        Exit status: 0 the call took place, 1 it failed or was refused (or the registrar refused the \
        registration, or the TCP connection failed), 2 a bad graph or option.
        Examples: voicepipe call sip:echo@192.0.2.10:5060 call.yaml
                  voicepipe call "sip:echo@192.0.2.10;transport=tcp" call.yaml
                  voicepipe call sip:200@pbx.lan call.yaml --registrar sip:pbx.lan
        """)

    @Argument(help: "The SIP URI to call (sip:user@host[:port][;transport=tcp]).") var uri: String
    @Argument(help: "The graph to run for the call (YAML).") var graph: String
    @Option(name: .long, help: "Codecs to offer, in preference order (pcmu, pcma, g722, opus).") var codecs: String = "pcmu,pcma,g722,opus"
    @Option(name: .long, help: "Give up ringing after this many seconds (CANCEL).") var ringTimeout: Int = 60
    @Option(name: .long, help: "Hang up when the callee sends no RTP for this many seconds (0: never).") var rtpTimeout: Int = 30
    @Option(name: .long, help: "Hang up after this many seconds of call (0: no limit).") var maxDuration: Int = 0
    @Option(name: .long, help: "The user part of the From URI (with --registrar, the user registered).") var user: String = "voicepipe"
    @Option(name: .long, help: "User name for digest authentication when the registrar or the INVITE is challenged (default: --user); the password comes from VOICEPIPE_SIP_PASSWORD.")
    var authUser: String?
    @Option(name: .long, help: "The signalling transport: udp or tcp (default: the URI's transport parameter, else udp).") var transport: String?
    @Option(name: .long, help: "Register with this registrar first (sip:host[:port][;transport=tcp]), place the call through it, unregister after.")
    var registrar: String?
    @Option(name: .long, help: "Log level: trace, debug, info, notice, warning, error.") var logLevel: String = "info"
    @OptionGroup var plugin: PluginOptions

    func validate() throws {
        let list = codecs.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        for c in list where !["pcmu", "pcma", "g722", "opus"].contains(c) {
            throw ValidationError("--codecs: '\(c)' is not one of pcmu, pcma, g722, opus")
        }
        if list.isEmpty { throw ValidationError("--codecs: name at least one codec") }
        if !(1...3600).contains(ringTimeout) { throw ValidationError("--ring-timeout: expected 1...3600 seconds") }
        if maxDuration < 0 { throw ValidationError("--max-duration: expected 0 or more seconds") }
        if !(0...3600).contains(rtpTimeout) { throw ValidationError("--rtp-timeout: expected 0...3600 seconds") }
        if let transport, SIPDialer.Transport(rawValue: transport.lowercased()) == nil {
            throw ValidationError("--transport: '\(transport)' is not one of udp, tcp")
        }
        if user.isEmpty || user.contains(where: { " <>@:;\"".contains($0) }) { throw ValidationError("--user: expected a user name (no spaces, <, >, @, :, ;)") }
    }

    func run() async throws {
        let registry = try plugin.registry()
        var logger = Logger(label: "voicepipe.call")
        logger.logLevel = Logger.Level(rawValue: logLevel) ?? .info
        var options = SIPDialer.Options(uri: uri, graphPath: graph)
        options.codecs = codecs.split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        options.ringTimeoutS = ringTimeout
        options.rtpTimeoutS = rtpTimeout
        options.user = user
        options.maxDurationS = maxDuration
        options.authUser = authUser
        options.password = ProcessInfo.processInfo.environment["VOICEPIPE_SIP_PASSWORD"]
        options.transport = transport.flatMap { SIPDialer.Transport(rawValue: $0.lowercased()) }
        options.registrar = registrar
        let dialer: SIPDialer
        do {
            dialer = try SIPDialer(options: options, registry: registry, logger: logger)
        } catch let e as GraphError {
            FileHandle.standardError.write(Data((e.description + "\n").utf8))
            throw ExitCode(2)
        } catch let e as SIPDialer.Failure {
            FileHandle.standardError.write(Data("voicepipe call: \(e.description)\n".utf8))
            throw ExitCode(e.exitCode)
        }
        SignalCenter.onFirstSignal { dialer.stop() }
        defer { SignalCenter.release() }
        do {
            let reason = try await dialer.run()
            FileHandle.standardOutput.write(Data("call ended: \(reason)\n".utf8))
        } catch let e as SIPDialer.Failure {
            FileHandle.standardError.write(Data("voicepipe call: \(e.description)\n".utf8))
            throw ExitCode(e.exitCode)
        } catch {
            FileHandle.standardError.write(Data("voicepipe call: \(error)\n".utf8))
            throw ExitCode(1)
        }
    }
}
