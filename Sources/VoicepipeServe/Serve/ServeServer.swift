import Foundation
import Logging
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import NATSClient
import Nodes
import PipelineCore
import Wyoming

/// The HTTP/WebSocket server of `voicepipe serve`: `/healthz`, `/readyz`, `/metrics`, and a WebSocket
/// upgrade per route path, each connection a session (``ServeSession``) running a fresh instance of the
/// route's graph.
package final class ServeServer: Sendable {
    let configuration: ServeConfiguration
    let metrics = ServeMetrics()
    let logger: Logger
    private let group: MultiThreadedEventLoopGroup
    private struct State {
        var draining = false
        var sessions: [ObjectIdentifier: ServeSession] = [:]
        var wyoming: Set<ObjectIdentifier> = []
        /// Open Wyoming connections, ended at the close of a drain.
        var wyomingConnections: [ObjectIdentifier: WyomingServeConnection] = [:]
        /// Open telephone calls, AudioSocket and Twilio (counted in `wyoming` once admitted), ended at the close of a drain.
        var calls: [ObjectIdentifier: any TelephoneCall] = [:]
        var channels: [any Channel] = []
        var eventsLoop: Task<Void, Never>?
        /// WebSocket upgrades accepted before a drain began whose sessions have not been admitted yet:
        /// they are admitted even while draining, and the drain waits for them.
        var pending = 0
    }
    private let state = LockedValue(State())
    /// Told each time a session, a Wyoming transcription or a reserved upgrade ends (a drain waits on it).
    private let sessionsChanged = ChangeSignal()
    /// Session events on NATS JetStream (`nats:` in the configuration).
    let events: NATSEventPublisher?
    /// The talk page and the console (Web/).
    let site: WebSite

    package init(configuration: ServeConfiguration, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.configuration = configuration
        self.logger = logger
        group = MultiThreadedEventLoopGroup(numberOfThreads: 2)
        if let n = configuration.nats {
            var natsLogger = logger
            natsLogger[metadataKey: "component"] = "nats"
            events = try NATSEventPublisher(url: n.url, stream: n.stream, prefix: n.subjectPrefix, worker: n.worker, createStream: n.createStream,
                                            capacity: n.buffer, replicas: n.replicas, spoolDirectory: n.spoolDir, environment: environment, logger: natsLogger)
        } else {
            events = nil
        }
        site = WebSite(access: PageAccess(token: configuration.consoleToken, allowedOrigins: configuration.allowedOrigins),
                       talkRoutes: configuration.routes.filter { $0.kind == .websocket && !($0.path ?? "{").contains("{") }
                           .map { WebSite.TalkRoute(name: $0.name, path: $0.path ?? "/", answers: $0.answer != nil) },
                       consoleOnly: false)
        site.listSessions { [weak self] in
            guard let self else { return [] }
            let (sessions, calls) = state.withLock { (Array($0.sessions.values), Array($0.calls.values)) }
            return sessions.compactMap(\.live) + calls.compactMap(\.live)
        }
    }

    /// Whether a graph event of this name goes to NATS.
    func publishes(_ name: String) -> Bool {
        guard let n = configuration.nats else { return false }
        return n.events?.contains(name) ?? true
    }

    /// Publishes what is left of the session events (up to `nats.flush_timeout_s`) and stops the publisher.
    package func closeEvents() async {
        guard let events, let n = configuration.nats else { return }
        let loop = state.withLock { $0.eventsLoop }
        let stats = await events.publisher.close(timeout: .seconds(n.flushTimeoutS))
        await loop?.value
        if stats.held > 0 || stats.dropped > 0 || stats.rejected > 0 {
            logger.error("NATS: \(stats.acknowledged) events stored; \(stats.held) not acknowledged at exit, \(stats.dropped) dropped (buffer full), \(stats.rejected) refused")
        } else {
            logger.notice("NATS: all \(stats.acknowledged) events stored")
        }
    }

    var isDraining: Bool { state.withLock { $0.draining } }
    var sessionCount: Int { state.withLock { $0.sessions.count + $0.wyoming.count + $0.pending } }

    /// Called when a WebSocket upgrade is about to be accepted: nil when it may go on, else why it is
    /// answered 503 instead (which a load balancer retries elsewhere) — draining, or full with
    /// `full_response: http` (upgrades in progress count as sessions then). A nil answer must be followed
    /// by ``admit(_:)`` or ``releaseUpgrade()``.
    func reserveUpgrade() -> String? {
        state.withLock { s in
            if s.draining { return "draining" }
            let taken = s.sessions.count + s.wyoming.count + s.pending
            if configuration.fullResponse == .http && taken >= configuration.maxSessions {
                return "full: \(taken) of \(configuration.maxSessions) sessions"
            }
            s.pending += 1
            return nil
        }
    }

    /// The upgraded connection ended before its session was admitted (refused by its protocol's checks).
    func releaseUpgrade() {
        state.withLock { $0.pending = max(0, $0.pending - 1) }
        sessionsChanged.notify()
    }
    var isReady: Bool { state.withLock { !$0.draining && $0.sessions.count + $0.wyoming.count < configuration.maxSessions } }

    /// Binds the HTTP listener (and the Wyoming ports). Returns the HTTP port (useful with port 0).
    package func start() async throws -> Int {
        let server = self
        if let events {
            let publisher = events.publisher
            state.withLock { $0.eventsLoop = Task { await publisher.run() } }
        }
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelOption(.backlog, value: 256)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let box = RouteBox()
                    let upgrader = NIOWebSocketServerUpgrader(
                        maxFrameSize: server.maxFrameSize,
                        shouldUpgrade: { ch, head in
                            let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
                            guard let (route, captures) = server.route(for: path) else { return ch.eventLoop.makeSucceededFuture(nil) }
                            // A browser page of a foreign origin opens no session (PageAccess).
                            let request = PageAccess.Request(uri: head.uri, headers: head.headers, remote: ch.remoteAddress)
                            if case .refused(let status, let reason) = server.site.access.checkUpgrade(request) {
                                server.metrics.refused(route: route.name, code: status == 400 ? "two_tokens" : "foreign_origin")
                                box.denial = (status, reason)
                                return ch.eventLoop.makeSucceededFuture(nil)
                            }
                            if let refusal = server.reserveUpgrade() {
                                if refusal != "draining" { server.metrics.refused(route: route.name, code: "busy") }
                                box.refusal = refusal
                                return ch.eventLoop.makeSucceededFuture(nil)
                            }
                            box.value = (route, captures)
                            return ch.eventLoop.makeSucceededFuture(HTTPHeaders())
                        },
                        upgradePipelineHandler: { ch, head in
                            ch.eventLoop.makeCompletedFuture {
                                guard let (route, captures) = box.value else { server.releaseUpgrade(); throw ChannelError.inappropriateOperationForState }
                                if route.kind == .twilio {
                                    // A Twilio call is admitted at its `start` message (TwilioCall).
                                    server.releaseUpgrade()
                                    try ch.pipeline.syncOperations.addHandler(TwilioStreamHandler(call: TwilioCall(server: server, route: route, channel: ch)))
                                    return
                                }
                                let session = ServeSession(server: server, route: route, head: head, captures: captures, channel: ch)
                                try ch.pipeline.syncOperations.addHandler(WebSocketSessionHandler(session: session))
                            }
                        })
                    let endpoint = HTTPEndpointHandler(server: server, box: box)
                    let bound = NIOLoopBound(endpoint, eventLoop: channel.eventLoop)
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline(
                        withServerUpgrade: (upgraders: [upgrader], completionHandler: { context in
                            // After the upgrade the connection carries WebSocket frames only.
                            context.pipeline.syncOperations.removeHandler(bound.value, promise: nil)
                        }))
                    try channel.pipeline.syncOperations.addHandler(HTTPDeadlineHandler(timeout: .milliseconds(Int64(server.configuration.requestTimeoutMs))))
                    try channel.pipeline.syncOperations.addHandler(endpoint)
                }
            }
            // At the file-descriptor limit accept fails until a descriptor is free: wait a little between
            // attempts instead of retrying at once on a loop that also serves /healthz.
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(ServeServer.acceptBackoff()) }
            }
        let channel = try await bootstrap.bind(host: configuration.listen.host, port: configuration.listen.port).get()
        state.withLock { $0.channels.append(channel) }
        for route in configuration.routes where route.kind == .wyoming {
            let c = try await WyomingFrontEnd.bind(server: self, route: route, group: group)
            state.withLock { $0.channels.append(c) }
            logger.info("route '\(route.name)': Wyoming on TCP port \(c.localAddress?.port ?? route.port ?? 0)")
        }
        for route in configuration.routes where route.kind == .audiosocket {
            let c = try await AudioSocket.bind(server: self, route: route, group: group)
            state.withLock { $0.channels.append(c) }
            logger.info("route '\(route.name)': AudioSocket on TCP port \(c.localAddress?.port ?? route.port ?? 0)")
        }
        for route in configuration.routes where route.kind == .sip {
            let channels = try await SIPEndpoint.bind(server: self, route: route, group: group)
            state.withLock { $0.channels += channels }
            logger.info("route '\(route.name)': SIP on UDP and TCP port \(channels.first?.localAddress?.port ?? route.port ?? 0)")
        }
        return channel.localAddress?.port ?? configuration.listen.port
    }

    /// Backs accepting off for 100 ms after a failed accept (EMFILE, ENFILE, ENOBUFS, ENOMEM).
    static func acceptBackoff() -> AcceptBackoffHandler {
        AcceptBackoffHandler(backoffProvider: { _ in .milliseconds(100) })
    }

    private var maxFrameSize: Int { configuration.routes.map(\.maxFrameBytes).max() ?? (1 << 20) }

    /// The route whose path matches (`{name}` matches one segment), with the segments it captured.
    func route(for path: String) -> (ServeConfiguration.Route, [String: String])? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: true)
        for route in configuration.routes where route.kind.usesPath {
            guard let pattern = route.path?.split(separator: "/", omittingEmptySubsequences: true), pattern.count == parts.count else { continue }
            var captures: [String: String] = [:]
            var ok = true
            for (p, s) in zip(pattern, parts) {
                if p.hasPrefix("{") && p.hasSuffix("}") {
                    captures[String(p.dropFirst().dropLast())] = String(s)
                } else if p != s {
                    ok = false
                    break
                }
            }
            if ok { return (route, captures) }
        }
        return nil
    }

    /// Admits a session unless the server is full (draining was checked when its upgrade was accepted).
    func admit(_ session: ServeSession) -> Bool {
        let admitted = state.withLock { s in
            // Its upgrade was reserved before any drain began: a drain since then does not refuse it.
            s.pending = max(0, s.pending - 1)
            guard s.sessions.count + s.wyoming.count < configuration.maxSessions else { return false }
            s.sessions[ObjectIdentifier(session)] = session
            return true
        }
        // A refused session leaves the count lower than its reservation did.
        if !admitted { sessionsChanged.notify() }
        return admitted
    }

    /// The same for a Wyoming transcription.
    func admitWyoming(_ token: WyomingToken) -> Bool {
        state.withLock { s in
            guard !s.draining, s.sessions.count + s.wyoming.count < configuration.maxSessions else { return false }
            s.wyoming.insert(ObjectIdentifier(token))
            return true
        }
    }

    func addWyomingConnection(_ c: WyomingServeConnection) {
        state.withLock { $0.wyomingConnections[ObjectIdentifier(c)] = c }
    }

    func addCall(_ c: any TelephoneCall) {
        state.withLock { $0.calls[ObjectIdentifier(c)] = c }
    }

    func removeCall(_ c: any TelephoneCall) {
        _ = state.withLock { $0.calls.removeValue(forKey: ObjectIdentifier(c)) }
    }

    func removeWyomingConnection(_ c: WyomingServeConnection) {
        _ = state.withLock { $0.wyomingConnections.removeValue(forKey: ObjectIdentifier(c)) }
    }

    func removeWyoming(_ token: WyomingToken) {
        _ = state.withLock { $0.wyoming.remove(ObjectIdentifier(token)) }
        sessionsChanged.notify()
    }

    func remove(_ session: ServeSession) {
        _ = state.withLock { $0.sessions.removeValue(forKey: ObjectIdentifier(session)) }
        sessionsChanged.notify()
    }

    /// SIGTERM: stop accepting, let sessions end up to `grace`, then end the rest cleanly; close listeners.
    package func drain(grace: Duration) async {
        let listeners = state.withLock { s -> [any Channel] in
            s.draining = true
            return s.channels
        }
        logger.notice("draining: no new sessions; \(sessionCount) running, waiting up to \(grace)")
        // The listeners stay up meanwhile: /readyz answers 503, a new session is refused with a 503.
        _ = await sessionsChanged.wait(until: .now + grace) { [self] in sessionCount == 0 }
        let left = state.withLock { Array($0.sessions.values) }
        if !left.isEmpty { logger.notice("grace period over: ending \(left.count) session(s)") }
        for s in left { s.endForShutdown() }
        // Open Wyoming transcriptions end as if audio-stop had come: their clients get their transcripts.
        for c in state.withLock({ Array($0.wyomingConnections.values) }) { c.endForShutdown() }
        // Telephone calls end with their queued answer played, then a hangup or a close.
        for c in state.withLock({ Array($0.calls.values) }) { c.endForShutdown() }
        _ = await sessionsChanged.wait(until: .now + .seconds(5)) { [self] in sessionCount == 0 }
        for l in listeners { try? await l.close() }
    }

    package func shutdown() async {
        try? await group.shutdownGracefully()
    }
}

