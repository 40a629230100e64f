import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore
import Synchronization

/// `voicepipe call URI GRAPH`: places one SIP call (the UAC side, over UDP) and runs the graph for it.
/// The graph's `app-source` hears the callee; its `app-sink` fed audio is what the callee hears.
///
/// INVITE with an SDP offer of the chosen codecs and telephone-event, repeated until a response (Timers
/// A/B); provisional responses are logged; a 2xx is ACKed (again for each retransmission) and starts the
/// call; a final refusal ends with an error naming it. The call ends with the callee's BYE, or voicepipe's
/// BYE when the graph ends, when no RTP came for `rtpTimeoutS`, or at `stop()` (a CANCEL while ringing).
package final class SIPDialer: Sendable {
    package struct Options: Sendable {
        package var uri: String
        package var graphPath: String
        package var codecs: [String] = ["pcmu", "pcma", "g722", "opus"]
        package var ringTimeoutS = 60
        package var rtpTimeoutS = 30
        package var user = "voicepipe"
        /// Digest credentials for a callee or proxy that challenges the INVITE (401/407).
        package var authUser: String?
        package var password: String?
        /// Hang up after this many seconds of call (0: no limit).
        package var maxDurationS = 0

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
        case message(SIPMessage, SocketAddress)
        case tick
        case stop
        case graphEnded
        case rtpTimeout
    }

    let options: Options
    let route: ServeConfiguration.Route
    let logger: Logger
    private let inbox: AsyncStream<Input>.Continuation
    private let stream: AsyncStream<Input>

    /// Loads and checks the graph (one `app-source`, at most one `app-sink` fed audio) and the codecs.
    package init(options: Options, registry: NodeRegistry, logger: Logger, environment: [String: String] = ProcessInfo.processInfo.environment) throws {
        self.options = options
        self.logger = logger
        guard SIPHeader.hostPort(options.uri) != nil, options.uri.lowercased().hasPrefix("sip:") else {
            throw Failure(description: "'\(options.uri)' is not a SIP URI (sip:user@host[:port])", exitCode: 2)
        }
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

    /// Hang up (BYE), or CANCEL while ringing.
    package func stop() { inbox.yield(.stop) }

    /// Places the call and runs it to its end; returns why it ended (`hangup`, `graph_ended`, `rtp_timeout`, `stopped`).
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

    private func call(group: MultiThreadedEventLoopGroup) async throws -> String {
        guard let (host, port) = SIPHeader.hostPort(options.uri) else { throw Failure(description: "bad URI", exitCode: 2) }
        let target: SocketAddress
        do {
            target = try SocketAddress.makeAddressResolvingHost(host, port: port ?? 5060)
        } catch {
            throw Failure(description: "cannot resolve \(host): \(error)", exitCode: 1)
        }
        let local = SIPEndpoint.sourceAddress(toward: target.ipAddress ?? "127.0.0.1") ?? "127.0.0.1"
        let inbox = self.inbox
        let signaling = try await DatagramBootstrap(group: group)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 65_536))
            .channelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(DialerHandler(inbox: inbox)) } }
            .bind(host: "0.0.0.0", port: 0).get()
        defer { signaling.close(promise: nil) }
        let localPort = signaling.localAddress?.port ?? 0
        func send(_ m: SIPMessage, to address: SocketAddress = target) {
            signaling.writeAndFlush(AddressedEnvelope(remoteAddress: address, data: signaling.allocator.buffer(bytes: m.serialized())), promise: nil)
        }
        // A port for RTP, named in the offer and bound by the call's media once the answer is known.
        let probe = try await DatagramBootstrap(group: group).bind(host: "0.0.0.0", port: 0).get()
        let rtpPort = probe.localAddress?.port ?? 0
        try await probe.close()

        let callID = "\(SIPHeader.token(16))@\(local)"
        let fromTag = SIPHeader.token()
        let from = "<sip:\(options.user)@\(local)>;tag=\(fromTag)"
        let contact = "<sip:\(options.user)@\(local):\(localPort)>"
        let codecs = options.codecs.compactMap(TelephoneCodec.init(rawValue:))
        let sessionID = String(UInt32.random(in: 1...UInt32.max))
        var invite = SIPMessage(start: .request(method: "INVITE", uri: options.uri))
        let branch = "z9hG4bK" + SIPHeader.token(16)
        var via = "SIP/2.0/UDP \(local):\(localPort);branch=\(branch);rport"
        invite.add("Via", via)
        invite.add("Max-Forwards", "70")
        invite.add("From", from)
        invite.add("To", "<\(options.uri)>")
        invite.add("Call-ID", callID)
        invite.add("CSeq", "1 INVITE")
        invite.add("Contact", contact)
        invite.add("Allow", SIPEndpoint.allow)
        invite.add("User-Agent", "voicepipe")
        invite.add("Content-Type", "application/sdp")
        invite.body = Array(MediaNegotiation.offer(preferences: codecs, address: local, port: rtpPort, sessionID: sessionID).text().utf8)
        send(invite)
        logger.info("calling \(options.uri) from \(local):\(localPort)")

        let ticker = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                inbox.yield(.tick)
            }
        }
        defer { ticker.cancel() }
        var iterator = stream.makeAsyncIterator()
        // The INVITE transaction.
        var timer = SIPRetransmission()
        var started = ContinuousClock.now
        var answered = false
        var cancelled = false
        var ok: SIPMessage?
        var remote = target
        invite: while let input = await iterator.next() {
            switch input {
            case .tick:
                let elapsed = Int((ContinuousClock.now - started) / .milliseconds(1))
                if !answered {
                    switch timer.poll(elapsedMs: elapsed) {
                    case .retransmit: send(invite)
                    case .giveUp: throw Failure(description: "no answer from \(options.uri) in 32 s", exitCode: 1)
                    default: break
                    }
                } else if elapsed > options.ringTimeoutS * 1000 && !cancelled {
                    cancelled = true
                    send(cancel(invite))
                }
            case .stop:
                if !cancelled {
                    cancelled = true
                    send(cancel(invite))
                    // Without any response yet, the CANCEL may not be matched: give up after a short wait.
                    if !answered { throw Failure(description: "stopped before \(options.uri) answered", exitCode: 1) }
                }
            case .message(let m, let source):
                guard m.callID == callID else { continue }
                if let method = m.method {
                    // A request before the 2xx (BYE of an early dialog, OPTIONS): answered plainly.
                    if method != "ACK" { send(m.response(method == "OPTIONS" ? 200 : 481), to: source) }
                    continue
                }
                guard let status = m.status, m.cseq?.method == "INVITE", m.cseq?.number == invite.cseq?.number else { continue }
                answered = true
                timer.answered()
                if status < 200 {
                    if status == 180 || status == 183 { logger.info("\(options.uri): \(status) \(reasonText(m))") }
                    continue
                }
                if status >= 300 {
                    var ack = SIPMessage(start: .request(method: "ACK", uri: options.uri))
                    ack.add("Via", via)
                    ack.add("Max-Forwards", "70")
                    ack.add("From", from)
                    ack.add("To", m["To"] ?? "<\(options.uri)>")
                    ack.add("Call-ID", callID)
                    ack.add("CSeq", "\(invite.cseq?.number ?? 1) ACK")
                    send(ack)
                    if cancelled && status == 487 { return "stopped" }
                    // A challenge, answered once when a password was given.
                    if (status == 401 || status == 407), let password = options.password, invite["Authorization"] == nil && invite["Proxy-Authorization"] == nil,
                       let challenge = try? DigestChallenge.parse(m[status == 401 ? "WWW-Authenticate" : "Proxy-Authenticate"] ?? "") {
                        let number = (invite.cseq?.number ?? 1) + 1
                        via = "SIP/2.0/UDP \(local):\(localPort);branch=z9hG4bK\(SIPHeader.token(16));rport"
                        invite.set("Via", via)
                        invite.set("CSeq", "\(number) INVITE")
                        invite.add(status == 401 ? "Authorization" : "Proxy-Authorization",
                                   challenge.authorization(method: "INVITE", uri: options.uri, user: options.authUser ?? options.user, password: password, cnonce: SIPHeader.token(12)))
                        send(invite)
                        timer = SIPRetransmission()
                        started = .now
                        answered = false
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
        guard let ok else { throw Failure(description: "the call ended before it was answered", exitCode: 1) }
        let toWithTag = ok["To"] ?? "<\(options.uri)>"
        let remoteTarget = SIPHeader.uri(ok["Contact"] ?? "") ?? options.uri
        let routeSet = ok.values("Record-Route").reversed()
        var cseq: UInt32 = invite.cseq?.number ?? 1
        func request(_ method: String, number: UInt32) -> SIPMessage {
            var r = SIPMessage(start: .request(method: method, uri: remoteTarget))
            r.add("Via", "SIP/2.0/UDP \(local):\(localPort);branch=z9hG4bK\(SIPHeader.token(16));rport")
            r.add("Max-Forwards", "70")
            for rr in routeSet { r.add("Route", rr) }
            r.add("From", from)
            r.add("To", toWithTag)
            r.add("Call-ID", callID)
            r.add("CSeq", "\(number) \(method)")
            return r
        }
        let ack = request("ACK", number: invite.cseq?.number ?? 1)
        send(ack, to: remote)
        // The answer.
        let negotiation: MediaNegotiation
        do {
            let answer = try SessionDescription.parse(String(decoding: ok.body, as: UTF8.self))
            negotiation = try MediaNegotiation.negotiate(offer: answer, preferences: codecs)
        } catch {
            cseq += 1
            send(request("BYE", number: cseq), to: remote)
            throw Failure(description: "\(options.uri) answered with an unusable SDP: \(error)", exitCode: 1)
        }
        if cancelled {
            cseq += 1
            send(request("BYE", number: cseq), to: remote)
            return "stopped"
        }
        logger.info("\(options.uri) answered: \(negotiation.codec.name) to \(negotiation.remoteAddress):\(negotiation.remotePort)")
        // The call: the graph, the media.
        let pipeline = try Pipeline(graph: route.graph, logger: logger)
        guard let source = pipeline.appSource(route.sourceID) else { throw Failure(description: "the graph has no app-source", exitCode: 2) }
        let media = try CallMedia(negotiation: negotiation, graphFormat: route.format, jitterMs: 20...200, answerBufferMs: route.answer?.bufferMs ?? 20_000) { _ in }
        _ = try await media.bind(host: "0.0.0.0", group: group, port: rtpPort)
        defer { media.close() }
        await source.push(event: Event("call_start", fields: [("from", .string("sip:\(options.user)@\(local)")), ("to", .string(options.uri)),
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
                while !media.queueIsEmpty && !Task.isCancelled { try? await Task.sleep(for: .milliseconds(20)) }
                if !Task.isCancelled { inbox.yield(.graphEnded) }
            }
        }
        let running = Task {
            defer { inbox.yield(.graphEnded) }
            do { try await pipeline.run(); return nil as (any Error)? } catch { return error }
        }
        let rtpTimeout = options.rtpTimeoutS, maxDuration = options.maxDurationS
        let watch = Task {
            let limit = ContinuousClock.now + .seconds(maxDuration > 0 ? maxDuration : 86_400 * 365)
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(200))
                if ContinuousClock.now >= limit { inbox.yield(.stop); return }
                if rtpTimeout > 0 && media.silent(for: .seconds(rtpTimeout)) { inbox.yield(.rtpTimeout); return }
            }
        }
        var reason = "graph_ended"
        var weHangUp = true
        call: while let input = await iterator.next() {
            switch input {
            case .message(let m, let source):
                guard m.callID == callID else { continue }
                switch m.method {
                case "BYE":
                    send(m.response(200), to: source)
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
                        r.body = Array(n.answer(address: local, port: rtpPort, sessionID: sessionID, version: 2).text().utf8)
                        send(r, to: source)
                    } else {
                        send(m.response(488), to: source)
                    }
                case "INFO":
                    if let d = TelephoneEventDetector.info(contentType: m["Content-Type"] ?? "", body: String(decoding: m.body, as: UTF8.self)) { media.digit(d) }
                    send(m.response(200), to: source)
                case "OPTIONS", "UPDATE": send(m.response(200), to: source)
                case "ACK", nil:
                    // A retransmitted 200 (our ACK was lost): ACK again.
                    if m.status.map({ $0 >= 200 && $0 < 300 }) == true && m.cseq?.method == "INVITE" { send(ack, to: remote) }
                default: send(m.response(501), to: source)
                }
            case .stop: reason = "stopped"; break call
            case .graphEnded: reason = "graph_ended"; break call
            case .rtpTimeout: reason = "rtp_timeout"; break call
            case .tick: continue
            }
        }
        watch.cancel()
        said?.cancel()
        await source.push(event: Event("call_end", fields: [("reason", .string(reason))]))
        source.finish()
        if reason != "graph_ended" { pipeline.stop() }
        let failure = await running.value
        forwarding.cancel()
        if reason == "graph_ended" {
            // What the graph still had to say is played out (at most 5 s).
            let until = ContinuousClock.now + .seconds(5)
            while !media.queueIsEmpty && ContinuousClock.now < until { try? await Task.sleep(for: .milliseconds(20)) }
        }
        media.end()
        for t in tasks { t.cancel() }
        for t in tasks { await t.value }
        if weHangUp {
            cseq += 1
            let bye = request("BYE", number: cseq)
            send(bye, to: remote)
            var byeTimer = SIPRetransmission()
            let sent = ContinuousClock.now
            wait: while let input = await iterator.next() {
                switch input {
                case .message(let m, let source):
                    if m.status.map({ $0 >= 200 }) == true && m.cseq?.method == "BYE" { break wait }
                    if m.method == "BYE" { send(m.response(200), to: source); break wait }
                case .tick:
                    let elapsed = Int((ContinuousClock.now - sent) / .milliseconds(1))
                    if elapsed > 8000 { logger.info("no answer to the BYE"); break wait }
                    if byeTimer.poll(elapsedMs: elapsed) == .retransmit { send(bye, to: remote) }
                default: continue
                }
            }
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

    /// CANCEL for the INVITE (same Via branch, RFC 3261 §9.1).
    private func cancel(_ invite: SIPMessage) -> SIPMessage {
        var c = SIPMessage(start: .request(method: "CANCEL", uri: invite.requestURI ?? options.uri))
        for name in ["Via", "Max-Forwards", "From", "To", "Call-ID"] { if let v = invite[name] { c.add(name, v) } }
        c.add("CSeq", "\(invite.cseq?.number ?? 1) CANCEL")
        return c
    }
}

/// The dialer's signaling socket: every message, parsed, to the dialer (malformed ones dropped).
private final class DialerHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let inbox: AsyncStream<SIPDialer.Input>.Continuation

    init(inbox: AsyncStream<SIPDialer.Input>.Continuation) { self.inbox = inbox }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        let bytes = envelope.data.readBytes(length: envelope.data.readableBytes) ?? []
        guard bytes.contains(where: { $0 != 13 && $0 != 10 }), let m = try? SIPParser.parse(bytes) else { return }
        inbox.yield(.message(m, envelope.remoteAddress))
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}
