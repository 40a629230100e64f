import Foundation
import Logging
import NATSClient
import PipelineCore

/// Events on NATS JetStream, as `nats-sink` and `voicepipe serve` publish them: subject
/// `<prefix>.<route>.<session>.<event>` (each part made a safe subject token), payload the event's JSON
/// line (the `jsonl-sink` format) with `session`, `route` and `worker` added; a `Nats-Msg-Id` per message.
///
/// ```swift
/// let events = try NATSEventPublisher(url: "nats://127.0.0.1:4222", stream: "VOICEPIPE", environment: variables, logger: logger)
/// let loop = Task { await events.publisher.run() }
/// events.publish(Event(.transcript, fields: [("text", "hello")]), route: "asr", session: "s1")
/// ```
public struct NATSEventPublisher: Sendable {
    /// The JetStream publisher underneath (its counters, `run()`, `close(timeout:)`).
    public let publisher: JetStreamPublisher
    /// First subject token.
    public let prefix: String
    /// Who publishes: `worker` in every payload.
    public let worker: String

    /// `url` may list several servers; credentials from the URL or `NATS_USER`/`NATS_PASSWORD`, `NATS_TOKEN`,
    /// `NATS_CREDS` or `NATS_NKEY` (the files are read now: a bad one is an error here).
    public init(url: String, stream: String, prefix: String = "voicepipe", worker: String? = nil, createStream: Bool = true,
                capacity: Int = 10_000, ackTimeout: Duration = .seconds(2), streamSubjects: [String]? = nil, replicas: Int = 1,
                spoolDirectory: String? = nil, environment: [String: String], logger: Logger) throws {
        var options = try NATSOptions(url: url)
        options.applyEnvironment(environment)
        try options.checkCredentials()
        let worker = (worker?.isEmpty == false ? worker : nil) ?? Self.defaultWorker(environment)
        options.name = "voicepipe \(worker)"
        var c = JetStreamPublisher.Configuration(options: options, stream: stream, streamSubjects: streamSubjects ?? [prefix + ".>"])
        c.createStream = createStream
        c.replicas = replicas
        c.spoolDirectory = spoolDirectory
        c.capacity = capacity
        c.ackTimeout = ackTimeout
        publisher = JetStreamPublisher(configuration: c, logger: logger)
        if let problem = publisher.spoolProblem { throw NATSError.spool(problem) }
        self.prefix = prefix
        self.worker = worker
    }

    /// A random session id (16 hex digits), for sessions the client did not name.
    public static func newSessionID() -> String {
        var g = SystemRandomNumberGenerator()
        return String(format: "%016llx", g.next() as UInt64)
    }

    /// `VOICEPIPE_WORKER`, else the host name (a pod's name in Kubernetes) and the process id.
    public static func defaultWorker(_ environment: [String: String]) -> String {
        if let w = environment["VOICEPIPE_WORKER"], !w.isEmpty { return w }
        return "\(ProcessInfo.processInfo.hostName.split(separator: ".").first.map(String.init) ?? "host")-\(getpid())"
    }

    /// The subject of an event: `<prefix>.<route>.<session>.<event>`, or `<base>.<event>` when `base` is given.
    public func subject(route: String, session: String, event: String, base: String? = nil) -> String {
        if let base { return "\(base).\(NATSSubject.token(event))" }
        return "\(prefix).\(NATSSubject.token(route)).\(NATSSubject.token(session)).\(NATSSubject.token(event))"
    }

    /// Queues `event` (never blocks).
    public func publish(_ event: Event, route: String, session: String, base: String? = nil) {
        publisher.publish(subject: subject(route: route, session: session, event: event.name.rawValue, base: base),
                          payload: Self.payload(event, route: route, session: session, worker: worker))
    }

    /// The event's JSON line with `session`, `route`, `worker` (replacing fields of those names).
    public static func payload(_ event: Event, route: String, session: String, worker: String) -> [UInt8] {
        var e = event
        e.fields.removeAll { ["session", "route", "worker"].contains($0.0) }
        e.fields.append(("session", .string(session)))
        e.fields.append(("route", .string(route)))
        e.fields.append(("worker", .string(worker)))
        return Array(e.jsonLine().utf8)
    }
}