/// A telephone call (AudioSocket, Twilio) the end of a drain ends: its queued answer is played first.
protocol TelephoneCall: AnyObject, Sendable {
    func endForShutdown()
    /// The running graph, for the console (nil before the call is admitted).
    var live: LiveSession? { get }
}

/// Carries the matched route from `shouldUpgrade` to the upgrade handler (same channel, same event loop).
private final class RouteBox: @unchecked Sendable {
    var value: (ServeConfiguration.Route, [String: String])?
    /// Why the upgrade was refused (answered 503 by the HTTP handler).
    var refusal: String?
    /// The upgrade was refused by ``PageAccess`` (a foreign page, two tokens): status and why.
    var denial: (status: Int, reason: String)?
}

/// Plain HTTP requests: health, readiness, metrics; 404 for anything else (a route path without an
/// upgrade gets 426).
private final class HTTPEndpointHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart
    let server: ServeServer
    private let box: RouteBox
    private var head: HTTPRequestHead?

    init(server: ServeServer, box: RouteBox) { self.server = server; self.box = box }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break
        case .end:
            guard let head else { return }
            self.head = nil
            respond(context, head)
        }
    }

    private func respond(_ context: ChannelHandlerContext, _ head: HTTPRequestHead) {
        let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
        // The browser pages: talk page, console, their files and the console's event stream (Web/WebSite.swift).
        if WebSite.serves(path) { return server.site.respond(to: head, on: context.channel) }
        let (status, type, body): (HTTPResponseStatus, String, String)
        switch (head.method, path) {
        case (.GET, "/healthz"): (status, type, body) = (.ok, "text/plain", "ok\n")
        case (.GET, "/readyz"):
            if server.isDraining { (status, type, body) = (.serviceUnavailable, "text/plain", "draining\n") }
            else if !server.isReady { (status, type, body) = (.serviceUnavailable, "text/plain", "full: \(server.sessionCount) of \(server.configuration.maxSessions) sessions\n") }
            else { (status, type, body) = (.ok, "text/plain", "ready\n") }
        case (.GET, "/metrics"):
            (status, type, body) = (.ok, "text/plain; version=0.0.4", server.metrics.render(draining: server.isDraining, maxSessions: server.configuration.maxSessions,
                                                                                            nats: server.events?.publisher.statistics))
        default:
            if server.route(for: path) != nil {
                if let (code, reason) = box.denial {
                    box.denial = nil
                    (status, type, body) = (HTTPResponseStatus(statusCode: code), "text/plain; charset=utf-8", reason + "\n")
                } else if let refusal = box.refusal {
                    box.refusal = nil
                    (status, type, body) = (.serviceUnavailable, "text/plain", refusal + "\n")
                } else {
                    (status, type, body) = server.isDraining ? (.serviceUnavailable, "text/plain", "draining\n")
                        : (.upgradeRequired, "text/plain", "this path takes a WebSocket connection\n")
                }
            } else {
                (status, type, body) = (.notFound, "text/plain", "not found\n")
            }
        }
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: "\(body.utf8.count)")
        headers.add(name: "Connection", value: "close")
        if status == .serviceUnavailable { headers.add(name: "Retry-After", value: "1") }
        context.write(wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))), promise: nil)
        context.write(wrapOutboundOut(.body(.byteBuffer(context.channel.allocator.buffer(string: body)))), promise: nil)
        context.writeAndFlush(wrapOutboundOut(.end(nil))).whenComplete { [channel = context.channel] _ in channel.close(promise: nil) }
    }
}

