import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import PipelineCore
import Synchronization

/// One TCP connection to a NATS server, speaking the client protocol: `INFO` → `CONNECT` + `PING` →
/// `PONG` (or `-ERR`), then `PUB`/`HPUB`, `SUB`/`UNSUB`, `MSG`/`HMSG`, and `PING`/`PONG` both ways.
/// The server's `PING` is answered at once; ours go out every `pingInterval`, and two unanswered ones
/// close the connection. There is no reconnection here: a closed connection calls `onClose` once and
/// stays closed (``JetStreamPublisher`` reconnects).
///
/// ```swift
/// let c = try await NATSConnection.connect(options: try NATSOptions(url: "nats://127.0.0.1:4222"))
/// let answer = try await c.request("$JS.API.INFO", payload: [], timeout: .seconds(2))
/// ```
public final class NATSConnection: Sendable {
    /// The server this connection reached.
    public let server: NATSServerAddress
    /// What the server said of itself.
    public let info: NATSServerInfo
    private let channel: any Channel
    private let router: Router
    private let inboxPrefix: String

    private init(server: NATSServerAddress, info: NATSServerInfo, channel: any Channel, router: Router) {
        self.server = server; self.info = info; self.channel = channel; self.router = router
        inboxPrefix = "_INBOX." + NATSConnection.randomID()
    }

    /// The server's latest INFO (it sends new ones as its cluster changes).
    public var currentInfo: NATSServerInfo { router.latestInfo ?? info }

    /// Tries each server of `options` once, in order; the first that completes the handshake wins.
    /// `onClose` is called once when the connection ends (with the reason), unless ``close()`` ended it.
    public static func connect(options: NATSOptions, onClose: @escaping @Sendable (String) -> Void = { _ in }) async throws -> NATSConnection {
        var last: (any Error)?
        for server in options.servers {
            do { return try await connect(to: server, options: options, onClose: onClose) } catch { last = error }
        }
        throw last ?? NATSError.badURL("no server")
    }