/// `nats-sink`: publishes events (and text frames) to NATS JetStream, at least once: held in a bounded
/// buffer while the server is unreachable and sent on reconnect; the stream acknowledges each one.
/// Subjects `<subject_prefix>.<route>.<session>.<event>`; a `started` event first and one `finished` at
/// the end of the input (with the counts, and the `text` of the graph's own `finished` events, which are
/// not published separately). At the end the node waits up to `flush_timeout_ms` for the
/// last acknowledgements; what is still unacknowledged then is reported as an `error` event
/// (`nats_unacknowledged`) and counted.
///
/// ```yaml
/// bus: { type: nats-sink, url: "${NATS_URL:-nats://127.0.0.1:4222}", stream: VOICEPIPE, route: kiosk }
/// ```
public actor NATSSinkNode: Node {
    let c: Configuration

    /// The graph's environment variables (NATS_URL and the credentials' variables).
    let variables: [String: String]

    init(configuration: Configuration, variables: [String: String] = [:]) {
        c = configuration
        self.variables = variables
    }

    public func run(_ context: NodeContext) async throws {
        let env = variables
        let url = c.url.isEmpty ? (env["NATS_URL"].flatMap { $0.isEmpty ? nil : $0 } ?? "nats://127.0.0.1:4222") : c.url
        let events: NATSEventPublisher
        do {
            let base = c.subject.flatMap { $0.isEmpty ? nil : $0 }
            // A stream this node creates takes exactly what it publishes (streams may not overlap).
            events = try NATSEventPublisher(url: url, stream: c.stream, prefix: c.subjectPrefix, worker: c.worker, createStream: c.createStream,
                                            capacity: c.buffer, ackTimeout: .milliseconds(c.ackTimeoutMs), streamSubjects: base.map { [$0 + ".>"] },
                                            replicas: c.replicas, spoolDirectory: c.spoolDir.flatMap { $0.isEmpty ? nil : $0 }, environment: env, logger: context.logger)
        } catch {
            throw NodeError(.natsConfig, "\(error)")
        }
        let session = c.session.flatMap { $0.isEmpty ? nil : $0 } ?? NATSEventPublisher.newSessionID()
        let wanted = c.events.map(Set.init)
        let publisher = events.publisher
        let base = c.subject.flatMap { $0.isEmpty ? nil : $0 }
        context.logger.info("publishing to \(events.subject(route: c.route, session: session, event: "*", base: base)) on stream \(c.stream)")
        await withTaskGroup(of: Void.self) { group in
            group.addTask { await publisher.run() }
            var sent = 0
            var texts: [String] = []
            if c.lifecycle {
                events.publish(Event(.started, node: context.id, ts: context.elapsed, fields: [("protocol", "run")]), route: c.route, session: session, base: base)
            }
            for await frame in context.input() {
                let event: Event
                switch frame.payload {
                case .event(let e): event = e
                case .text(let t): event = Event(.text, node: context.id, ts: context.elapsed, fields: [("text", .string(t))])
                default: continue
                }
                // The recognizer's `finished` (the whole text) becomes part of the run's one `finished`.
                if c.lifecycle && event.name == .finished {
                    if let t = event["text"]?.stringValue, !t.isEmpty { texts.append(t) }
                    continue
                }
                if let wanted, !wanted.contains(event.name.rawValue) { continue }
                events.publish(event, route: c.route, session: session, base: base)
                sent += 1
            }
            if c.lifecycle {
                let s = publisher.statistics
                events.publish(Event(.finished, node: context.id, ts: context.elapsed,
                                     fields: [("outcome", "completed"), ("events", .int(Int64(sent))), ("dropped", .int(Int64(s.dropped))),
                                              ("text", .string(texts.joined(separator: " ")))]),
                               route: c.route, session: session, base: base)
            }
            let stats = await publisher.close(timeout: .milliseconds(c.flushTimeoutMs))
            context.count("published", by: stats.acknowledged)
            if stats.dropped > 0 { context.count("dropped", by: stats.dropped) }
            if stats.rejected > 0 { context.count("rejected", by: stats.rejected) }
            if stats.resent > 0 { context.count("resent", by: stats.resent) }
            if stats.held > 0 { context.count("unacknowledged", by: UInt64(stats.held)) }
            await group.waitForAll()
        }
        let stats = publisher.statistics
        if stats.held > 0 || stats.dropped > 0 || stats.rejected > 0 {
            var parts: [String] = []
            if stats.held > 0 { parts.append("\(stats.held) not acknowledged within flush_timeout_ms \(c.flushTimeoutMs)") }
            if stats.dropped > 0 { parts.append("\(stats.dropped) dropped (buffer of \(c.buffer) full)") }
            if stats.rejected > 0 { parts.append("\(stats.rejected) refused by the stream") }
            let why = publisher.lastError.map { "; last problem: \($0)" } ?? ""
            try? await context.emitError(code: "nats_unacknowledged", message: "events not stored in NATS: \(parts.joined(separator: ", "))\(why)")
        }
    }

    /// Configuration of `nats-sink`.
    public struct Configuration: NodeConfiguration {
        /// Server URL(s); empty = `$NATS_URL`, else `nats://127.0.0.1:4222`.
        public var url: String
        /// JetStream stream.
        public var stream: String
        /// First subject token.
        public var subjectPrefix: String
        /// Second subject token.
        public var route: String
        /// Third subject token; empty = a random id per run.
        public var session: String?
        /// The whole subject before `.<event>`, instead of `<subject_prefix>.<route>.<session>`.
        public var subject: String?
        /// `worker` in every payload; empty = `$VOICEPIPE_WORKER`, else host name and process id.
        public var worker: String?
        /// Only these event names (all when absent).
        public var events: [String]?
        /// Publish `started` and `finished`.
        public var lifecycle: Bool
        /// Create the stream when missing.
        public var createStream: Bool
        /// Replicas of a stream this node creates.
        public var replicas: Int
        /// Directory of the file copy of held events.
        public var spoolDir: String?
        /// Events held at most while NATS is away.
        public var buffer: Int
        /// Time an acknowledgement may take before the event is sent again.
        public var ackTimeoutMs: Int
        /// Time allowed at the end for the last acknowledgements.
        public var flushTimeoutMs: Int

        public static let parameters: [ParamSpec] = [
            ParamSpec("url", .string, default: "", secret: true, doc: "nats://[user:password@]host:port or tls://… (comma-separated for several); empty = $NATS_URL or nats://127.0.0.1:4222; credentials also from NATS_USER/NATS_PASSWORD, NATS_TOKEN, NATS_CREDS (.creds file) or NATS_NKEY (seed file), TLS files from NATS_TLS_CA/NATS_TLS_CERT/NATS_TLS_KEY"),
            ParamSpec("stream", .string, default: "VOICEPIPE", doc: "JetStream stream the subjects belong to"),
            ParamSpec("subject_prefix", .string, default: "voicepipe", doc: "first token of the subjects <prefix>.<route>.<session>.<event>"),
            ParamSpec("route", .string, default: "run", doc: "second subject token"),
            ParamSpec("session", .string, doc: "third subject token (default: a random id per run)"),
            ParamSpec("subject", .string, doc: "the subject before .<event>, replacing <subject_prefix>.<route>.<session> (e.g. kiosk.front-door → kiosk.front-door.transcript); the stream must take it"),
            ParamSpec("worker", .string, doc: "worker field of every event (default: $VOICEPIPE_WORKER, else host name and process id)"),
            ParamSpec("events", .stringList, doc: "publish only these event names (default: all)"),
            ParamSpec("lifecycle", .bool, default: true, doc: "publish `started` at the start and `finished` at the end of the input"),
            ParamSpec("create_stream", .bool, default: true, doc: "create the stream (subjects <prefix>.>, file storage) when it does not exist"),
            ParamSpec("replicas", .int(1...5), default: 1, doc: "replicas of the stream when this node creates it (3 on a JetStream cluster: it survives the loss of a server)"),
            ParamSpec("spool_dir", .string, doc: "keep held events in a file here too: what a run could not send (NATS away, or the process killed) is sent by the next run on this directory"),
            ParamSpec("buffer", .int(1...10_000_000), default: 10_000, doc: "events held while NATS is unreachable; beyond it the oldest are dropped (counted)"),
            ParamSpec("ack_timeout_ms", .int(50...600_000), default: 2000, doc: "an event not acknowledged within this is sent again (de-duplicated by the stream)"),
            ParamSpec("flush_timeout_ms", .int(0...3_600_000), default: 5000, doc: "at the end, how long to wait for the last acknowledgements"),
        ]

        public func problems() -> [String] {
            var p: [String] = []
            if !url.isEmpty {
                do { _ = try NATSOptions(url: url) } catch { p.append("\(error)") }
            }
            if let subject, !subject.isEmpty, !NATSSubject.isValidForPublish(subject + ".x") {
                p.append("subject '\(subject)': expected dot-separated tokens without wildcards or spaces")
            }
            if !NATSSubject.isValidForPublish(subjectPrefix + ".x") { p.append("subject_prefix '\(subjectPrefix)': expected dot-separated tokens without wildcards or spaces") }
            if stream.isEmpty || stream.contains(where: { ".*> \t".contains($0) }) { p.append("stream '\(stream)': a stream name has no '.', '*', '>' or spaces") }
            return p
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "nats-sink", summary: "Publishes events to NATS JetStream (acknowledged, held while the server is away)",
        family: "sinks", inputs: [PortSpec("in", [.event, .text])], outputs: [.events],
        configuration: Configuration.self,
        format: .none,
        make: { c, env in NATSSinkNode(configuration: c, variables: env.variables) })
}

/// The NATS sink's own error code.
extension NodeErrorCode {
    public static let natsConfig: NodeErrorCode = "nats_config"
}
