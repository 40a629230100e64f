import Foundation
import Logging
import PipelineCore
import Synchronization

/// Publishes to a JetStream stream, at least once and without blocking the caller: ``publish(subject:payload:id:)``
/// queues (bounded, see ``PublishQueue``) and returns; ``run()`` connects, makes sure the stream exists,
/// sends with a `Nats-Msg-Id` per message and a reply subject for the stream's acknowledgement, and
/// removes a message only once the stream acknowledged it. When the server is unreachable or the
/// connection drops, messages are held and sent on reconnect (delays 0.1 s doubling to 2 s); what was in
/// flight is sent again, and the stream's duplicate window makes that safe. Only a full queue drops
/// (the oldest waiting message, counted in ``Statistics/dropped``).
///
/// ```swift
/// let p = JetStreamPublisher(configuration: .init(options: try NATSOptions(url: url), stream: "VOICEPIPE",
///                                                 streamSubjects: ["voicepipe.>"]), logger: logger)
/// let task = Task { await p.run() }
/// p.publish(subject: "voicepipe.asr.s1.transcript", payload: Array(json.utf8))
/// _ = await p.close(timeout: .seconds(5))   // waits for acknowledgements, then stops
/// await task.value
/// ```
public final class JetStreamPublisher: Sendable {
    /// What to publish to and how much to hold.
    public struct Configuration: Sendable {
        public var options: NATSOptions
        /// Stream name.
        public var stream: String
        /// Subjects of the stream when this publisher creates it.
        public var streamSubjects: [String]
        /// Create the stream (file storage, 2-minute duplicate window) when it does not exist.
        public var createStream = true
        /// Messages held at most while the server is away or slow.
        public var capacity = 10_000
        /// Messages sent but not yet acknowledged, at most.
        public var window = 256
        /// Time an acknowledgement may take before the message is sent again.
        public var ackTimeout: Duration = .seconds(2)
        /// Prefix of the `Nats-Msg-Id` of messages published without an id.
        public var idPrefix = NATSConnection.randomID()
        /// Replicas of the stream when this publisher creates it: 1, or 3 (5) on a JetStream cluster, so the
        /// stream and its duplicate window survive the loss of one (two) servers.
        public var replicas = 1
        /// Also use the servers a cluster member names (`connect_urls`) when reconnecting.
        public var discoverServers = true
        /// Keep a file copy of what is held here (see ``PublishSpool``): events held while NATS is away
        /// survive a crash or a stop, and are sent by the next publisher started on this directory.
        public var spoolDirectory: String?

        public init(options: NATSOptions, stream: String, streamSubjects: [String]) {
            self.options = options; self.stream = stream; self.streamSubjects = streamSubjects
        }
    }

    /// Counters, for metrics and the end-of-run report.
    public struct Statistics: Sendable, Equatable {
        public var accepted: UInt64 = 0
        public var acknowledged: UInt64 = 0
        /// Dropped because the queue was full.
        public var dropped: UInt64 = 0
        /// Refused by the server for good.
        public var rejected: UInt64 = 0
        public var resent: UInt64 = 0
        /// Held now (waiting + in flight).
        public var held = 0
        public var maxHeld = 0
        /// Connections made, and lost.
        public var connects = 0
        public var disconnects = 0
        /// True while connected.
        public var connected = false
    }

    public let configuration: Configuration
    private let logger: Logger

    private struct State {
        var queue: PublishQueue
        var connection: NATSConnection?
        var ackPrefix = ""
        var stopping = false
        var stopped = false
        var pauseUntil: ContinuousClock.Instant?
        var streamMissing = false
        var connects = 0
        var disconnects = 0
        var outageLogged = false
        var dropsLogged: UInt64 = 0
        var lastError: String?
        /// Servers learnt from the cluster, beyond the configured ones.
        var discovered: [NATSServerAddress] = []
        /// The server of the connection lost last: tried last at the next reconnection.
        var lastLost: NATSServerAddress?
        /// Callers of publishAndWait, by message id.
        var waiters: [String: CheckedContinuation<Bool, Never>] = [:]
    }
    private let state: LockedValue<State>
    private let doorbell: AsyncStream<Void>.Continuation
    private let rings: AsyncStream<Void>
    private let counter = Atomic<UInt64>(0)
    /// Only used under `state`'s lock.
    private let spool: PublishSpool?
    /// Why the spool directory could not be used, if it could not (events are then held in memory only).
    public let spoolProblem: String?