/// Passes WebSocket frames of one connection to its session.
private final class WebSocketSessionHandler: ChannelInboundHandler {
    typealias InboundIn = WebSocketFrame
    typealias OutboundOut = WebSocketFrame
    let session: ServeSession
    private var fragments: ByteBuffer?
    private var fragmentOpcode: WebSocketOpcode = .binary

    init(session: ServeSession) { self.session = session }

    func handlerAdded(context: ChannelHandlerContext) {
        session.start()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = unwrapInboundIn(data)
        switch frame.opcode {
        case .binary, .text:
            if frame.unmaskedData.readableBytes > session.route.maxFrameBytes {
                session.tooLarge()
            } else if frame.fin {
                session.received(frame.opcode == .text ? .text(frame.unmaskedData) : .binary(frame.unmaskedData))
            } else {
                fragments = frame.unmaskedData
                fragmentOpcode = frame.opcode
            }
        case .continuation:
            var data = frame.unmaskedData
            fragments?.writeBuffer(&data)
            if frame.fin, let whole = fragments {
                fragments = nil
                if whole.readableBytes > session.route.maxFrameBytes { session.tooLarge(); return }
                session.received(fragmentOpcode == .text ? .text(whole) : .binary(whole))
            } else if let f = fragments, f.readableBytes > session.route.maxFrameBytes {
                fragments = nil
                session.tooLarge()
            }
        case .connectionClose:
            session.received(.close)
        case .ping:
            context.writeAndFlush(wrapOutboundOut(WebSocketFrame(fin: true, opcode: .pong, data: frame.unmaskedData)), promise: nil)
        default:
            break
        }
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { session.writable() }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        session.disconnected()
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        context.close(promise: nil)
    }
}
