import Foundation
import PipelineCore
import Logging
import NIOCore
import NIOPosix

/// Where a SIP message came from and how to answer it: a UDP source address on the route's socket, or
/// a TCP connection.
struct SIPPeer: Sendable {
    let channel: any Channel
    let address: SocketAddress
    let reliable: Bool

    var transport: String { reliable ? "TCP" : "UDP" }
    var text: String { "\(address.ipAddress ?? "?"):\(address.port ?? 0)" }

    func send(_ message: SIPMessage) {
        let bytes = message.serialized()
        let buffer = channel.allocator.buffer(bytes: bytes)
        if reliable {
            channel.writeAndFlush(buffer, promise: nil)
        } else {
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: buffer), promise: nil)
        }
    }
}

/// The `sip` route: SIP over UDP and TCP on the route's port (RFC 3261), each INVITE dialog a call
/// (``SIPCall``) and a session of the route's graph. Messages are dispatched by Call-ID; what belongs to
/// no call is answered here: OPTIONS (200), ACK (ignored), a BYE of a call that just ended (200), other
/// requests of unknown dialogs (481), unknown methods (501). Malformed requests get a 400 whose
/// `Warning` says what is wrong when they carry enough to be answered (Via, Call-ID, CSeq, From, To);
/// anything else is counted and dropped.
final class SIPEndpoint: Sendable {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let options: SIPRouteOptions
    let group: any EventLoopGroup
    private struct State {
        var calls: [String: SIPCall] = [:]
        /// Call-IDs of calls that ended recently, with when (a late BYE or ACK is answered, not refused).
        var ended: [String: ContinuousClock.Instant] = [:]
        var udp: (any Channel)?
        var port = 0
        var registration: SIPRegistration?
    }
    private let state = LockedValue(State())

    static let allow = "INVITE, ACK, BYE, CANCEL, OPTIONS, INFO, UPDATE"

    /// A TCP connection that carries no call and sends nothing for `tcp_idle_s` (default 64 s) is closed
    /// (counted as `sip_tcp_idle`): a silent client cannot hold connections open. A connection a call's
    /// signalling uses stays open for the call.
    var tcpIdle: TimeAmount { .seconds(Int64(options.tcpIdleS)) }

    /// True when a call in progress signals over `channel`.
    func carriesCall(_ channel: any Channel) -> Bool {
        state.withLock { s in s.calls.values.contains { $0.peer.reliable && $0.peer.channel === channel } }
    }

    init(server: ServeServer, route: ServeConfiguration.Route, group: any EventLoopGroup) {
        self.server = server
        self.route = route
        self.options = route.sip ?? SIPRouteOptions()
        self.group = group
    }

    var logger: Logger { server.logger }
    var port: Int { state.withLock { $0.port } }