    public init(configuration: Configuration, logger: Logger) {
        self.configuration = configuration
        self.logger = logger
        state = LockedValue(State(queue: PublishQueue(capacity: configuration.capacity, window: configuration.window, ackTimeout: configuration.ackTimeout)))
        (rings, doorbell) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
        var problem: String?
        if let directory = configuration.spoolDirectory {
            do {
                spool = try PublishSpool(directory: directory, name: configuration.idPrefix, rewriteAfter: configuration.capacity)
            } catch {
                spool = nil
                if case NATSError.spool(let m) = error { problem = m } else { problem = "\(error)" }
                logger.error("\(error); events held while NATS is away will not survive a restart")
            }
        } else {
            spool = nil
        }
        spoolProblem = problem
        if let spool, let directory = configuration.spoolDirectory { adoptOrphans(directory, own: spool.path) }
    }

    /// Queues what earlier publishers on the spool directory left unsent, under their own ids.
    private func adoptOrphans(_ directory: String, own: String) {
        for orphan in PublishSpool.orphans(in: directory, except: own) {
            for m in orphan.messages { enqueue(subject: m.subject, payload: m.payload, id: m.id, waiter: nil) }
            orphan.remove()
            if !orphan.messages.isEmpty {
                logger.notice("NATS: \(orphan.messages.count) event\(orphan.messages.count == 1 ? "" : "s") left unsent by an earlier process (\(orphan.path)) queued again")
            }
        }
    }

    /// Queues a message; never blocks. `id` defaults to `<idPrefix>-<n>`.
    public func publish(subject: String, payload: [UInt8], id: String? = nil) {
        enqueue(subject: subject, payload: payload, id: id, waiter: nil)
    }

    /// Queues a message and waits until the stream acknowledged it (true), or until `timeout`, or
    /// until it was dropped (false). Returns false at once when not connected: a caller that wants to
    /// say "stored" before going on waits only while the bus is there. The message stays queued either way.
    public func publishAndWait(subject: String, payload: [UInt8], id: String? = nil, timeout: Duration) async -> Bool {
        guard state.withLock({ $0.connection?.isOpen ?? false }) else {
            publish(subject: subject, payload: payload, id: id)
            return false
        }
        let messageID = id ?? "\(configuration.idPrefix)-\(counter.add(1, ordering: .relaxed).newValue)"
        return await withCheckedContinuation { c in
            enqueue(subject: subject, payload: payload, id: messageID, waiter: c)
            // Registered first, so the timer cannot miss it.
            Task { [weak self] in
                try? await Task.sleep(for: timeout)
                self?.resolve(messageID, false)
            }
        }
    }

    private func resolve(_ id: String, _ stored: Bool) {
        let waiter = state.withLock { $0.waiters.removeValue(forKey: id) }
        waiter?.resume(returning: stored)
    }

    private func enqueue(subject: String, payload: [UInt8], id: String?, waiter: CheckedContinuation<Bool, Never>?) {
        let n = counter.add(1, ordering: .relaxed).newValue
        let message = OutboundMessage(subject: subject, payload: payload, id: id ?? "\(configuration.idPrefix)-\(n)")
        let (victim, dropped, logIt, stopped) = state.withLock { s -> (OutboundMessage?, UInt64, Bool, Bool) in
            if s.stopped { return (nil, s.queue.dropped, false, true) }
            if let waiter { s.waiters[message.id] = waiter }
            let v = s.queue.enqueue(message)
            if let spool {
                spool.append(message)
                if let v { spool.settled(v.id) { s.queue.heldMessages } }
            }
            let log = v != nil && (s.dropsLogged == 0 || s.queue.dropped >= s.dropsLogged * 10)
            if log { s.dropsLogged = s.queue.dropped }
            return (v, s.queue.dropped, log, false)
        }
        if stopped { waiter?.resume(returning: false); return }
        if let victim { resolve(victim.id, false) }
        if victim != nil && logIt {
            logger.warning("NATS: \(configuration.capacity) messages held and none acknowledged since; dropping the oldest (\(dropped) dropped so far)")
        }
        doorbell.yield()
    }

