import Foundation
import NATSClient
import PipelineCore

/// What `voicepipe serve FILE` reads (DESIGN.md, "voicepipe serve"): where to listen, how many sessions
/// at once, and routes, each a protocol front-end and a graph template whose `app-source` receives the
/// session's audio. Loaded and checked at start-up with `file:line:column` errors; every template is
/// validated as `voicepipe validate` would.
package struct ServeConfiguration: Sendable {
    /// Front-end protocols.
    enum FrontEnd: String, Sendable, CaseIterable {
        /// Tencent Cloud real-time ASR v2 (WebSocket, signed query).
        case tencentASR = "tencent-asr"
        /// Home Assistant's Wyoming speech-to-text (TCP, its own port).
        case wyoming
        /// Binary PCM in, JSON-lines events out (WebSocket).
        case websocket
        /// Asterisk's AudioSocket (TCP, its own port): one telephone call per connection.
        case audiosocket
        /// Twilio Media Streams (WebSocket): one telephone call per connection.
        case twilio
        /// SIP (UDP and TCP, its own port) with RTP media: one telephone call per dialog.
        case sip

        /// Whether the route is a WebSocket path on the HTTP listener (else it has its own TCP port).
        var usesPath: Bool { self == .websocket || self == .tencentASR || self == .twilio }
    }

    /// A key pair accepted on a `tencent-asr` route for one appid.
    struct Key: Sendable {
        var secretID: String
        var secretKey: String
    }

    package struct Route: Sendable {
        package var name: String
        var kind: FrontEnd
        /// HTTP path (WebSocket routes); `{appid}` matches one path segment.
        package var path: String?
        /// TCP port (Wyoming, AudioSocket).
        package var port: Int?
        var graphPath: String
        var graph: ValidatedGraph
        /// The template's `app-source` node and the audio format it takes.
        var sourceID: String
        var format: AudioFormat
        /// appid → keys (tencent-asr).
        var keys: [String: [Key]]
        /// Longest session, seconds; total audio bytes a session may send; silence before 4008 / close.
        var maxDurationS: Int
        var maxBytes: Int
        var idleTimeoutMs: Int
        /// Largest WebSocket message accepted.
        var maxFrameBytes: Int
        /// The template's `app-sink` taking audio, if any: its audio goes back to the client.
        var answer: Answer?
        /// A Wyoming route whose graph speaks (an `app-source` `text` feeding text, an `app-sink`
        /// `speaker` taking audio): the speaker's id. Such a route is a Wyoming TTS server.
        var speakerID: String?
        /// `sip` routes: codecs, timers, media address.
        var sip: SIPRouteOptions?
    }

    /// Where a session's answer audio comes from (websocket routes): the template's one `app-sink` fed
    /// audio. Its frames go to the client as binary messages, at most `bufferMs` of them waiting.
    struct Answer: Sendable {
        var sinkID: String
        /// What reaches the sink's `interrupt` input, as seen on the graph's events: node → the names
        /// of its events that do (nil: all of them — its `events` output is linked there). These also
        /// discard the answer audio the session holds but has not sent.
        var interruptedBy: [String: Set<String>?]

        /// True when `event` is one that reaches the sink's `interrupt` input.
        func interrupts(_ event: Event) -> Bool {
            guard let names = interruptedBy[event.node] else { return false }
            return names?.contains(event.name.rawValue) ?? true
        }
        /// Most answer audio waiting for a slow client, in milliseconds (oldest dropped beyond).
        var bufferMs: Int
    }

    /// Where session events go (`nats:`): subjects `<subject_prefix>.<route>.<session>.<event>`.
    struct NATS: Sendable {
        var url: String
        var stream = "VOICEPIPE"
        var subjectPrefix = "voicepipe"
        /// `worker` in every event; nil = `$VOICEPIPE_WORKER`, else host name and process id.
        var worker: String?
        /// Events held while NATS is unreachable.
        var buffer = 100_000
        /// Only these graph events (all when nil); `started` and `finished` always.
        var events: Set<String>?
        var createStream = true
        /// Replicas of the stream when serve creates it (3 on a JetStream cluster).
        var replicas = 1
        /// Directory of the file copy of held events (survive a crash or a stop during an outage).
        var spoolDir: String?
        /// At shutdown, how long to wait for the last acknowledgements.
        var flushTimeoutS = 10
        /// How long a session's end waits for its `finished` event to be stored before the client's
        /// last answer (only while connected).
        var finishedAckMs = 2000
    }

    package var listen: (host: String, port: Int) = ("0.0.0.0", 8080)
    var nats: NATS?
    var maxSessions = 100
    package var drainGraceS = 30
    /// The most an HTTP connection may take to send a whole request (head and body), and to send the
    /// next one after a response; past it the connection is closed (silent, half-sent, one byte a second).
    var requestTimeoutMs = 10_000
    /// How a WebSocket session over `max_sessions` is refused.
    enum FullResponse: String, Sendable {
        /// Accept the upgrade, then the protocol's busy answer (Tencent 4006), as the cloud service does.
        case websocket
        /// HTTP 503 before the upgrade: a load balancer in front can retry another worker.
        case http
    }
    var fullResponse = FullResponse.websocket
    package var routes: [Route] = []
    /// The talk page and the console (`console: { token: "${VAR}" }`): with a token every request to them
    /// must carry it; without one they answer loopback clients only.
    var consoleToken: String?
    /// Origins of browser pages (`https://voice.example.com`) allowed to use the pages and to open session
    /// WebSockets besides loopback ones (``PageAccess``).
    var allowedOrigins: [String] = []

    /// True when the file's top level has `routes:` and no `nodes:` (a cheap look at the text, not a parse).
    package static func looksLikeServeConfiguration(path: String) -> Bool {
        guard let data = FileManager.default.contents(atPath: path), data.count < 4 << 20 else { return false }
        let lines = String(decoding: data, as: UTF8.self).split(separator: "\n")
        return lines.contains { $0.hasPrefix("routes:") } && !lines.contains { $0.hasPrefix("nodes:") }
    }

    /// Loads `path`: YAML, `${VAR}` substitution into its values, checks; throws a ``GraphError`` listing every problem.
    package static func load(path: String, registry: NodeRegistry, environment: [String: String] = ProcessInfo.processInfo.environment) throws -> ServeConfiguration {
        guard let data = FileManager.default.contents(atPath: path), let text = String(data: data, encoding: .utf8) else {
            throw GraphError([GraphIssue(.structure, at: SourceLocation(file: path, line: 0, column: 0), "cannot read the serve configuration")])
        }
        var issues: [GraphIssue] = []
        let root: YAMLNode?
        do {
            root = try YAMLNode.compose(yaml: text, file: path, environment: environment, issues: &issues)
        } catch {
            throw GraphError(issues + [GraphIssue(.syntax, at: SourceLocation(file: path, line: 0, column: 0), "YAML syntax error: \(error)")])
        }
        var config = ServeConfiguration()
        func at(_ n: YAMLNode) -> SourceLocation {
            SourceLocation(file: path, line: (n.mark?.line ?? 0), column: (n.mark?.column ?? 0))
        }
        func problem(_ n: YAMLNode, _ message: String) { issues.append(GraphIssue(.structure, at: at(n), message)) }
        func int(_ n: YAMLNode, _ name: String, _ range: ClosedRange<Int>) -> Int? {
            guard let v = n.scalar.flatMap({ Int($0.string) }), range.contains(v) else {
                problem(n, "\(name): expected an integer in \(range.lowerBound)...\(range.upperBound), got '\(n.scalar?.string ?? "a collection")'")
                return nil
            }
            return v
        }
        guard let root, let top = root.mapping else {
            throw GraphError(issues + [GraphIssue(.structure, at: SourceLocation(file: path, line: 1, column: 1),
                                                  "a serve configuration is a mapping with `listen:`, `max_sessions:` and `routes:`")])
        }
        let baseDir = (path as NSString).deletingLastPathComponent
        for (k, v) in top {
            switch k.string ?? "" {
            case "listen":
                guard let m = v.mapping else { problem(v, "listen: expected { host: 0.0.0.0, port: 8080 }"); continue }
                for (lk, lv) in m {
                    switch lk.string ?? "" {
                    case "host": config.listen.host = lv.string ?? config.listen.host
                    case "port": if let p = int(lv, "listen.port", 0...65535) { config.listen.port = p }
                    default: problem(lk, "listen: unknown key '\(lk.string ?? "?")'; expected host, port")
                    }
                }
            case "max_sessions": if let n = int(v, "max_sessions", 1...100_000) { config.maxSessions = n }
            case "drain_grace_s": if let n = int(v, "drain_grace_s", 0...3600) { config.drainGraceS = n }
            case "request_timeout_ms": if let n = int(v, "request_timeout_ms", 100...600_000) { config.requestTimeoutMs = n }
            case "full_response":
                guard let r = v.string.flatMap(FullResponse.init(rawValue:)) else {
                    problem(v, "full_response: expected websocket (the protocol's busy answer after the upgrade, as Tencent's service) "
                            + "or http (503 before the upgrade, which a load balancer retries on another worker)")
                    continue
                }
                config.fullResponse = r
            case "nats":
                config.nats = parseNATS(v, problem: problem, int: int)
            case "console":
                guard let m = v.mapping else { problem(v, "console: expected { token: \"${CONSOLE_TOKEN}\", allowed_origins: [https://…] }"); continue }
                for (ck, cv) in m {
                    switch ck.string ?? "" {
                    case "token":
                        let t = cv.string ?? ""
                        if t.count < 8 { problem(cv, "console.token: expected at least 8 characters (a secret, e.g. \"${CONSOLE_TOKEN}\")") }
                        config.consoleToken = t
                    case "allowed_origins":
                        guard let list = cv.sequence else { problem(cv, "console.allowed_origins: expected a list of origins, e.g. [\"https://voice.example.com\"]"); continue }
                        for item in list {
                            guard let o = item.string, PageAccess.normalizedOrigin(o) != nil else {
                                problem(item, "console.allowed_origins: '\(item.string ?? "a collection")' is not an origin: expected http(s)://HOST[:PORT], no path")
                                continue
                            }
                            config.allowedOrigins.append(o)
                        }
                    default: problem(ck, "console: unknown key '\(ck.string ?? "?")'; expected token, allowed_origins")
                    }
                }
            case "routes":
                guard let list = v.sequence else { problem(v, "routes: expected a list of routes"); continue }
                for r in list {
                    var graphIssues: [GraphIssue] = []
                    let route = parseRoute(r, baseDir: baseDir, registry: registry, environment: environment, problem: problem, int: int, graphIssues: &graphIssues)
                    issues.append(contentsOf: graphIssues)
                    if let route { config.routes.append(route) }
                }
            default:
                problem(k, "unknown key '\(k.string ?? "?")'; expected listen, max_sessions, drain_grace_s, request_timeout_ms, full_response, nats, console, routes")
            }
        }
        if config.routes.isEmpty && issues.isEmpty { problem(root, "no routes: add at least one under `routes:`") }
        var names = Set<String>(), paths = Set<String>()
        for r in config.routes {
            if !names.insert(r.name).inserted { issues.append(GraphIssue(.structure, at: SourceLocation(file: path, line: 0, column: 0), "two routes are named '\(r.name)'")) }
            if let p = r.path, !paths.insert(p).inserted { issues.append(GraphIssue(.structure, at: SourceLocation(file: path, line: 0, column: 0), "two routes serve the path \(p)")) }
        }
        if !issues.isEmpty { throw GraphError(issues) }
        return config
    }

    private static func parseNATS(_ n: YAMLNode, problem: (YAMLNode, String) -> Void, int: (YAMLNode, String, ClosedRange<Int>) -> Int?) -> NATS? {
        guard let m = n.mapping else { problem(n, "nats: expected { url: \"nats://127.0.0.1:4222\", stream: VOICEPIPE }"); return nil }
        var nats = NATS(url: "")
        for (k, v) in m {
            switch k.string ?? "" {
            case "url":
                nats.url = v.string ?? ""
                do { _ = try NATSOptions(url: nats.url) } catch { problem(v, "nats.url: \(error)") }
            case "stream":
                nats.stream = v.string ?? ""
                if nats.stream.isEmpty || nats.stream.contains(where: { ".*> \t".contains($0) }) { problem(v, "nats.stream '\(nats.stream)': a stream name has no '.', '*', '>' or spaces") }
            case "subject_prefix":
                nats.subjectPrefix = v.string ?? ""
                if !NATSSubject.isValidForPublish(nats.subjectPrefix + ".x") { problem(v, "nats.subject_prefix '\(nats.subjectPrefix)': expected dot-separated tokens without wildcards or spaces") }
            case "worker": nats.worker = v.string.flatMap { $0.isEmpty ? nil : $0 }
            case "buffer": nats.buffer = int(v, "nats.buffer", 1...10_000_000) ?? nats.buffer
            case "replicas": nats.replicas = int(v, "nats.replicas", 1...5) ?? nats.replicas
            case "spool_dir": nats.spoolDir = v.string.flatMap { $0.isEmpty ? nil : $0 }
            case "flush_timeout_s": nats.flushTimeoutS = int(v, "nats.flush_timeout_s", 0...600) ?? nats.flushTimeoutS
            case "finished_ack_ms": nats.finishedAckMs = int(v, "nats.finished_ack_ms", 0...60_000) ?? nats.finishedAckMs
            case "create_stream":
                guard let b = v.string.flatMap({ ["true": true, "false": false][$0.lowercased()] }) else { problem(v, "nats.create_stream: expected true or false"); continue }
                nats.createStream = b
            case "events":
                guard let list = v.sequence else { problem(v, "nats.events: expected a list of event names, e.g. [transcript, error]"); continue }
                nats.events = Set(list.compactMap(\.string))
            default:
                problem(k, "nats: unknown key '\(k.string ?? "?")'; expected url, stream, subject_prefix, worker, buffer, events, create_stream, replicas, spool_dir, flush_timeout_s, finished_ack_ms")
            }
        }
        if m["url"] == nil { problem(n, "nats: missing `url:` (nats://host:4222; credentials from NATS_USER/NATS_PASSWORD or NATS_TOKEN)"); return nil }
        return nats
    }

    static func parseRoute(_ n: YAMLNode, baseDir: String, registry: NodeRegistry, environment: [String: String],
                                   problem: (YAMLNode, String) -> Void, int: (YAMLNode, String, ClosedRange<Int>) -> Int?,
                                   graphIssues issues: inout [GraphIssue]) -> Route? {
        guard let m = n.mapping else { problem(n, "a route is a mapping with name, protocol, path or port, and graph"); return nil }
        var name: String?, kind: FrontEnd?, path: String?, port: Int?, graph: String?
        var keys: [String: [Key]] = [:]
        var sipOptions = SIPRouteOptions(), sipKeys: [YAMLNode] = []
        var maxDuration = 3600, maxBytes = 512 * 1024 * 1024, idle = 15_000, maxFrame = 1 << 20, answerBuffer = 20_000
        for (k, v) in m {
            switch k.string ?? "" {
            case "name": name = v.string
            case "protocol":
                kind = v.string.flatMap(FrontEnd.init(rawValue:))
                if kind == nil { problem(v, "protocol: expected one of \(FrontEnd.allCases.map(\.rawValue).joined(separator: ", ")), got '\(v.string ?? "?")'") }
            case "path":
                path = v.string
                if !(path?.hasPrefix("/") ?? false) { problem(v, "path: expected an absolute HTTP path such as /asr/v2/{appid}") }
            case "port": port = int(v, "port", 1...65535)
            case "graph": graph = v.string
            case "max_duration_s": maxDuration = int(v, "max_duration_s", 1...86_400) ?? maxDuration
            case "max_bytes": maxBytes = int(v, "max_bytes", 1024...(1 << 40)) ?? maxBytes
            case "idle_timeout_ms": idle = int(v, "idle_timeout_ms", 100...3_600_000) ?? idle
            case "max_frame_bytes": maxFrame = int(v, "max_frame_bytes", 1024...(16 << 20)) ?? maxFrame
            case "answer_buffer_ms": answerBuffer = int(v, "answer_buffer_ms", 100...600_000) ?? answerBuffer
            case "codecs", "rtp_timeout_s", "tcp_idle_s", "ring_ms", "media_address", "register", "jitter_ms":
                sipKeys.append(k)
                sipOptions.parse(key: k.string ?? "", value: v, problem: problem, int: int)
            case "keys":
                guard let km = v.mapping else { problem(v, "keys: expected { \"APPID\": { secret_id: …, secret_key: … } }"); continue }
                for (appid, entry) in km {
                    let list = entry.sequence ?? [entry]
                    for e in list {
                        guard let em = e.mapping, let id = em["secret_id"]?.string, let key = em["secret_key"]?.string, !id.isEmpty, !key.isEmpty else {
                            problem(e, "keys.\(appid.string ?? "?"): expected { secret_id: …, secret_key: … } with both set")
                            continue
                        }
                        keys[appid.string ?? "", default: []].append(Key(secretID: id, secretKey: key))
                    }
                }
            default:
                problem(k, "route: unknown key '\(k.string ?? "?")'; expected name, protocol, path, port, graph, keys, max_duration_s, max_bytes, idle_timeout_ms, max_frame_bytes, answer_buffer_ms, codecs, rtp_timeout_s, ring_ms, media_address, jitter_ms")
            }
        }
        guard let kind else { if m["protocol"] == nil { problem(n, "route: missing `protocol:`") }; return nil }
        guard let graph else { problem(n, "route: missing `graph:` (a graph template with one app-source node)"); return nil }
        let routeName = name ?? kind.rawValue
        switch kind {
        case .wyoming where port == nil: problem(n, "route '\(routeName)': a wyoming route needs `port:` (TCP)"); return nil
        case .audiosocket where port == nil: problem(n, "route '\(routeName)': an audiosocket route needs `port:` (TCP)"); return nil
        case .sip where port == nil: problem(n, "route '\(routeName)': a sip route needs `port:` (UDP and TCP, e.g. 5060)"); return nil
        case .tencentASR, .websocket, .twilio:
            if path == nil { problem(n, "route '\(routeName)': a \(kind.rawValue) route needs `path:`"); return nil }
            if kind == .tencentASR && keys.isEmpty { problem(n, "route '\(routeName)': a tencent-asr route needs `keys:` (appid → secret_id, secret_key)"); return nil }
        default: break
        }
        if kind != .sip, let k = sipKeys.first { problem(k, "route '\(routeName)': `\(k.string ?? "")` is for sip routes only"); return nil }
        let graphPath = graph.hasPrefix("/") ? graph : (baseDir.isEmpty ? graph : baseDir + "/" + graph)
        let resolvedPath = FileManager.default.fileExists(atPath: graphPath) ? graphPath : graph
        let validated: ValidatedGraph
        do {
            validated = try GraphValidator.load(path: resolvedPath, registry: registry, environment: environment)
        } catch let e as GraphError {
            issues.append(contentsOf: e.issues)
            return nil
        } catch {
            problem(n, "route '\(routeName)': graph \(graph): \(error)")
            return nil
        }
        let sources = validated.nodes.filter { $0.descriptor.type == "app-source" }
        guard sources.count == 1, let source = sources.first, let c = source.configuration as? AppSourceNode.Configuration else {
            problem(n, "route '\(routeName)': the graph \(graph) must have exactly one app-source node (it has \(sources.count)); the session's audio goes there")
            return nil
        }
        // An app-sink fed audio is where the session's answer comes from (websocket and audiosocket routes).
        let answerSinks = validated.nodes.filter { node in
            node.descriptor.type == "app-sink" && validated.links.contains { l in
                l.toNode == node.id && l.toPort == "in"
                    && validated.node(l.fromNode)?.descriptor.outputs.first(where: { $0.name == l.fromPort })?.kinds.contains(.audio) == true
            }
        }
        var answer: Answer?
        if let sink = answerSinks.first {
            guard answerSinks.count == 1 else {
                problem(n, "route '\(routeName)': the graph \(graph) has \(answerSinks.count) app-sink nodes taking audio "
                        + "(\(answerSinks.map(\.id).joined(separator: ", "))); the session's answer audio comes from one")
                return nil
            }
            if kind == .wyoming && source.id == "text" && sink.id == "speaker" {
                return Route(name: routeName, kind: kind, path: path, port: port, graphPath: resolvedPath, graph: validated, sourceID: source.id,
                             format: AudioFormat(sampleRate: c.rate, channels: c.channels), keys: keys, maxDurationS: maxDuration,
                             maxBytes: maxBytes, idleTimeoutMs: idle, maxFrameBytes: maxFrame, answer: nil, speakerID: sink.id)
            }
            guard kind == .websocket || kind == .audiosocket || kind == .twilio || kind == .sip else {
                problem(n, "route '\(routeName)': the graph \(graph) answers with audio (app-sink '\(sink.id)'), which only websocket, audiosocket, twilio and sip routes send back"
                        + (kind == .wyoming ? " (a Wyoming speech synthesis graph has an app-source with id text and an app-sink with id speaker)" : ""))
                return nil
            }
            var interrupters: [String: Set<String>?] = [:]
            for l in validated.links where l.toNode == sink.id && l.toPort == "interrupt" {
                if l.fromPort == "events" {
                    interrupters[l.fromNode] = .some(nil)
                } else if validated.node(l.fromNode)?.descriptor.type == "barge-in" {
                    // barge-in sends on `interrupt` what it emits as `barge_in`.
                    interrupters[l.fromNode] = .some(["barge_in"])
                }
            }
            answer = Answer(sinkID: sink.id, interruptedBy: interrupters, bufferMs: answerBuffer)
        }
        return Route(name: routeName, kind: kind, path: path, port: port, graphPath: resolvedPath, graph: validated, sourceID: source.id,
                     format: AudioFormat(sampleRate: c.rate, channels: c.channels), keys: keys, maxDurationS: maxDuration,
                     maxBytes: maxBytes, idleTimeoutMs: idle, maxFrameBytes: maxFrame, answer: answer, sip: kind == .sip ? sipOptions : nil)
    }
}
