import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore
import Synchronization

/// `voicepipe call URI GRAPH`: places one SIP call (the UAC side, over UDP or TCP, directly or through a
/// registrar acting as outbound proxy) and runs the graph for it. The graph's `app-source` hears the
/// callee; its `app-sink` fed audio is what the callee hears.
///
/// With a registrar, voicepipe first registers (REGISTER, digest answered, renewed during the call),
/// sends every request of the call to the registrar (a `Route` naming it, the Request-URI the callee's),
/// and unregisters (Expires: 0) when the call is over.
///
/// INVITE with an SDP offer of the chosen codecs and telephone-event, repeated over UDP until a response
/// (Timers A/B; over TCP only Timer B, RFC 3261 §17.1.1.2); provisional responses are logged; a 2xx is
/// ACKed (again for each retransmission) and starts the call; a challenge (401/407) is answered once
/// with the password; a final refusal ends with an error naming it. The call ends with the callee's BYE,
/// or voicepipe's BYE when the graph ends, when no RTP came for `rtpTimeoutS`, or at `stop()` (a CANCEL
/// while ringing).
package final class SIPDialer: Sendable {
    package enum Transport: String, Sendable, CaseIterable {
        case udp, tcp
    }

    package struct Options: Sendable {
        package var uri: String
        package var graphPath: String
        package var codecs: [String] = ["pcmu", "pcma", "g722", "opus"]
        package var ringTimeoutS = 60
        package var rtpTimeoutS = 30
        package var user = "voicepipe"
        /// Digest credentials for a registrar, or a callee or proxy that challenges the INVITE (401/407).
        package var authUser: String?
        package var password: String?
        /// Hang up after this many seconds of call (0: no limit).
        package var maxDurationS = 0
        /// UDP or TCP; nil: the `transport` parameter of the next hop's URI (the registrar's when there is
        /// one, else the callee's), else UDP.
        package var transport: Transport?
        /// Register with this registrar (`sip:host[:port]`) first, and place the call through it.
        package var registrar: String?
        /// The registration's requested expiry (renewed at four fifths of what is granted).
        package var registerExpiresS = 600

        package init(uri: String, graphPath: String) {
            self.uri = uri
            self.graphPath = graphPath
        }
    }

    /// Why a call could not be placed or how it ended.
    package struct Failure: Error, CustomStringConvertible {
        package var description: String
        /// 2: the graph or the options; 1: the call.
        package var exitCode: Int32
    }

    fileprivate enum Input: Sendable {
        case message(SIPMessage, SIPPeer)
        /// A timer's deadline passed: what is due is done.
        case tick
        case stop
        case graphEnded
        case rtpTimeout
        /// The TCP connection closed (with what was wrong with what came on it, if anything).
        case closed(String?)
    }

    let options: Options
    let route: ServeConfiguration.Route
    let logger: Logger
    /// The transport of the signalling.
    package let transport: Transport
    private let inbox: AsyncStream<Input>.Continuation
    private let stream: AsyncStream<Input>
    /// Where messages go: the call's to the call, the registration's responses to the registration.
    private let routing = LockedValue<(callID: String?, registration: SIPRegistration?)>((nil, nil))
    /// `stop()` was called; and the registration under way, which it cancels.
    private let stopping = LockedValue<(stopped: Bool, registering: Task<SIPRegistration.Outcome, Never>?)>((false, nil))

    /// Loads and checks the graph (one `app-source`, at most one `app-sink` fed audio), the codecs and the URIs.
    package init(options: Options, registry: NodeRegistry, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.options = options
        self.logger = logger
        guard SIPHeader.hostPort(options.uri) != nil, options.uri.lowercased().hasPrefix("sip:") else {
            throw Failure(description: "'\(options.uri)' is not a SIP URI (sip:user@host[:port][;transport=tcp])", exitCode: 2)
        }
        if let registrar = options.registrar {
            guard SIPHeader.hostPort(registrar) != nil, registrar.lowercased().hasPrefix("sip:") else {
                throw Failure(description: "--registrar: '\(registrar)' is not a SIP URI (sip:host[:port][;transport=tcp])", exitCode: 2)
            }
        }
        // The transport to the next hop: named by --transport, else by the next hop's URI.
        let hop = options.registrar ?? options.uri
        var named: Transport?
        if let value = Self.uriParameter(hop, "transport") {
            named = Transport(rawValue: value.lowercased())
            if named == nil && options.transport == nil {
                throw Failure(description: "'\(hop)': transport '\(value)' is not supported (udp, tcp)", exitCode: 2)
            }
        }
        transport = options.transport ?? named ?? .udp
        let yaml = """
            name: call
            protocol: sip
            port: 5060
            graph: "\(options.graphPath.replacingOccurrences(of: "\"", with: "\\\""))"
            codecs: [\(options.codecs.joined(separator: ", "))]
            """
        var issues: [GraphIssue] = []
        guard let node = try YAMLNode.compose(yaml: yaml, file: "(call)", environment: environment, issues: &issues) else {
            throw Failure(description: "cannot read the options", exitCode: 2)
        }
        var problems: [String] = []
        let route = ServeConfiguration.parseRoute(node, baseDir: FileManager.default.currentDirectoryPath, registry: registry, environment: environment,
                                                  problem: { _, message in problems.append(message) },
                                                  int: { n, _, _ in n.scalar.flatMap { Int($0.string) } }, graphIssues: &issues)
        if !issues.isEmpty { throw GraphError(issues) }
        guard let route, problems.isEmpty else {
            throw Failure(description: problems.joined(separator: "\n"), exitCode: 2)
        }
        self.route = route
        (stream, inbox) = AsyncStream.makeStream(of: Input.self)
    }

    /// A parameter of a SIP URI (`sip:bob@host:5060;transport=tcp`), before any `?headers`.
    static func uriParameter(_ uri: String, _ name: String) -> String? {
        let bare = uri.split(separator: "?", maxSplits: 1).first.map(String.init) ?? uri
        return SIPHeader.parameter(bare, name)
    }

    /// Hang up (BYE), or CANCEL while ringing.
    package func stop() {
        let registering = stopping.withLock { s in
            s.stopped = true
            return s.registering
        }
        registering?.cancel()
        inbox.yield(.stop)
    }

    private var stopped: Bool { stopping.withLock { $0.stopped } }

    /// Places the call and runs it to its end; returns why it ended (`hangup`, `graph_ended`, `rtp_timeout`,
    /// `stopped`, `connection_closed`).
    package func run() async throws -> String {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        do {
            let reason = try await call(group: group)
            try? await group.shutdownGracefully()
            return reason
        } catch {
            try? await group.shutdownGracefully()
            throw error
        }
    }

    /// The signalling toward the next hop (the registrar, else the callee): a UDP socket, or one TCP
    /// connection that carries everything.
    fileprivate struct Link: Sendable {
        let channel: any Channel
        let target: SocketAddress
        let reliable: Bool
        let local: String
        let localPort: Int
        var transport: String { reliable ? "TCP" : "UDP" }
        var hostPort: String { "\(local.contains(":") ? "[\(local)]" : local):\(localPort)" }
        var peer: SIPPeer { SIPPeer(channel: channel, address: target, reliable: reliable) }
        func send(_ m: SIPMessage) { peer.send(m) }
        func via() -> String { "SIP/2.0/\(transport) \(hostPort);branch=z9hG4bK\(SIPHeader.token(16));rport" }
    }

    private func call(group: MultiThreadedEventLoopGroup) async throws -> String {
        let hop = options.registrar ?? options.uri
        guard let (host, port) = SIPHeader.hostPort(hop) else { throw Failure(description: "bad URI", exitCode: 2) }
        let hopPort = port ?? 5060
        let target: SocketAddress
        do {
            target = try SocketAddress.makeAddressResolvingHost(host, port: hopPort)
        } catch {
            throw Failure(description: "cannot resolve \(host): \(error)", exitCode: 1)
        }
        let link = try await open(group: group, target: target, named: "\(host):\(hopPort)")
        defer { link.channel.close(promise: nil) }

        guard let registrar = options.registrar else { return try await dial(link: link, group: group, registration: nil) }
        let registration = SIPRegistration(options: .init(registrar: registrar, user: options.user, password: options.password ?? "", expiresS: options.registerExpiresS),
                                           authUser: options.authUser, local: link.local, localPort: link.localPort, reliable: link.reliable,
                                           logger: logger, label: "") { link.send($0) }
        routing.withLock { $0.registration = registration }
        let granted: Int
        // Stopping (SIGINT) ends a registration under way at once.
        let attempt = Task { await registration.register() }
        let alreadyStopped = stopping.withLock { s in
            s.registering = attempt
            return s.stopped
        }
        if alreadyStopped { attempt.cancel() }
        let outcome = await attempt.value
        stopping.withLock { $0.registering = nil }
        if stopped {
            if case .registered = outcome { _ = await registration.register(expires: 0) }
            throw Failure(description: "stopped before the call was placed", exitCode: 1)
        }
        switch outcome {
        case .registered(let seconds):
            granted = seconds
            logger.info("registered \(registration.addressOfRecord) with \(registrar) over \(link.transport) for \(seconds) s")
        case .refused(let why):
            if why.hasPrefix("no answer") { throw Failure(description: "registration failed: \(why)", exitCode: 1) }
            let hint = why.contains("after the credentials") ? " (check --auth-user and VOICEPIPE_SIP_PASSWORD)" : ""
            throw Failure(description: "the registrar \(registrar) refused the registration of \(registration.addressOfRecord): \(why)\(hint)", exitCode: 1)
        }
        // Renewed at four fifths of the granted expiry while the call lasts.
        let renewing = Task { [logger] in
            var pause = max(1, granted * 4 / 5)
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(pause))
                if Task.isCancelled { return }
                switch await registration.register() {
                case .registered(let seconds): pause = max(1, seconds * 4 / 5)
                case .refused(let why):
                    if Task.isCancelled { return }
                    logger.warning("renewing the registration with \(registrar) failed (\(why)); again in 30 s")
                    pause = 30
                }
            }
        }
        let result: Result<String, any Error>
        do { result = .success(try await dial(link: link, group: group, registration: registration)) } catch { result = .failure(error) }
        renewing.cancel()
        await renewing.value
        if !link.channel.isActive {
            logger.warning("not unregistered from \(registrar): the connection to it closed")
        } else {
            switch await registration.register(expires: 0) {
            case .registered: logger.info("unregistered \(registration.addressOfRecord) from \(registrar)")
            case .refused(let why): logger.warning("unregistering from \(registrar) failed: \(why)")
            }
        }
        return try result.get()
    }

    /// Binds the UDP socket, or connects to the next hop over TCP (within 5 s).
    private func open(group: MultiThreadedEventLoopGroup, target: SocketAddress, named: String) async throws -> Link {
        let deliver: @Sendable (SIPMessage, SIPPeer) -> Void = { [self] m, peer in self.deliver(m, from: peer) }
        switch transport {
        case .udp:
            let channel = try await DatagramBootstrap(group: group)
                .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
                .channelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(DialerDatagramHandler(deliver: deliver)) } }
                .bind(host: "0.0.0.0", port: 0).get()
            let local = SIPEndpoint.sourceAddress(toward: target.ipAddress ?? "127.0.0.1") ?? "127.0.0.1"
            return Link(channel: channel, target: target, reliable: false, local: local, localPort: channel.localAddress?.port ?? 0)
        case .tcp:
            let inbox = self.inbox
            let channel: any Channel
            do {
                channel = try await ClientBootstrap(group: group)
                    .connectTimeout(.seconds(5))
                    .channelInitializer { ch in
                        ch.eventLoop.makeCompletedFuture {
                            try ch.pipeline.syncOperations.addHandler(DialerStreamHandler(deliver: deliver, closed: { inbox.yield(.closed($0)) }))
                        }
                    }
                    .connect(to: target).get()
            } catch {
                throw Failure(description: "cannot connect to \(named) over TCP: \(Self.reason(error))", exitCode: 1)
            }
            let local = channel.localAddress?.ipAddress ?? "127.0.0.1"
            return Link(channel: channel, target: target, reliable: true, local: local, localPort: channel.localAddress?.port ?? 0)
        }
    }

    /// A connection failure in a few words (`Connection refused`).
    static func reason(_ error: any Error) -> String {
        if let e = error as? NIOConnectionError, let first = e.connectionErrors.first { return reason(first.error) }
        if let e = error as? IOError { return String(cString: strerror(e.errnoCode)) }
        if let e = error as? ChannelError, case .connectTimeout = e { return "no connection within 5 s" }
        return "\(error)"
    }

    /// Every message received: the registration's responses to it, the call's to the call; requests of
    /// other dialogs answered here (voicepipe places one call: an INVITE is busy).
    private func deliver(_ m: SIPMessage, from peer: SIPPeer) {
        let (callID, registration) = routing.withLock { ($0.callID, $0.registration) }
        if let registration, m.callID == registration.callID {
            registration.response(m)
            return
        }
        if let callID, m.callID == callID {
            inbox.yield(.message(m, peer))
            return
        }
        switch m.method {
        case nil, "ACK": return
        case "OPTIONS":
            var r = m.response(200, toTag: SIPHeader.token())
            r.add("Allow", SIPEndpoint.allow)
            peer.send(r)
        case "INVITE": peer.send(m.response(486, toTag: SIPHeader.token()))
        default: peer.send(m.response(481, toTag: SIPHeader.token()))
        }
    }

    /// The call: INVITE (through the registrar when there is one), the graph, the BYE.
    private func dial(link: Link, group: MultiThreadedEventLoopGroup, registration: SIPRegistration?) async throws -> String {
        let callID = "\(SIPHeader.token(16))@\(link.local)"
        routing.withLock { $0.callID = callID }
        // A port for RTP, named in the offer and bound by the call's media once the answer is known.
        let probe = try await DatagramBootstrap(group: group).bind(host: "0.0.0.0", port: 0).get()
        let rtpPort = probe.localAddress?.port ?? 0
        try await probe.close()

        let fromURI = registration?.addressOfRecord ?? "sip:\(options.user)@\(link.local)"
        let from = "<\(fromURI)>;tag=\(SIPHeader.token())"
        let contact = "<sip:\(options.user)@\(link.hostPort)\(link.reliable ? ";transport=tcp" : "")>"
        // Through the registrar: a loose route naming it (RFC 3261 §8.1.2), the Request-URI the callee's.
        let outbound = options.registrar.map { "<\($0);lr>" }
        let codecs = options.codecs.compactMap(TelephoneCodec.init(rawValue:))
        let sessionID = String(UInt32.random(in: 1...UInt32.max))
        var invite = SIPMessage(start: .request(method: "INVITE", uri: options.uri))
        var via = link.via()
        invite.add("Via", via)
        invite.add("Max-Forwards", "70")
        if let outbound { invite.add("Route", outbound) }
        invite.add("From", from)
        invite.add("To", "<\(options.uri)>")
        invite.add("Call-ID", callID)
        invite.add("CSeq", "1 INVITE")
        invite.add("Contact", contact)
        invite.add("Allow", SIPEndpoint.allow)
        invite.add("User-Agent", "voicepipe")
        invite.add("Content-Type", "application/sdp")
        invite.body = Array(MediaNegotiation.offer(preferences: codecs, address: link.local, port: rtpPort, sessionID: sessionID).text().utf8)
        link.send(invite)
        logger.info("calling \(options.uri) from \(link.hostPort) over \(link.transport)\(options.registrar.map { " through \($0)" } ?? "")")

        var iterator = stream.makeAsyncIterator()
        let inbox = self.inbox
        let alarm = SIPAlarm { inbox.yield(.tick) }
        defer { alarm.cancel() }
        // The INVITE transaction: its timer, then ringing (once a response came), then a CANCEL's wait.
        var timer = SIPRetransmission(reliable: link.reliable)
        var started = ContinuousClock.now
        var timerDue: ContinuousClock.Instant? = started + .milliseconds(link.reliable ? timer.deadlineMs : timer.t1Ms)
        var answered = false
        var cancelledAt: ContinuousClock.Instant?
        var ok: SIPMessage?
        var remote = link.peer
        let ringTimeout = Duration.seconds(options.ringTimeoutS)
        func arm() {
            if let cancelledAt { alarm.set(at: cancelledAt + .seconds(32)) } else if answered { alarm.set(at: started + ringTimeout) } else { alarm.set(at: timerDue) }
        }
        arm()
        invite: while let input = await iterator.next() {
            switch input {
            case .tick:
                let now = ContinuousClock.now
                if let cancelledAt {
                    // No final response 32 s after the CANCEL: the transaction is over (RFC 3261 §9.1).
                    if now >= cancelledAt + .seconds(32) { return "stopped" }
                } else if !answered {
                    var gaveUp = false
                    let message = invite
                    timerDue = timer.due(now: now, since: started, retransmit: { link.send(message) }, giveUp: { gaveUp = true })
                    if gaveUp { throw Failure(description: "no answer from \(options.uri) in 32 s", exitCode: 1) }
                } else if now >= started + ringTimeout {
                    cancelledAt = now
                    link.send(cancel(invite))
                }
                arm()
            case .stop:
                if cancelledAt == nil {
                    cancelledAt = .now
                    link.send(cancel(invite))
                    // Without any response yet, the CANCEL may not be matched: give up at once.
                    if !answered { throw Failure(description: "stopped before \(options.uri) answered", exitCode: 1) }
                    arm()
                }
            case .closed(let problem):
                throw Failure(description: "the TCP connection to \(link.target.ipAddress ?? "?"):\(link.target.port ?? 0) closed before \(options.uri) answered\(problem.map { " (\($0))" } ?? "")", exitCode: 1)
            case .message(let m, let source):
                guard m.callID == callID else { continue }
                if let method = m.method {
                    // A request before the 2xx (BYE of an early dialog, OPTIONS): answered plainly.
                    if method != "ACK" { source.send(m.response(method == "OPTIONS" ? 200 : 481)) }
                    continue
                }
                guard let status = m.status, m.cseq?.method == "INVITE", m.cseq?.number == invite.cseq?.number else { continue }
                if !answered {
                    answered = true
                    timer.answered()
                    arm()
                }
                if status < 200 {
                    if status == 180 || status == 183 { logger.info("\(options.uri): \(status) \(reasonText(m))") }
                    continue
                }
                if status >= 300 {
                    // The ACK of a refusal goes where the INVITE went, with its Via branch (RFC 3261 §17.1.1.3).
                    var ack = SIPMessage(start: .request(method: "ACK", uri: options.uri))
                    ack.add("Via", via)
                    ack.add("Max-Forwards", "70")
                    if let outbound { ack.add("Route", outbound) }
                    ack.add("From", from)
                    ack.add("To", m["To"] ?? "<\(options.uri)>")
                    ack.add("Call-ID", callID)
                    ack.add("CSeq", "\(invite.cseq?.number ?? 1) ACK")
                    link.send(ack)
                    if cancelledAt != nil && status == 487 { return "stopped" }
                    // A challenge, answered once when a password was given.
                    if (status == 401 || status == 407), let password = options.password, invite["Authorization"] == nil && invite["Proxy-Authorization"] == nil,
                       let challenge = try? DigestChallenge.parse(m[status == 401 ? "WWW-Authenticate" : "Proxy-Authenticate"] ?? "") {
                        let number = (invite.cseq?.number ?? 1) + 1
                        via = link.via()
                        invite.set("Via", via)
                        invite.set("CSeq", "\(number) INVITE")
                        invite.add(status == 401 ? "Authorization" : "Proxy-Authorization",
                                   challenge.authorization(method: "INVITE", uri: options.uri, user: options.authUser ?? options.user, password: password, cnonce: SIPHeader.token(12)))
                        link.send(invite)
                        timer = SIPRetransmission(reliable: link.reliable)
                        started = .now
                        timerDue = started + .milliseconds(link.reliable ? timer.deadlineMs : timer.t1Ms)
                        answered = false
                        arm()
                        logger.info("\(options.uri): \(status), answering the digest challenge of \(challenge.realm)")
                        continue
                    }
                    let warning = m["Warning"].map { " (\($0))" } ?? ""
                    let auth = status == 401 || status == 407
                        ? (options.password == nil ? "; set VOICEPIPE_SIP_PASSWORD (and --auth-user) to answer the challenge" : "; the credentials were refused") : ""
                    throw Failure(description: "\(options.uri) refused the call: \(status) \(reasonText(m))\(warning)\(auth)", exitCode: 1)
                }
                ok = m
                remote = source
                break invite
            case .graphEnded, .rtpTimeout: continue
            }
        }
        alarm.cancel()
        guard let ok else { throw Failure(description: "the call ended before it was answered", exitCode: 1) }
        let toWithTag = ok["To"] ?? "<\(options.uri)>"
        let remoteTarget = SIPHeader.uri(ok["Contact"] ?? "") ?? options.uri
        let routeSet = ok.values("Record-Route").reversed()
        var cseq: UInt32 = invite.cseq?.number ?? 1
        func request(_ method: String, number: UInt32) -> SIPMessage {
            var r = SIPMessage(start: .request(method: method, uri: remoteTarget))
            r.add("Via", link.via())
            r.add("Max-Forwards", "70")
            for rr in routeSet { r.add("Route", rr) }
            r.add("From", from)
            r.add("To", toWithTag)
            r.add("Call-ID", callID)
            r.add("CSeq", "\(number) \(method)")
            return r
        }
        let ack = request("ACK", number: invite.cseq?.number ?? 1)
        remote.send(ack)
        // The answer.
        let negotiation: MediaNegotiation
        do {
            let answer = try SessionDescription.parse(String(decoding: ok.body, as: UTF8.self))
            negotiation = try MediaNegotiation.negotiate(offer: answer, preferences: codecs)
        } catch {
            cseq += 1
            remote.send(request("BYE", number: cseq))
            throw Failure(description: "\(options.uri) answered with an unusable SDP: \(error)", exitCode: 1)
        }
        if cancelledAt != nil {
            cseq += 1
            remote.send(request("BYE", number: cseq))
            return "stopped"
        }
        logger.info("\(options.uri) answered: \(negotiation.codec.name) to \(negotiation.remoteAddress):\(negotiation.remotePort)")
        // The call: the graph, the media.
        let pipeline = try Pipeline(graph: route.graph, logger: logger)
        guard let source = pipeline.appSource(route.sourceID) else { throw Failure(description: "the graph has no app-source", exitCode: 2) }
        let media = try CallMedia(negotiation: negotiation, graphFormat: route.format, jitterMs: 20...200, answerBufferMs: route.answer?.bufferMs ?? 20_000) { _ in }
        _ = try await media.bind(host: "0.0.0.0", group: group, port: rtpPort)
        defer { media.close() }
        await source.push(event: Event("call_start", fields: [("from", .string(fromURI)), ("to", .string(options.uri)),
                                                              ("codec", .string(negotiation.codec.name))]))
        let answerRoute = route.answer
        let events = pipeline.events(buffer: 10_000)
        let forwarding = Task { for await e in events where answerRoute?.interrupts(e) == true { media.interrupt() } }
        let sink = route.answer.flatMap { pipeline.appSink($0.sinkID) }
        let tasks = media.start(source: source, sink: sink)
        // A graph whose answer stream ends (a file said) has said everything: once it is sent, hang up.
        let said = sink.map { _ in
            Task {
                guard let answering = tasks.last else { return }
                await answering.value
                // Cancelled (the call ended first), the wait returns at once.
                let sent = await media.waitUntilSent(deadline: .now + .seconds(86_400))
                if sent && !Task.isCancelled { inbox.yield(.graphEnded) }
            }
        }
        let running = Task {
            defer { inbox.yield(.graphEnded) }
            do { try await pipeline.run(); return nil as (any Error)? } catch { return error }
        }
        let rtpTimeout = options.rtpTimeoutS, maxDuration = options.maxDurationS
        let limit: Task<Void, Never>? = maxDuration > 0 ? Task {
            try? await Task.sleep(for: .seconds(maxDuration))
            if !Task.isCancelled { inbox.yield(.stop) }
        } : nil
        // Sleeps until the callee will have been silent for the RTP timeout (looked up again after each wake:
        // RTP that came meanwhile moves it on; on hold, a timeout later).
        let silence: Task<Void, Never>? = rtpTimeout > 0 ? Task {
            let timeout = Duration.seconds(rtpTimeout)
            try? await Task.sleep(for: timeout)
            while !Task.isCancelled {
                if media.silent(for: timeout) { inbox.yield(.rtpTimeout); return }
                try? await Task.sleep(until: (media.silenceDeadline(timeout) ?? .now + timeout) + .milliseconds(1), clock: .continuous)
            }
        } : nil
        var reason = "graph_ended"
        var weHangUp = true
        call: while let input = await iterator.next() {
            switch input {
            case .message(let m, let source):
                guard m.callID == callID else { continue }
                switch m.method {
                case "BYE":
                    source.send(m.response(200))
                    reason = "hangup"
                    weHangUp = false
                    break call
                case "INVITE":
                    if let offer = try? SessionDescription.parse(String(decoding: m.body, as: UTF8.self)),
                       let n = try? MediaNegotiation.negotiate(offer: offer, preferences: [negotiation.codec]) {
                        media.update(n)
                        var r = m.response(200)
                        r.add("Contact", contact)
                        r.add("Content-Type", "application/sdp")
                        r.body = Array(n.answer(address: link.local, port: rtpPort, sessionID: sessionID, version: 2).text().utf8)
                        source.send(r)
                    } else {
                        source.send(m.response(488))
                    }
                case "INFO":
                    if let d = TelephoneEventDetector.info(contentType: m["Content-Type"] ?? "", body: String(decoding: m.body, as: UTF8.self)) { media.digit(d) }
                    source.send(m.response(200))
                case "OPTIONS", "UPDATE": source.send(m.response(200))
                case "ACK", nil:
                    // A retransmitted 200 (our ACK was lost): ACK again.
                    if m.status.map({ $0 >= 200 && $0 < 300 }) == true && m.cseq?.method == "INVITE" { remote.send(ack) }
                default: source.send(m.response(501))
                }
            case .stop: reason = "stopped"; break call
            case .graphEnded: reason = "graph_ended"; break call
            case .rtpTimeout: reason = "rtp_timeout"; break call
            case .closed(let problem):
                logger.warning("the TCP connection to \(link.target.ipAddress ?? "?"):\(link.target.port ?? 0) closed during the call\(problem.map { " (\($0))" } ?? "")")
                reason = "connection_closed"
                weHangUp = false
                break call
            case .tick: continue
            }
        }
        limit?.cancel()
        silence?.cancel()
        said?.cancel()
        await source.push(event: Event("call_end", fields: [("reason", .string(reason))]))
        source.finish()
        if reason != "graph_ended" { pipeline.stop() }
        let failure = await running.value
        forwarding.cancel()
        if reason == "graph_ended" {
            // What the graph still had to say is played out (at most 5 s).
            await media.waitUntilSent(deadline: .now + .seconds(5))
        }
        media.end()
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
        if weHangUp {
            cseq += 1
            let bye = request("BYE", number: cseq)
            remote.send(bye)
            // Repeated over UDP until answered (Timer E), at most 8 s: the call is over either way.
            var byeTimer = SIPRetransmission(reliable: link.reliable)
            let sent = ContinuousClock.now, byeLimit = sent + .seconds(8)
            alarm.set(at: link.reliable ? byeLimit : sent + .milliseconds(byeTimer.t1Ms))
            wait: while let input = await iterator.next() {
                switch input {
                case .message(let m, let source):
                    if m.status.map({ $0 >= 200 }) == true && m.cseq?.method == "BYE" { break wait }
                    if m.method == "BYE" { source.send(m.response(200)); break wait }
                case .tick:
                    let now = ContinuousClock.now
                    if now >= byeLimit { logger.info("no answer to the BYE"); break wait }
                    guard let next = byeTimer.due(now: now, since: sent, retransmit: { remote.send(bye) }, giveUp: {}) else { break wait }
                    alarm.set(at: min(next, byeLimit))
                case .closed: break wait
                default: continue
                }
            }
            alarm.cancel()
        }
        let counters = media.counters
        logger.info("call ended (\(reason)); RTP: \(counters.audio) audio, \(counters.events) event packets, \(counters.wrongAddress + counters.wrongSSRC + counters.unknownPayload + counters.malformed) ignored")
        if let failure { throw Failure(description: "the graph failed: \(failure)", exitCode: 1) }
        return reason
    }

    private func reasonText(_ m: SIPMessage) -> String {
        if case .response(_, let reason) = m.start { return reason }
        return ""
    }

    /// CANCEL for the INVITE (same Via branch and Route, RFC 3261 §9.1).
    private func cancel(_ invite: SIPMessage) -> SIPMessage {
        var c = SIPMessage(start: .request(method: "CANCEL", uri: invite.requestURI ?? options.uri))
        for name in ["Via", "Max-Forwards", "Route", "From", "To", "Call-ID"] { if let v = invite[name] { c.add(name, v) } }
        c.add("CSeq", "\(invite.cseq?.number ?? 1) CANCEL")
        return c
    }
}