    /// Counters now.
    public var statistics: Statistics {
        state.withLock { s in
            Statistics(accepted: s.queue.accepted, acknowledged: s.queue.acknowledged, dropped: s.queue.dropped, rejected: s.queue.rejected,
                       resent: s.queue.resent, held: s.queue.held, maxHeld: s.queue.maxHeld, connects: s.connects,
                       disconnects: s.disconnects, connected: s.connection?.isOpen ?? false)
        }
    }

    /// The last connection or stream error, for health reports.
    public var lastError: String? { state.withLock { $0.lastError } }

    /// Waits until everything queued so far is acknowledged, or `timeout`; true when nothing is held.
    public func flush(timeout: Duration) async -> Bool {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if state.withLock({ $0.queue.isEmpty || $0.stopped }) { break }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return state.withLock { $0.queue.isEmpty }
    }

    /// Flushes for at most `timeout`, then stops ``run()``; returns the final counters (what is still
    /// held then is lost: `held`).
    public func close(timeout: Duration) async -> Statistics {
        state.withLock { $0.stopping = true }
        doorbell.yield()
        _ = await flush(timeout: timeout)
        let connection = state.withLock { s -> NATSConnection? in
            s.stopped = true
            defer { s.connection = nil }
            return s.connection
        }
        connection?.close()
        let left = state.withLock { s -> Int in
            if let spool {
                if s.queue.isEmpty { spool.remove() }
                spool.release()
            }
            return s.queue.held
        }
        if let spool, left > 0 {
            logger.warning("NATS: \(left) event\(left == 1 ? "" : "s") not acknowledged kept in \(spool.path); the next publisher started on this spool directory sends them")
        }
        doorbell.yield()
        doorbell.finish()
        let waiters = state.withLock { s -> [CheckedContinuation<Bool, Never>] in defer { s.waiters = [:] }; return Array(s.waiters.values) }
        for w in waiters { w.resume(returning: false) }
        return statistics
    }