    static func bind(server: ServeServer, route: ServeConfiguration.Route, group: any EventLoopGroup) async throws -> [any Channel] {
        let endpoint = SIPEndpoint(server: server, route: route, group: group)
        let host = server.configuration.listen.host
        let udp = try await DatagramBootstrap(group: group)
            .channelOption(.socketOption(.so_reuseaddr), value: 1)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
            .channelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(SIPDatagramHandler(endpoint: endpoint)) } }
            .bind(host: host, port: route.port ?? 5060).get()
        let port = udp.localAddress?.port ?? route.port ?? 5060
        endpoint.state.withLock {
            $0.udp = udp
            $0.port = port
        }
        if let r = endpoint.options.register {
            let (metrics, name) = (server.metrics, route.name)
            if let (registrarHost, registrarPort) = SIPHeader.hostPort(r.registrar),
               let registrar = try? SocketAddress.makeAddressResolvingHost(registrarHost, port: registrarPort ?? 5060) {
                let local = SIPEndpoint.sourceAddress(toward: registrar.ipAddress ?? "127.0.0.1") ?? "127.0.0.1"
                let peer = SIPPeer(channel: udp, address: registrar, reliable: false)
                let registration = SIPRegistration(options: r, local: local, localPort: port, reliable: false, logger: server.logger,
                                                   label: "route '\(name)': ") { peer.send($0) }
                endpoint.state.withLock { $0.registration = registration }
                // Ends with the route's socket (a drain closes it).
                let task = Task { await registration.run { metrics.error(route: name, code: "register_failed") } }
                udp.closeFuture.whenComplete { _ in task.cancel() }
            } else {
                server.logger.warning("route '\(name)': cannot resolve the registrar \(r.registrar)")
                metrics.error(route: name, code: "register_failed")
            }
        }
        let tcp = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(ServeServer.acceptBackoff()) } }
            .childChannelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(SIPStreamHandler(endpoint: endpoint)) } }
            .bind(host: host, port: port).get()
        return [udp, tcp]
    }

    /// A datagram or a stream's message (already split), or a parse failure.
    func received(_ result: Result<SIPMessage, SIPParseError>, from peer: SIPPeer) {
        let message: SIPMessage
        switch result {
        case .success(let m): message = m
        case .failure(let e):
            server.metrics.error(route: route.name, code: "bad_sip")
            logger.info("route '\(route.name)': malformed SIP from \(peer.transport) \(peer.text): \(e.message)")
            guard let partial = e.partial, partial.method != nil, partial.method != "ACK", partial["Via"] != nil else { return }
            var r = partial.response(400, toTag: SIPHeader.token())
            r.add("Warning", "399 voicepipe \"\(e.message.replacingOccurrences(of: "\"", with: "'"))\"")
            peer.send(r)
            return
        }
        guard let callID = message.callID else { return }
        if message.status != nil {
            // A response: to a request of one of our calls (BYE), or to the route's REGISTER.
            let (call, registration) = state.withLock { ($0.calls[callID], $0.registration) }
            if let call { call.response(message) } else if registration?.callID == callID { registration?.response(message) }
            return
        }
        let method = message.method ?? ""
        if let call = state.withLock({ $0.calls[callID] }) {
            call.request(message, from: peer)
            return
        }
        switch method {
        case "INVITE":
            if let tag = SIPHeader.parameter(message["To"] ?? "", "tag"), !tag.isEmpty {
                peer.send(message.response(481))
                return
            }
            newCall(message, from: peer)
        case "OPTIONS":
            peer.send(optionsAnswer(message))
        case "ACK":
            return
        case "BYE", "CANCEL":
            let recent = state.withLock { s -> Bool in
                s.ended = s.ended.filter { ContinuousClock.now - $0.value < .seconds(32) }
                return s.ended[callID] != nil
            }
            peer.send(message.response(recent && method == "BYE" ? 200 : 481))
        case "INFO", "UPDATE", "PRACK", "REFER", "NOTIFY", "SUBSCRIBE", "MESSAGE", "PUBLISH":
            peer.send(message.response(481))
        case "REGISTER":
            var r = message.response(405, toTag: SIPHeader.token())
            r.add("Allow", Self.allow)
            peer.send(r)
        default:
            var r = message.response(501, toTag: SIPHeader.token())
            r.add("Allow", Self.allow)
            peer.send(r)
        }
    }

    func optionsAnswer(_ m: SIPMessage) -> SIPMessage {
        var r = m.response(200, toTag: SIPHeader.token())
        r.add("Allow", Self.allow)
        r.add("Accept", "application/sdp, application/dtmf-relay")
        r.add("Supported", "timer")
        return r
    }

    private func newCall(_ invite: SIPMessage, from peer: SIPPeer) {
        // Calls not yet admitted are bounded too (a flood of INVITEs holds no graph and little memory).
        let limit = server.configuration.maxSessions * 2 + 64
        guard let callID = invite.callID else { return }
        let call: SIPCall? = state.withLock { s in
            guard s.calls.count < limit else { return nil }
            let c = SIPCall(endpoint: self, invite: invite, peer: peer)
            s.calls[callID] = c
            return c
        }
        guard let call else {
            server.metrics.refused(route: route.name, code: "busy")
            var r = invite.response(503, toTag: SIPHeader.token())
            r.add("Retry-After", "5")
            peer.send(r)
            return
        }
        server.addCall(call)
        call.start()
    }

    func ended(_ call: SIPCall) {
        state.withLock { s in
            if s.calls[call.callID] === call { s.calls.removeValue(forKey: call.callID) }
            s.ended[call.callID] = .now
        }
        server.removeCall(call)
    }

    /// The address this host uses toward `peer` (for SDP and Contact), unless the route names one.
    func localAddress(toward peer: SIPPeer) -> String {
        if let a = options.mediaAddress { return a }
        let host = server.configuration.listen.host
        if host != "0.0.0.0" && host != "::" && !host.isEmpty { return host }
        if peer.reliable, let local = peer.channel.localAddress?.ipAddress { return local }
        return Self.sourceAddress(toward: peer.address.ipAddress ?? "127.0.0.1") ?? "127.0.0.1"
    }

    /// The local address the kernel routes toward `ip` (a connected UDP socket's name; nothing is sent).
    static func sourceAddress(toward ip: String) -> String? {
        var dest = sockaddr_in()
        dest.sin_family = sa_family_t(AF_INET)
        dest.sin_port = UInt16(9).bigEndian
        guard inet_pton(AF_INET, ip, &dest.sin_addr) == 1 else { return nil }
        let fd = socket(AF_INET, Int32(SOCK_DGRAM.rawValue), 0)
        guard fd >= 0 else { return nil }
        defer { close(fd) }
        let ok = withUnsafePointer(to: &dest) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard ok == 0 else { return nil }
        var local = sockaddr_in()
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        guard withUnsafeMutablePointer(to: &local, { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }) == 0 else { return nil }
        var text = [CChar](repeating: 0, count: Int(INET_ADDRSTRLEN))
        guard inet_ntop(AF_INET, &local.sin_addr, &text, socklen_t(INET_ADDRSTRLEN)) != nil else { return nil }
        return String(decoding: text.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
    }
}