/// The dialer's UDP socket: every message, parsed, to the dialer (malformed ones dropped).
private final class DialerDatagramHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let deliver: @Sendable (SIPMessage, SIPPeer) -> Void

    init(deliver: @escaping @Sendable (SIPMessage, SIPPeer) -> Void) { self.deliver = deliver }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        let bytes = envelope.data.readBytes(length: envelope.data.readableBytes) ?? []
        guard bytes.contains(where: { $0 != 13 && $0 != 10 && $0 != 0 }), let m = try? SIPParser.parse(bytes) else { return }
        deliver(m, SIPPeer(channel: context.channel, address: envelope.remoteAddress, reliable: false))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}

/// The dialer's TCP connection: messages split by Content-Length (``SIPStreamFramer``), each to the
/// dialer; a malformed stream closes the connection, and its closing is reported.
private final class DialerStreamHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let deliver: @Sendable (SIPMessage, SIPPeer) -> Void
    let closed: @Sendable (String?) -> Void
    private var framer = SIPStreamFramer()
    private var problem: String?

    init(deliver: @escaping @Sendable (SIPMessage, SIPPeer) -> Void, closed: @escaping @Sendable (String?) -> Void) {
        self.deliver = deliver
        self.closed = closed
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard problem == nil, let address = context.channel.remoteAddress else { return }
        var buffer = unwrapInboundIn(data)
        let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
        do {
            for m in try framer.push(bytes) { deliver(m, SIPPeer(channel: context.channel, address: address, reliable: true)) }
        } catch {
            problem = "malformed SIP: \(error.message)"
            context.close(promise: nil)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        closed(problem)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        problem = problem ?? "\(error)"
        context.close(promise: nil)
    }
}