    /// The sending loop: runs until ``close(timeout:)``. Run it as a child task of its owner.
    public func run() async {
        let ticker = Task { [doorbell] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                doorbell.yield()
            }
        }
        defer { ticker.cancel() }
        var backoff: Duration = .milliseconds(100)
        var nextAttempt = ContinuousClock.now
        for await _ in rings {
            if state.withLock({ $0.stopped }) { break }
            let connection = state.withLock { $0.connection }
            guard let connection, connection.isOpen else {
                if ContinuousClock.now < nextAttempt { continue }
                if await connect() {
                    backoff = .milliseconds(100)
                } else {
                    nextAttempt = ContinuousClock.now + backoff
                    backoff = min(backoff * 2, .seconds(2))
                }
                continue
            }
            if state.withLock({ $0.streamMissing }) && configuration.createStream {
                do {
                    try await ensureStream(connection)
                    state.withLock { $0.streamMissing = false; $0.pauseUntil = nil }
                } catch {
                    note(error: "\(error)")
                }
            }
            send(on: connection)
            if let spool { state.withLock { _ in spool.flush() } }
        }
        ticker.cancel()
    }

    private func send(on connection: NATSConnection) {
        let now = ContinuousClock.now
        let (batch, prefix) = state.withLock { s -> ([(seq: UInt64, message: OutboundMessage)], String) in
            if let p = s.pauseUntil, now < p { return ([], s.ackPrefix) }
            return (s.queue.takeForSending(now: now), s.ackPrefix)
        }
        guard !batch.isEmpty else { return }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(batch.reduce(0) { $0 + $1.message.payload.count + 160 })
        for (seq, m) in batch {
            NATSEncoder.publish(subject: m.subject, replyTo: "\(prefix).\(seq)", headers: [("Nats-Msg-Id", m.id)], payload: m.payload, into: &bytes)
        }
        connection.write(raw: bytes)
    }

    /// One connection attempt over the server list; true when connected (and the stream is there).
    private func connect() async -> Bool {
        let connection: NATSConnection
        do {
            connection = try await NATSConnection.connect(options: reconnectionOptions()) { [weak self] why in self?.lost(why) }
        } catch {
            let (first, held) = state.withLock { s -> (Bool, Int) in
                defer { s.outageLogged = true }
                s.lastError = "\(error)"
                return (!s.outageLogged, s.queue.held)
            }
            if first { logger.warning("\(error); holding events (\(held) now, up to \(configuration.capacity)) and retrying") }
            else { logger.debug("\(error)") }
            return false
        }
        if !connection.info.jetStream {
            logger.error("NATS at \(connection.server) has no JetStream (start nats-server with -js); holding events and retrying")
            state.withLock { $0.lastError = "no JetStream at \(connection.server)"; $0.outageLogged = true }
            connection.close()
            return false
        }
        learnServers(from: connection)
        let prefix = connection.newInbox()
        connection.subscribe(prefix + ".*") { [weak self] m in self?.acknowledgement(m, prefix: prefix) }
        do {
            try await ensureStream(connection)
        } catch {
            logger.error("NATS at \(connection.server): stream \(configuration.stream): \(error); holding events and retrying")
            state.withLock { $0.lastError = "\(error)"; $0.outageLogged = true }
            connection.close()
            return false
        }
        let (held, wasOut) = state.withLock { s -> (Int, Bool) in
            s.connection = connection
            s.ackPrefix = prefix
            s.connects += 1
            s.lastError = nil
            defer { s.outageLogged = false }
            return (s.queue.held, s.outageLogged)
        }
        if wasOut || held > 0 { logger.notice("NATS connected to \(connection.server); sending \(held) held event\(held == 1 ? "" : "s")") }
        else { logger.info("NATS connected to \(connection.server), stream \(configuration.stream)") }
        return true
    }

    /// The configured servers and those learnt from the cluster, the one lost last at the end.
    private func reconnectionOptions() -> NATSOptions {
        var options = configuration.options
        let (discovered, lastLost) = state.withLock { ($0.discovered, $0.lastLost) }
        options.servers += discovered
        if let lastLost, options.servers.count > 1, let i = options.servers.firstIndex(where: { $0.host == lastLost.host && $0.port == lastLost.port }) {
            options.servers.append(options.servers.remove(at: i))
        }
        return options
    }

    /// Adds the servers a cluster member names to the reconnection list.
    private func learnServers(from connection: NATSConnection) {
        guard configuration.discoverServers else { return }
        let template = connection.server
        let urls = connection.currentInfo.connectURLs
        let added = state.withLock { s -> [NATSServerAddress] in
            let known = Set((configuration.options.servers + s.discovered).map { "\($0.host):\($0.port)" })
            var added: [NATSServerAddress] = []
            for u in urls {
                guard let a = NATSServerAddress(discovered: u, like: template), !known.contains("\(a.host):\(a.port)"),
                      !added.contains(where: { $0.host == a.host && $0.port == a.port }) else { continue }
                added.append(a)
            }
            s.discovered = Array((s.discovered + added).suffix(64))
            return added
        }
        if !added.isEmpty { logger.info("NATS: the cluster also offers \(added.map(\.description).joined(separator: ", "))") }
    }

    private func lost(_ why: String) {
        if let c = state.withLock({ $0.connection }) { learnServers(from: c) }
        let held = state.withLock { s -> Int in
            s.lastLost = s.connection?.server
            s.connection = nil
            s.disconnects += 1
            s.queue.connectionLost()
            s.lastError = why
            s.outageLogged = true
            return s.queue.held
        }
        logger.warning("NATS connection lost (\(why)); holding \(held) event\(held == 1 ? "" : "s") and reconnecting")
        doorbell.yield()
    }

    /// An acknowledgement on `<prefix>.<seq>`: `{"stream":…,"seq":…}` stored, `{"error":…}` refused,
    /// status 503 nobody (no stream takes the subject).
    private func acknowledgement(_ m: NATSMessage, prefix: String) {
        guard let seq = UInt64(m.subject.dropFirst(prefix.count + 1)) else { return }
        if m.status == 503 {
            let first = state.withLock { s -> Bool in
                _ = s.queue.refused(seq, permanent: false)
                defer { s.streamMissing = true }
                s.pauseUntil = .now + .seconds(1)
                return !s.streamMissing
            }
            if first { logger.error("NATS: no JetStream stream takes the subject \(m.subject.isEmpty ? "" : "of message \(seq)") (stream \(configuration.stream) missing?); holding events") }
            return
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(m.payload))) as? [String: Any]
        if let error = object?["error"] as? [String: Any] {
            let code = error["code"] as? Int ?? 0
            let description = error["description"] as? String ?? "?"
            let (outcome, id) = state.withLock { s -> (PublishQueue.AckOutcome, String?) in
                s.pauseUntil = .now + .milliseconds(500)
                s.lastError = "JetStream \(code): \(description)"
                let id = s.queue.id(inFlight: seq)
                let outcome = s.queue.refused(seq, permanent: code == 400)
                if outcome == .rejected, let id, let spool { spool.settled(id) { s.queue.heldMessages } }
                return (outcome, id)
            }
            if outcome == .rejected, let id { resolve(id, false) }
            if outcome == .rejected { logger.error("NATS: JetStream refused a message for good (\(code): \(description)); dropped") }
            else { logger.warning("NATS: JetStream refused a message (\(code): \(description)); retrying") }
            return
        }
        guard object?["seq"] != nil else { return }
        let id = state.withLock { s -> String? in
            let id = s.queue.id(inFlight: seq)
            guard s.queue.acknowledged(seq) == .stored else { return nil }
            if let spool {
                if s.queue.isEmpty { spool.reset() } else if let id { spool.settled(id) { s.queue.heldMessages } }
            }
            return id
        }
        if let id { resolve(id, true) }
        // Room in the window: send what waits.
        doorbell.yield()
    }

    private func note(error: String) {
        state.withLock { $0.lastError = error; $0.pauseUntil = .now + .seconds(1) }
    }

    /// `$JS.API.STREAM.INFO.<stream>`; created when missing (and allowed).
    private func ensureStream(_ connection: NATSConnection) async throws {
        let name = configuration.stream
        let info: NATSMessage
        do {
            info = try await connection.request("$JS.API.STREAM.INFO.\(name)", payload: [], timeout: .seconds(3))
        } catch NATSError.noResponders {
            throw NATSError.jetStream(code: 503, errCode: 0, description: "JetStream is not enabled on \(connection.server)")
        }
        let object = (try? JSONSerialization.jsonObject(with: Data(info.payload))) as? [String: Any]
        guard let error = object?["error"] as? [String: Any] else { return }
        let code = error["code"] as? Int ?? 0
        guard code == 404, configuration.createStream else {
            throw NATSError.jetStream(code: code, errCode: error["err_code"] as? Int ?? 0,
                                      description: (error["description"] as? String ?? "?") + (code == 404 ? " (create it, or allow this client to)" : ""))
        }
        let create: [String: Any] = [
            "name": name, "subjects": configuration.streamSubjects, "storage": "file", "retention": "limits",
            "discard": "old", "duplicate_window": 120_000_000_000, "num_replicas": configuration.replicas,
        ]
        let body = try JSONSerialization.data(withJSONObject: create)
        let answer = try await connection.request("$JS.API.STREAM.CREATE.\(name)", payload: Array(body), timeout: .seconds(5))
        let created = (try? JSONSerialization.jsonObject(with: Data(answer.payload))) as? [String: Any]
        if let e = created?["error"] as? [String: Any] {
            // Another worker created it first.
            if e["err_code"] as? Int == 10058 { return }
            var description = e["description"] as? String ?? "?"
            if e["err_code"] as? Int == 10065 {
                description += " (another stream already takes \(configuration.streamSubjects.joined(separator: ", ")): name that stream, or publish under other subjects)"
            }
            throw NATSError.jetStream(code: e["code"] as? Int ?? 0, errCode: e["err_code"] as? Int ?? 0, description: description)
        }
        logger.notice("NATS: created stream \(name) (subjects \(configuration.streamSubjects.joined(separator: ", ")), file storage, \(configuration.replicas) replica\(configuration.replicas == 1 ? "" : "s"))")
    }
}