    /// Connects to one server.
    public static func connect(to server: NATSServerAddress, options: NATSOptions, onClose: @escaping @Sendable (String) -> Void = { _ in }) async throws -> NATSConnection {
        let router = Router(onClose: onClose)
        let timeoutMs = Int64(options.connectTimeout.components.seconds * 1000 + options.connectTimeout.components.attoseconds / 1_000_000_000_000_000)
        let channel: any Channel
        do {
            channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connectTimeout(.milliseconds(timeoutMs))
                .channelOption(.socketOption(.tcp_nodelay), value: 1)
                .channelInitializer { ch in
                    ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(Handler(router: router)) }
                }
                .connect(host: server.host, port: server.port).get()
        } catch {
            throw NATSError.connectFailed(server, Self.describe(error))
        }
        do {
            let info = try await router.awaitInfo(timeout: options.connectTimeout)
            if server.tls || info.tlsRequired {
                // NATS sends INFO in clear, then the client starts TLS on the same connection.
                guard info.tlsRequired || info.tlsAvailable else {
                    throw NATSError.handshake(server, "tls:// was asked for, but the server does not offer TLS")
                }
                try await startTLS(channel: channel, server: server, options: options)
            }
            if info.authRequired && info.nonce != nil && !options.signsNonce && options.token == nil && options.user == nil && server.user == nil {
                throw NATSError.handshake(server, "the server wants a signed nonce: set NATS_CREDS to the user's .creds file "
                                          + "(operator mode) or NATS_NKEY to a file with the user's NKEY seed")
            }
            let connection = NATSConnection(server: server, info: info, channel: channel, router: router)
            var out = NATSEncoder.connect(try options.connectFields(for: server, info: info))
            out += NATSEncoder.ping
            let pong = router.expectPong()
            connection.write(out)
            try await router.wait(pong, timeout: options.connectTimeout, what: "handshake")
            router.markReady()
            connection.startKeepAlive(interval: options.pingInterval)
            return connection
        } catch let e as NATSError {
            router.silence()
            channel.close(promise: nil)
            if case .closed(let why) = e { throw NATSError.handshake(server, why) }
            if case .timeout = e { throw NATSError.handshake(server, "no INFO/PONG within \(options.connectTimeout)") }
            throw e
        } catch {
            router.silence()
            channel.close(promise: nil)
            throw NATSError.handshake(server, "\(error)")
        }
    }

    private static func startTLS(channel: any Channel, server: NATSServerAddress, options: NATSOptions) async throws {
        var tls = TLSConfiguration.makeClientConfiguration()
        if let ca = options.tlsCAFile { tls.trustRoots = .file(ca) }
        if let cert = options.tlsCertFile, let key = options.tlsKeyFile {
            do {
                tls.certificateChain = try NIOSSLCertificate.fromPEMFile(cert).map { .certificate($0) }
                tls.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
            } catch {
                throw NATSError.handshake(server, "TLS client certificate \(cert) / key \(key): \(error)")
            }
        }
        let isAddress = server.host.contains(":") || server.host.split(separator: ".").allSatisfy { Int($0) != nil }
        let context: NIOSSLContext
        do {
            context = try NIOSSLContext(configuration: tls)
        } catch {
            throw NATSError.handshake(server, "TLS set-up: \(error)")
        }
        let hostname = isAddress ? nil : server.host
        try await channel.eventLoop.submit {
            let handler = try NIOSSLClientHandler(context: context, serverHostname: hostname)
            try channel.pipeline.syncOperations.addHandler(handler, position: .first)
        }.get()
    }

    /// True until the connection closed.
    public var isOpen: Bool { !router.isClosed }

    /// Publishes (buffered; call ``flush()`` after a batch).
    public func publish(_ subject: String, replyTo: String? = nil, headers: [(String, String)] = [], payload: [UInt8], flush: Bool = true) {
        var out: [UInt8] = []
        out.reserveCapacity(payload.count + 128)
        NATSEncoder.publish(subject: subject, replyTo: replyTo, headers: headers, payload: payload, into: &out)
        write(out, flush: flush)
    }

    /// Writes already-encoded protocol operations (e.g. a batch of ``NATSEncoder/publish(subject:replyTo:headers:payload:into:)``) and flushes.
    public func write(raw bytes: [UInt8]) { write(bytes) }

    /// Sends what ``publish(_:replyTo:headers:payload:flush:)`` buffered.
    public func flush() { channel.flush() }

    /// Subscribes; `handler` runs on the connection's event loop for every message (keep it short).
    @discardableResult
    public func subscribe(_ subject: String, queue: String? = nil, handler: @escaping @Sendable (NATSMessage) -> Void) -> String {
        let sid = router.addSubscription(handler)
        write(NATSEncoder.subscribe(subject: subject, queue: queue, sid: sid))
        return sid
    }

    /// Ends a subscription.
    public func unsubscribe(_ sid: String) {
        router.removeSubscription(sid)
        write(NATSEncoder.unsubscribe(sid: sid))
    }

    /// A fresh inbox subject, unique to this connection.
    public func newInbox() -> String { inboxPrefix + "." + NATSConnection.randomID() }

    /// Request/reply: publishes with a fresh reply subject and waits for the first answer. A `503`
    /// status answer (nobody subscribes to `subject`) throws ``NATSError/noResponders(_:)``.
    public func request(_ subject: String, payload: [UInt8], headers: [(String, String)] = [], timeout: Duration) async throws -> NATSMessage {
        let reply = newInbox()
        let pending = router.expectReply(reply)
        let sid = subscribe(reply) { [router] m in router.replied(reply, m) }
        defer { unsubscribe(sid) }
        publish(subject, replyTo: reply, headers: headers, payload: payload)
        let message = try await router.wait(pending, timeout: timeout, what: "request on \(subject)")
        if message.status == 503 { throw NATSError.noResponders(subject) }
        return message
    }

    /// A round trip to the server: everything written before has been processed when it returns.
    public func roundTrip(timeout: Duration) async throws {
        let pong = router.expectPong()
        write(NATSEncoder.ping)
        _ = try await router.wait(pong, timeout: timeout, what: "PING")
    }

    /// Closes the connection; `onClose` is not called.
    public func close() {
        router.silence()
        router.fail("closed by the client")
        channel.close(promise: nil)
    }

    private func write(_ bytes: [UInt8], flush: Bool = true) {
        guard !router.isClosed else { return }
        let buffer = channel.allocator.buffer(bytes: bytes)
        if flush { channel.writeAndFlush(buffer, promise: nil) } else { channel.write(buffer, promise: nil) }
    }

    private func startKeepAlive(interval: Duration) {
        let ms = Int64(interval.components.seconds * 1000)
        guard ms > 0 else { return }
        let channel = self.channel, router = self.router
        channel.eventLoop.scheduleRepeatedTask(initialDelay: .milliseconds(ms), delay: .milliseconds(ms)) { task in
            if router.isClosed { task.cancel(); return }
            if router.keepAliveTick() {
                router.fail("no PONG to two PINGs")
                channel.close(promise: nil)
                task.cancel()
                return
            }
            channel.writeAndFlush(channel.allocator.buffer(bytes: NATSEncoder.ping), promise: nil)
        }
    }

    static func randomID() -> String {
        var g = SystemRandomNumberGenerator()
        let alphabet = Array("0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz")
        return String((0..<22).map { _ in alphabet[Int(g.next() % UInt64(alphabet.count))] })
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? IOError { return e.description }
        let text = "\(error)"
        if text.contains("connectTimeout") { return "timed out" }
        if text.contains("connection refused") || text.contains("Connection refused") { return "connection refused (is nats-server running?)" }
        return text
    }

    // MARK: routing

    /// What the event loop delivers, and who waits for it. All state behind one lock.
    final class Router: Sendable {
        typealias Waiter = CheckedContinuation<NATSMessage, any Error>
        struct State {
            var info: NATSServerInfo?
            var infoWaiter: CheckedContinuation<NATSServerInfo, any Error>?
            var pongs: [UInt64] = []                       // tickets of PINGs awaiting their PONG, in order
            var ticketWaiters: [UInt64: Waiter] = [:]
            var ticketResults: [UInt64: Result<NATSMessage, any Error>] = [:]
            var replies: [String: UInt64] = [:]            // reply subject → ticket
            var nextTicket: UInt64 = 0
            var subscriptions: [String: @Sendable (NATSMessage) -> Void] = [:]
            var nextSid = 0
            var closed: String?
            var ready = false
            var silenced = false
            var onClose: (@Sendable (String) -> Void)?
            var unansweredPings = 0
        }
        let state: LockedValue<State>

        init(onClose: @escaping @Sendable (String) -> Void) { state = LockedValue(State(onClose: onClose)) }

        var isClosed: Bool { state.withLock { $0.closed != nil } }

        func markReady() { state.withLock { $0.ready = true } }
        var latestInfo: NATSServerInfo? { state.withLock { $0.info } }
        func silence() { state.withLock { $0.silenced = true } }

        func awaitInfo(timeout: Duration) async throws -> NATSServerInfo {
            let timer = Task { [weak self] in
                try? await Task.sleep(for: timeout)
                if !Task.isCancelled { self?.fail("timeout") }
            }
            defer { timer.cancel() }
            return try await withCheckedThrowingContinuation { c in
                let immediate: Result<NATSServerInfo, any Error>? = state.withLock { s in
                    if let i = s.info { return .success(i) }
                    if let why = s.closed { return .failure(why == "timeout" ? NATSError.timeout("INFO") : NATSError.closed(why)) }
                    s.infoWaiter = c
                    return nil
                }
                if let immediate { c.resume(with: immediate) }
            }
        }

        func expectPong() -> UInt64 {
            state.withLock { s in s.nextTicket += 1; s.pongs.append(s.nextTicket); return s.nextTicket }
        }

        func expectReply(_ subject: String) -> UInt64 {
            state.withLock { s in s.nextTicket += 1; s.replies[subject] = s.nextTicket; return s.nextTicket }
        }

        /// Waits for a ticket's answer, at most `timeout`.
        @discardableResult
        func wait(_ ticket: UInt64, timeout: Duration, what: String) async throws -> NATSMessage {
            let timer = Task { [weak self] in
                try? await Task.sleep(for: timeout)
                if !Task.isCancelled { self?.complete(ticket, .failure(NATSError.timeout(what))) }
            }
            defer { timer.cancel() }
            return try await withCheckedThrowingContinuation { c in
                let ready: Result<NATSMessage, any Error>? = state.withLock { s in
                    if let r = s.ticketResults.removeValue(forKey: ticket) { return r }
                    if let why = s.closed { return .failure(NATSError.closed(why)) }
                    s.ticketWaiters[ticket] = c
                    return nil
                }
                if let ready { c.resume(with: ready) }
            }
        }

        private func complete(_ ticket: UInt64, _ result: Result<NATSMessage, any Error>) {
            let waiter: Waiter? = state.withLock { s in
                s.pongs.removeAll { $0 == ticket }
                for (k, v) in s.replies where v == ticket { s.replies[k] = nil }
                if let w = s.ticketWaiters.removeValue(forKey: ticket) { return w }
                if s.ticketResults[ticket] == nil { s.ticketResults[ticket] = result }
                return nil
            }
            waiter?.resume(with: result)
        }

        func replied(_ subject: String, _ message: NATSMessage) {
            guard let ticket = state.withLock({ $0.replies.removeValue(forKey: subject) }) else { return }
            complete(ticket, .success(message))
        }

        func addSubscription(_ handler: @escaping @Sendable (NATSMessage) -> Void) -> String {
            state.withLock { s in s.nextSid += 1; s.subscriptions["\(s.nextSid)"] = handler; return "\(s.nextSid)" }
        }

        func removeSubscription(_ sid: String) { _ = state.withLock { $0.subscriptions.removeValue(forKey: sid) } }

        /// Called on each keep-alive tick; true when two PINGs went unanswered.
        func keepAliveTick() -> Bool {
            state.withLock { s in s.unansweredPings += 1; return s.unansweredPings > 2 }
        }

        // Event-loop side.

        func deliver(_ op: NATSServerOperation) {
            switch op {
            case .info(let info):
                let waiter = state.withLock { s -> CheckedContinuation<NATSServerInfo, any Error>? in
                    s.info = info
                    defer { s.infoWaiter = nil }
                    return s.infoWaiter
                }
                waiter?.resume(returning: info)
            case .pong:
                let ticket = state.withLock { s -> UInt64? in
                    s.unansweredPings = 0
                    return s.pongs.isEmpty ? nil : s.pongs.removeFirst()
                }
                if let ticket { complete(ticket, .success(NATSMessage(subject: "", sid: ""))) }
            case .message(let m):
                let handler = state.withLock { $0.subscriptions[m.sid] }
                handler?(m)
            case .error(let text):
                // Errors that end the connection do so with a close that follows; a handshake error
                // (authorization) fails whoever waits for the handshake's PONG.
                let ready = state.withLock { $0.ready }
                if !ready { fail(text) }
            case .ping, .ok:
                break
            }
        }

        /// The connection ended: every waiter fails; `onClose` runs once unless silenced.
        func fail(_ why: String) {
            let (waiters, infoWaiter, callback) = state.withLock { s -> ([Waiter], CheckedContinuation<NATSServerInfo, any Error>?, (@Sendable (String) -> Void)?) in
                guard s.closed == nil else { return ([], nil, nil) }
                s.closed = why
                let w = Array(s.ticketWaiters.values)
                s.ticketWaiters = [:]
                s.pongs = []
                s.replies = [:]
                let i = s.infoWaiter
                s.infoWaiter = nil
                let cb = s.silenced ? nil : s.onClose
                s.onClose = nil
                return (w, i, cb)
            }
            for w in waiters { w.resume(throwing: NATSError.closed(why)) }
            infoWaiter?.resume(throwing: why == "timeout" ? NATSError.timeout("INFO") : NATSError.closed(why))
            callback?(why)
        }
    }

    final class Handler: ChannelInboundHandler, @unchecked Sendable {
        typealias InboundIn = ByteBuffer
        let router: Router
        var parser = NATSParser()

        init(router: Router) { self.router = router }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            var buffer = unwrapInboundIn(data)
            if let bytes = buffer.readBytes(length: buffer.readableBytes) { parser.feed(bytes) }
            do {
                while let op = try parser.next() {
                    switch op {
                    case .ping:
                        context.writeAndFlush(NIOAny(context.channel.allocator.buffer(bytes: NATSEncoder.pong)), promise: nil)
                    case .info(let info):
                        parser.maxPayload = max(parser.maxPayload, info.maxPayload + 4096)
                        router.deliver(op)
                    case .error(let text):
                        router.deliver(op)
                        if !Self.keepsConnection(text) {
                            router.fail("server error: \(text)")
                            context.close(promise: nil)
                        }
                    default:
                        router.deliver(op)
                    }
                }
            } catch {
                router.fail("\(error)")
                context.close(promise: nil)
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            router.fail("connection lost")
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            router.fail(NATSConnection.describe(error))
            context.close(promise: nil)
        }

        /// `-ERR`s after which the server keeps the connection (docs: invalid subject, permissions).
        static func keepsConnection(_ text: String) -> Bool {
            let t = text.lowercased()
            return t.hasPrefix("invalid subject") || t.hasPrefix("permissions violation")
        }
    }
}