/// SIP over UDP: one message per datagram.
private final class SIPDatagramHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let endpoint: SIPEndpoint

    init(endpoint: SIPEndpoint) { self.endpoint = endpoint }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        let bytes = envelope.data.readBytes(length: envelope.data.readableBytes) ?? []
        // Keep-alives (CRLF) are not messages.
        guard bytes.contains(where: { $0 != 13 && $0 != 10 && $0 != 0 }) else { return }
        let peer = SIPPeer(channel: context.channel, address: envelope.remoteAddress, reliable: false)
        let result: Result<SIPMessage, SIPParseError>
        do { result = .success(try SIPParser.parse(bytes)) } catch { result = .failure(error) }
        endpoint.received(result, from: peer)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}

/// SIP over TCP: messages split by Content-Length; a malformed stream is answered (when it can be) and closed.
private final class SIPStreamHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let endpoint: SIPEndpoint
    private var framer = SIPStreamFramer()
    private var failed = false

    /// Whether bytes came since the idle check last ran.
    private let heard = LockedValue(true)
    private var idleCheck: RepeatedTask?

    init(endpoint: SIPEndpoint) { self.endpoint = endpoint }

    func channelActive(context: ChannelHandlerContext) {
        let channel = context.channel, endpoint = self.endpoint, heard = self.heard
        idleCheck = channel.eventLoop.scheduleRepeatedTask(initialDelay: endpoint.tcpIdle, delay: endpoint.tcpIdle) { task in
            let quiet = heard.withLock { h in defer { h = false }; return !h }
            if quiet && !endpoint.carriesCall(channel) {
                endpoint.server.metrics.error(route: endpoint.route.name, code: "sip_tcp_idle")
                task.cancel()
                channel.close(promise: nil)
            }
        }
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        idleCheck?.cancel()
        context.fireChannelInactive()
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        heard.withLock { $0 = true }
        guard !failed, let address = context.channel.remoteAddress else { return }
        var buffer = unwrapInboundIn(data)
        let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
        let peer = SIPPeer(channel: context.channel, address: address, reliable: true)
        do {
            for m in try framer.push(bytes) { endpoint.received(.success(m), from: peer) }
        } catch {
            failed = true
            endpoint.received(.failure(error), from: peer)
            context.channel.close(promise: nil)
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}
