import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore
import Synchronization

/// One SIP call on a `sip` route (the UAS side of an INVITE dialog) and its session of the route's graph.
///
/// The INVITE is answered 100, then 180, then (after `ring_ms`) 200 with the SDP answer, repeated over
/// UDP until the ACK comes (giving up after 32 s with a BYE). The caller's RTP goes through the jitter
/// buffer, is decoded and converted to the rate of the graph's `app-source`; RFC 4733 digits and SIP
/// INFO digits become `dtmf` events on it. The graph's answer audio (its `app-sink`) is encoded and sent
/// every `ptime` to where the caller's RTP comes from (silence when there is none); an interruption
/// discards what is queued. The call ends with the caller's BYE or CANCEL, or with voicepipe's BYE when
/// the graph ends, no RTP came for `rtp_timeout_s`, `max_duration_s` passed or the server drains.
final class SIPCall: TelephoneCall {
    let endpoint: SIPEndpoint
    let invite: SIPMessage
    let peer: SIPPeer
    let callID: String
    let toTag = SIPHeader.token()
    private let inbox: AsyncStream<Input>.Continuation
    private let stream: AsyncStream<Input>
    private let opened = ContinuousClock.now
    private let running = Mutex<LiveSession?>(nil)
    var live: LiveSession? { running.withLock { $0 } }

    var server: ServeServer { endpoint.server }
    var route: ServeConfiguration.Route { endpoint.route }
    var options: SIPRouteOptions { endpoint.options }
    private var logger: Logger { server.logger }

    enum Input: Sendable {
        case request(SIPMessage, SIPPeer)
        case response(SIPMessage)
        case answerNow
        case ackTimeout
        case rtpTimeout
        case maxDuration
        case drain
        case graphEnded
    }

    /// Media state shared by the RTP socket's handler, the playout task and the sending task.
    struct Media {
        var inbound: RTPInbound
        var jitter: JitterBuffer
        var detector = TelephoneEventDetector()
        var digits: [TelephoneEventDetector.Digit] = []
        /// Where RTP goes: the caller's latched source, else its SDP address.
        var remote: SocketAddress?
        var latched = false
        var lastRTP = ContinuousClock.now
        /// The caller sends (its direction), and voicepipe may send (the answer's direction).
        var callerSends = true
        var weSend = true
        /// The answer audio at the codec's rate, waiting to be sent.
        var queue: [Int16] = []
        var extended: (last: UInt32, value: Int64)?
        var ended = false
    }
    private let media: Mutex<Media?> = Mutex(nil)
    /// The 2xx (to the INVITE or a re-INVITE) repeated until its ACK, with its CSeq.
    private let pending = Mutex<(response: SIPMessage, cseq: UInt32, timer: SIPRetransmission, sentAt: ContinuousClock.Instant)?>(nil)
    private let clock = ContinuousClock()

    init(endpoint: SIPEndpoint, invite: SIPMessage, peer: SIPPeer) {
        self.endpoint = endpoint
        self.invite = invite
        self.peer = peer
        callID = invite.callID ?? SIPHeader.token()
        (stream, inbox) = AsyncStream.makeStream(of: Input.self)
    }

    func start() {
        Task { [self] in await run() }
    }

    func request(_ m: SIPMessage, from peer: SIPPeer) { inbox.yield(.request(m, peer)) }
    func response(_ m: SIPMessage) { inbox.yield(.response(m)) }
    func endForShutdown() { inbox.yield(.drain) }

    private func respond(_ m: SIPMessage, _ status: Int, _ reason: String? = nil, warning: String? = nil, to peer: SIPPeer? = nil) {
        var r = m.response(status, reason, toTag: toTag)
        if let warning { r.add("Warning", "399 voicepipe \"\(warning.replacingOccurrences(of: "\"", with: "'"))\"") }
        (peer ?? self.peer).send(r)
    }

    private var contact: String {
        let address = endpoint.localAddress(toward: peer)
        let host = address.contains(":") ? "[\(address)]" : address
        return "<sip:voicepipe@\(host):\(endpoint.port)\(peer.reliable ? ";transport=tcp" : "")>"
    }

    /// The INVITE's transaction up to the 200 (or a final refusal); then the call.
    private func run() async {
        defer { endpoint.ended(self) }
        var iterator = stream.makeAsyncIterator()
        let inviteCSeq = invite.cseq?.number ?? 0
        respond(invite, 100)
        var last: SIPMessage?
        func final(_ status: Int, _ reason: String? = nil, warning: String? = nil) {
            var r = invite.response(status, reason, toTag: toTag)
            if let warning { r.add("Warning", "399 voicepipe \"\(warning.replacingOccurrences(of: "\"", with: "'"))\"") }
            if status == 488 || status == 415 { r.add("Accept", "application/sdp") }
            peer.send(r)
            last = r
        }
        // The offer.
        let contentType = invite["Content-Type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        guard !invite.body.isEmpty, contentType == "application/sdp" else {
            server.metrics.error(route: route.name, code: "no_offer")
            final(488, warning: invite.body.isEmpty ? "an INVITE without an SDP offer is not supported" : "the body is \(contentType ?? "untyped"), not application/sdp")
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        let offer: SessionDescription
        do {
            offer = try SessionDescription.parse(String(decoding: invite.body, as: UTF8.self))
        } catch {
            server.metrics.error(route: route.name, code: "bad_sdp")
            logger.info("route '\(route.name)': call \(callID): bad SDP: \(error.message)")
            final(400, "Bad SDP", warning: error.message)
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        var negotiation: MediaNegotiation
        do {
            negotiation = try MediaNegotiation.negotiate(offer: offer, preferences: options.codecs)
        } catch {
            server.metrics.error(route: route.name, code: "no_common_codec")
            logger.info("route '\(route.name)': call \(callID): \(error)")
            final(488, warning: "\(error); this route takes \(options.codecs.map(\.rawValue).joined(separator: ", "))")
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        // Admission.
        let token = WyomingToken()
        guard server.admitWyoming(token) else {
            let draining = server.isDraining
            server.metrics.refused(route: route.name, code: draining ? "draining" : "busy")
            logger.info("route '\(route.name)': call \(callID) refused (\(draining ? "draining" : "too many sessions"))")
            if draining { final(503) } else { final(486) }
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        defer { server.removeWyoming(token) }
        // The graph, the codec and the RTP socket.
        let pipeline: Pipeline
        let source: AppSourceNode
        let rtp: any Channel
        do {
            pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
            guard let s = pipeline.appSource(route.sourceID) else { throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source") }
            source = s
            _ = try CallCodec(negotiation.codec, ptime: negotiation.ptime, graphRate: route.format.sampleRate)
            rtp = try await RTPSocket.bind(host: server.configuration.listen.host, group: endpoint.group, call: self)
        } catch {
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': call \(callID): cannot start: \(error)")
            final(500, warning: "\(error)")
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        defer { rtp.close(promise: nil) }
        let jitter: JitterBuffer
        do {
            jitter = JitterBuffer(configuration: try .init(minMs: max(options.jitterMinMs, negotiation.ptime), maxMs: max(options.jitterMaxMs, negotiation.ptime * 2),
                                                         frameMs: negotiation.ptime))
        } catch {
            final(500, warning: "\(error)")
            return
        }
        negotiatedClock.withLock { $0 = negotiation.codec.rtpmap.clock }
        let localAddress = endpoint.localAddress(toward: peer)
        let sessionID = String(UInt32.random(in: 1...UInt32.max))
        var sdpVersion: UInt64 = 1
        let rtpPort = rtp.localAddress?.port ?? 0
        media.withLock {
            $0 = Media(inbound: RTPInbound(payloadType: negotiation.payloadType, telephoneEvent: negotiation.telephoneEvent, comfortNoise: negotiation.comfortNoise),
                       jitter: jitter)
            $0?.remote = try? SocketAddress.makeAddressResolvingHost(negotiation.remoteAddress, port: negotiation.remotePort)
            $0?.callerSends = negotiation.remoteDirection.sends
            $0?.weSend = negotiation.remoteDirection.receives
        }
        var ringing = invite.response(180, toTag: toTag)
        ringing.add("Contact", contact)
        peer.send(ringing)
        last = ringing
        // Ringing: a CANCEL (or the caller's BYE) may come before the answer.
        let ringTimer = Task { [inbox, options] in
            if options.ringMs > 0 { try? await Task.sleep(for: .milliseconds(options.ringMs)) }
            inbox.yield(.answerNow)
        }
        defer { ringTimer.cancel() }
        var cancelled = false
        ring: while let input = await iterator.next() {
            switch input {
            case .answerNow: break ring
            case .request(let m, let from):
                switch m.method {
                case "CANCEL":
                    respond(m, 200, to: from)
                    final(487)
                    cancelled = true
                    break ring
                case "INVITE" where m.cseq?.number == inviteCSeq:
                    if let last { from.send(last) }
                case "OPTIONS": from.send(endpoint.optionsAnswer(m))
                case "ACK": continue
                default: respond(m, m.method == "BYE" ? 481 : 491, to: from)
                }
            case .drain:
                final(503)
                cancelled = true
                break ring
            default: continue
            }
        }
        if cancelled {
            // Counted as a session that ended before it was answered.
            server.metrics.sessionStarted(route: route.name)
            server.metrics.sessionEnded(route: route.name, outcome: "cancelled", seconds: ServeSession.seconds(.now - opened), drops: 0, mediaAgeP99Ms: nil)
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        // Answer.
        var ok = invite.response(200, toTag: toTag)
        ok.add("Contact", contact)
        ok.add("Allow", SIPEndpoint.allow)
        ok.add("Supported", "timer")
        if let se = invite["Session-Expires"], let seconds = Int(se.split(separator: ";").first?.trimmingCharacters(in: .whitespaces) ?? ""), seconds >= 90 {
            // Session timers (RFC 4028): the interval echoed, the caller refreshes.
            ok.add("Session-Expires", "\(seconds);refresher=uac")
            if (invite.values("Supported") + invite.values("Require")).contains(where: { $0.lowercased() == "timer" }) { ok.add("Require", "timer") }
        }
        ok.add("Content-Type", "application/sdp")
        ok.body = Array(negotiation.answer(address: localAddress, port: rtpPort, sessionID: sessionID, version: sdpVersion).text().utf8)
        peer.send(ok)
        startRetransmitting(ok, cseq: inviteCSeq)
        let from = SIPHeader.uri(invite["From"] ?? "") ?? ""
        let to = SIPHeader.uri(invite["To"] ?? "") ?? ""
        logger.info("route '\(route.name)': call \(callID) from \(from) (\(peer.transport) \(peer.text)) answered with \(negotiation.codec.name), RTP port \(rtpPort)")

        // The session.
        let bus = SessionEvents(server: server, route: route.name, session: callID)
        server.metrics.sessionStarted(route: route.name)
        bus.started(protocol: "sip", remote: peer.text)
        running.withLock { $0 = LiveSession(id: callID, route: route.name, started: opened, pipeline: pipeline) }
        defer { running.withLock { $0 = nil } }
        await source.push(event: Event("call_start", fields: [("from", .string(from)), ("to", .string(to)), ("codec", .string(negotiation.codec.name))]))
        let events = pipeline.events(buffer: 10_000)
        let answerRoute = route.answer
        let forwarding = Task { [self] in
            for await e in events {
                bus.forward(e)
                if answerRoute?.interrupts(e) == true { media.withLock { $0?.queue.removeAll() } }
            }
        }
        let codec = negotiation.codec, ptime = negotiation.ptime, graphFormat = route.format, payloadType = negotiation.payloadType
        let answering = route.answer.flatMap { pipeline.appSink($0.sinkID) }.map { sink in
            Task { [self] in await answer(sink, codecRate: Self.codecRate(codec, graphRate: graphFormat.sampleRate)) }
        }
        let sending = Task { [self] in await send(codec: codec, payloadType: payloadType, ptime: ptime) }
        let playing = Task { [self] in await play(codec: codec, ptime: ptime, into: source) }
        let watching = Task { [self] in await watch() }
        let graph = Task { [inbox] in
            defer { inbox.yield(.graphEnded) }
            do { try await pipeline.run(); return nil as (any Error)? } catch { return error }
        }
        var outcome = "completed"
        var reason = "graph_ended"
        var weHangUp = true
        var stopAtOnce = true
        loop: while let input = await iterator.next() {
            switch input {
            case .request(let m, let from):
                switch m.method ?? "" {
                case "ACK":
                    pending.withLock { p in if let c = p?.cseq, c == m.cseq?.number { p = nil } }
                case "BYE":
                    respond(m, 200, to: from)
                    outcome = "hangup"
                    reason = "hangup"
                    weHangUp = false
                    break loop
                case "CANCEL":
                    respond(m, 200, to: from)     // too late: the call was answered
                case "INVITE":
                    if m.cseq?.number == inviteCSeq {
                        from.send(ok)              // a retransmission
                        continue
                    }
                    // A re-INVITE: hold, resume, a new address.
                    guard !m.body.isEmpty, let reoffer = try? SessionDescription.parse(String(decoding: m.body, as: UTF8.self)) else {
                        if m.body.isEmpty {
                            var r = m.response(200, toTag: toTag)
                            r.add("Contact", contact)
                            r.add("Content-Type", "application/sdp")
                            sdpVersion += 1
                            r.body = Array(negotiation.answer(address: localAddress, port: rtpPort, sessionID: sessionID, version: sdpVersion).text().utf8)
                            from.send(r)
                            startRetransmitting(r, cseq: m.cseq?.number ?? 0)
                        } else {
                            respond(m, 488, warning: "bad SDP in re-INVITE", to: from)
                        }
                        continue
                    }
                    guard let renegotiated = try? MediaNegotiation.negotiate(offer: reoffer, preferences: [negotiation.codec]) else {
                        respond(m, 488, warning: "the re-INVITE drops \(negotiation.codec.name), the call's codec", to: from)
                        continue
                    }
                    negotiation.remoteAddress = renegotiated.remoteAddress
                    negotiation.remotePort = renegotiated.remotePort
                    negotiation.remoteDirection = renegotiated.remoteDirection
                    negotiation.telephoneEvent = renegotiated.telephoneEvent ?? negotiation.telephoneEvent
                    let n = negotiation
                    media.withLock { md in
                        guard md != nil else { return }
                        let newRemote = try? SocketAddress.makeAddressResolvingHost(n.remoteAddress, port: n.remotePort)
                        if n.remoteAddress != "0.0.0.0", let newRemote, newRemote != md?.remote {
                            md?.remote = newRemote
                            md?.latched = false
                            md?.inbound.relatch()
                        }
                        md?.callerSends = n.remoteDirection.sends
                        md?.weSend = n.remoteDirection.receives
                        md?.lastRTP = .now
                        if !n.remoteDirection.receives { md?.queue.removeAll() }
                    }
                    sdpVersion += 1
                    var r = m.response(200, toTag: toTag)
                    r.add("Contact", contact)
                    r.add("Content-Type", "application/sdp")
                    r.body = Array(negotiation.answer(address: localAddress, port: rtpPort, sessionID: sessionID, version: sdpVersion).text().utf8)
                    from.send(r)
                    startRetransmitting(r, cseq: m.cseq?.number ?? 0)
                    logger.info("route '\(route.name)': call \(callID): re-INVITE, caller \(n.remoteDirection.rawValue)")
                case "UPDATE":
                    respond(m, 200, to: from)
                case "INFO":
                    let type = m["Content-Type"] ?? ""
                    if let digit = TelephoneEventDetector.info(contentType: type, body: String(decoding: m.body, as: UTF8.self)) {
                        media.withLock { $0?.digits.append(digit) }
                        respond(m, 200, to: from)
                    } else if m.body.isEmpty {
                        respond(m, 200, to: from)
                    } else {
                        respond(m, 415, warning: "INFO carries application/dtmf-relay or application/dtmf here, not \(type)", to: from)
                    }
                case "OPTIONS": from.send(endpoint.optionsAnswer(m))
                default:
                    var r = m.response(501, toTag: toTag)
                    r.add("Allow", SIPEndpoint.allow)
                    from.send(r)
                }
            case .response: continue
            case .ackTimeout:
                server.metrics.error(route: route.name, code: "no_ack")
                logger.info("route '\(route.name)': call \(callID): no ACK for the 200 in 32 s")
                outcome = "error"
                reason = "no_ack"
                break loop
            case .rtpTimeout:
                server.metrics.error(route: route.name, code: "rtp_timeout")
                logger.info("route '\(route.name)': call \(callID): no RTP for \(options.rtpTimeoutS) s")
                outcome = "rtp_timeout"
                reason = "rtp_timeout"
                break loop
            case .maxDuration:
                server.metrics.error(route: route.name, code: "max_duration")
                outcome = "limit"
                reason = "max_duration"
                stopAtOnce = false
                break loop
            case .drain:
                outcome = "shutdown"
                reason = "shutdown"
                stopAtOnce = false
                break loop
            case .graphEnded:
                break loop
            case .answerNow: continue
            }
        }
        pending.withLock { $0 = nil }
        await source.push(event: Event("call_end", fields: [("reason", .string(reason))]))
        source.finish()
        if stopAtOnce && reason != "graph_ended" { pipeline.stop() }
        let failure = await graph.value
        _ = await forwarding.value
        await answering?.value
        if !stopAtOnce && weHangUp {
            // The answer still queued is played out (bounded by the stall limit).
            let until = ContinuousClock.now + ServeSession.stallLimit
            while media.withLock({ !($0?.queue.isEmpty ?? true) }) && ContinuousClock.now < until {
                try? await Task.sleep(for: .milliseconds(20))
            }
        }
        media.withLock { $0?.ended = true }
        for t in [sending, playing, watching] { t.cancel() }
        _ = await sending.value
        _ = await playing.value
        _ = await watching.value
        if failure != nil && outcome == "completed" { outcome = "error" }
        if weHangUp { await hangUp(&iterator) }
        let counters = media.withLock { $0?.inbound.counters } ?? RTPInbound.Counters()
        if counters.wrongAddress + counters.wrongSSRC + counters.malformed + counters.unknownPayload > 0 {
            logger.info("route '\(route.name)': call \(callID): RTP ignored: \(counters.wrongAddress) from another address, \(counters.wrongSSRC) with another SSRC, \(counters.unknownPayload) of unknown payload type, \(counters.malformed) malformed")
        }
        let drops = pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
        server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: ServeSession.seconds(.now - opened), drops: drops,
                                    mediaAgeP99Ms: pipeline.sinkAges.map(\.age.p99Ms).max())
        await bus.finished(outcome: outcome, audioBytes: 0, drops: drops, extra: [("reason", .string(reason))])
        if let failure {
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': call \(callID): graph failed: \(failure)")
        }
        logger.info("route '\(route.name)': call \(callID) ended (\(reason))")
    }

    /// After a final non-2xx response: repeat it over UDP until the ACK (or 32 s), answering retransmitted INVITEs.
    private func awaitACK(_ iterator: inout AsyncStream<Input>.Iterator, final: SIPMessage?, cseq: UInt32) async {
        guard let final else { return }
        if peer.reliable { return }
        var timer = SIPRetransmission()
        let started = ContinuousClock.now
        let ticker = Task { [inbox] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(250))
                inbox.yield(.answerNow)
            }
        }
        defer { ticker.cancel() }
        while let input = await iterator.next() {
            switch input {
            case .request(let m, let from):
                if m.method == "ACK" { return }
                if m.method == "INVITE" && m.cseq?.number == cseq { from.send(final); continue }
                if m.method == "CANCEL" { respond(m, 200, to: from); continue }
                respond(m, 481, to: from)
            case .drain: return
            default:
                switch timer.poll(elapsedMs: Int((ContinuousClock.now - started) / .milliseconds(1))) {
                case .retransmit: peer.send(final)
                case .giveUp, .done: return
                case .wait: continue
                }
            }
        }
    }

    /// Repeats a 2xx over UDP until the ACK with its CSeq arrives; 32 s without it ends the call.
    private func startRetransmitting(_ response: SIPMessage, cseq: UInt32) {
        guard !peer.reliable else { return }
        pending.withLock { $0 = (response, cseq, SIPRetransmission(), .now) }
        Task { [self] in
            while true {
                try? await Task.sleep(for: .milliseconds(100))
                let action: SIPRetransmission.Action = pending.withLock { p in
                    guard var entry = p, entry.cseq == cseq else { return .done }
                    let a = entry.timer.poll(elapsedMs: Int((ContinuousClock.now - entry.sentAt) / .milliseconds(1)))
                    entry.timer = entry.timer
                    p = entry
                    if a == .giveUp { p = nil }
                    return a
                }
                switch action {
                case .retransmit: peer.send(response)
                case .giveUp: inbox.yield(.ackTimeout); return
                case .done: return
                case .wait: continue
                }
            }
        }
    }

    /// voicepipe's BYE, repeated over UDP until answered (at most 8 s: the call is over either way).
    private func hangUp(_ iterator: inout AsyncStream<Input>.Iterator) async {
        var bye = SIPMessage(start: .request(method: "BYE", uri: SIPHeader.uri(invite["Contact"] ?? "") ?? SIPHeader.uri(invite["From"] ?? "") ?? "sip:caller"))
        let local = endpoint.localAddress(toward: peer)
        bye.add("Via", "SIP/2.0/\(peer.transport) \(local.contains(":") ? "[\(local)]" : local):\(endpoint.port);branch=z9hG4bK\(SIPHeader.token(16));rport")
        bye.add("Max-Forwards", "70")
        for r in invite.values("Record-Route") { bye.add("Route", r) }
        bye.add("From", (invite["To"] ?? "") + (SIPHeader.parameter(invite["To"] ?? "", "tag") == nil ? ";tag=\(toTag)" : ""))
        bye.add("To", invite["From"] ?? "")
        bye.add("Call-ID", callID)
        bye.add("CSeq", "1 BYE")
        bye.add("Reason", "SIP;cause=200;text=\"call ended\"")
        peer.send(bye)
        var timer = SIPRetransmission()
        let started = ContinuousClock.now
        let ticker = Task { [inbox] in
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                inbox.yield(.answerNow)
            }
        }
        defer { ticker.cancel() }
        while let input = await iterator.next() {
            switch input {
            case .response(let r) where r.cseq?.method == "BYE":
                if let s = r.status, s >= 200 { return }
            case .request(let m, let from):
                if m.method == "BYE" { respond(m, 200, to: from); return }
                if m.method == "ACK" { continue }
                respond(m, 481, to: from)
            default:
                let elapsed = Int((ContinuousClock.now - started) / .milliseconds(1))
                if elapsed > 8000 { return }
                if peer.reliable { continue }
                if timer.poll(elapsedMs: elapsed) == .retransmit { peer.send(bye) }
            }
        }
    }

    static func codecRate(_ codec: TelephoneCodec, graphRate: Int) -> Int {
        switch codec {
        case .pcmu, .pcma: 8000
        case .g722: 16000
        case .opus: graphRate > 16000 ? 48000 : 16000
        }
    }

    // MARK: media

    /// An RTP datagram on the call's port.
    func rtpReceived(_ bytes: [UInt8], from address: SocketAddress) {
        let text = "\(address.ipAddress ?? "?"):\(address.port ?? 0)"
        let verdict: RTPInbound.Verdict? = media.withLock { md in
            guard md != nil, md?.ended == false else { return nil }
            let v = md!.inbound.classify(bytes, from: text)
            switch v {
            case .audio(let p):
                md!.lastRTP = .now
                if !md!.latched { md!.remote = address; md!.latched = true }
                let ts: Int64
                if let e = md!.extended {
                    ts = e.value + Int64(Int32(bitPattern: p.timestamp &- e.last))
                } else {
                    ts = 0
                }
                md!.extended = (p.timestamp, ts)
                let frame = Frame(payload: .encoded(EncodedBuffer(codec: "rtp", payload: p.payload, durationNanos: md!.jitter.configuration.frameNanos)),
                                  pts: ts * 1_000_000_000 / Int64(rtpClock))
                _ = md!.jitter.insert(frame, arrival: Int64((ContinuousClock.now - opened) / .nanoseconds(1)))
            case .telephoneEvent(let p):
                md!.lastRTP = .now
                if !md!.latched { md!.remote = address; md!.latched = true }
                md!.digits += md!.detector.packet(timestamp: p.timestamp, payload: p.payload)
            case .comfortNoise:
                md!.lastRTP = .now
            default: break
            }
            return v
        }
        switch verdict {
        case .wrongAddress: server.metrics.error(route: route.name, code: "rtp_wrong_address")
        case .wrongSSRC: server.metrics.error(route: route.name, code: "rtp_wrong_ssrc")
        case .malformed: server.metrics.error(route: route.name, code: "rtp_malformed")
        case .unknownPayloadType: server.metrics.error(route: route.name, code: "rtp_unknown_payload")
        case .audio(let p): server.metrics.audio(route: route.name, bytes: p.payload.count)
        default: break
        }
    }

    /// The RTP clock of the call's codec (Opus 48000, the others 8000); set once negotiated.
    private let negotiatedClock = Mutex(8000)
    private var rtpClock: Int { negotiatedClock.withLock { $0 } }

    /// Plays the jitter buffer out at the frame rate: decoded, converted to the graph's rate, pushed with the digits.
    private func play(codec: TelephoneCodec, ptime: Int, into source: AppSourceNode) async {
        guard let decoder = try? CallCodec(codec, ptime: ptime, graphRate: route.format.sampleRate) else { return }
        let from = AudioFormat(sampleRate: decoder.rate, channels: 1)
        let converter = from == route.format ? nil : try? AudioConverter(from: from, to: route.format)
        while !Task.isCancelled {
            let (due, digits): (Int64?, [TelephoneEventDetector.Digit]) = media.withLock { md in
                let d = md?.digits ?? []
                md?.digits.removeAll()
                return (md?.jitter.nextTickTime, d)
            }
            for d in digits {
                await source.push(event: Event(.dtmf, fields: [("digit", .string(d.digit)), ("duration_ms", .int(Int64(d.durationMs)))]))
            }
            guard let due else {
                try? await Task.sleep(for: .milliseconds(10))
                continue
            }
            let at = opened + .nanoseconds(due)
            if at > .now {
                try? await Task.sleep(until: min(at, .now + .milliseconds(20)), clock: clock)
                if at > .now { continue }
            }
            let action = media.withLock { $0?.jitter.tick() }
            var samples: [Int16]
            switch action {
            case .play(let frame, _):
                samples = (try? decoder.decode(frame.encoded?.payload ?? [])) ?? decoder.conceal()
            case .conceal:
                samples = decoder.conceal()
            case nil: return
            }
            if let converter { samples = converter.convert(samples) }
            if !samples.isEmpty { await source.push(samples) }
        }
    }

    /// The graph's answer audio, converted to the codec's rate and queued (oldest dropped beyond `answer_buffer_ms`).
    private func answer(_ sink: AppSinkNode, codecRate: Int) async {
        var converter: AudioConverter?
        let target = AudioFormat(sampleRate: codecRate, channels: 1)
        for await frame in sink.frames {
            guard let audio = frame.audio else { continue }
            if converter?.input != audio.format { converter = try? AudioConverter(from: audio.format, to: target) }
            let samples = audio.format == target ? audio.samples : (converter?.convert(audio.samples) ?? [])
            let limit = codecRate * (route.answer?.bufferMs ?? 20_000) / 1000
            let dropped = media.withLock { md -> Int in
                guard md != nil else { return 0 }
                md!.queue += samples
                let over = max(0, md!.queue.count - limit)
                if over > 0 { md!.queue.removeFirst(over) }
                return over
            }
            if dropped > 0 { server.metrics.answerDropped(route: route.name, messages: 1, seconds: Double(dropped) / Double(codecRate)) }
        }
    }

    /// Sends one RTP packet every `ptime`: the queued answer, or silence.
    private func send(codec: TelephoneCodec, payloadType: UInt8, ptime: Int) async {
        guard let encoder = try? CallCodec(codec, ptime: ptime, graphRate: route.format.sampleRate) else { return }
        let ssrc = UInt32.random(in: 1...UInt32.max)
        var seq = UInt16.random(in: 0...UInt16.max)
        var timestamp = UInt32.random(in: 0...UInt32.max)
        var first = true
        var next = clock.now
        while !Task.isCancelled {
            next += .milliseconds(ptime)
            try? await Task.sleep(until: next, clock: clock)
            if clock.now - next > .milliseconds(200) { next = clock.now }
            let (chunk, remote, allowed, hadAudio): ([Int16], SocketAddress?, Bool, Bool) = media.withLock { md in
                guard md != nil else { return ([], nil, false, false) }
                let n = min(md!.queue.count, encoder.frameSamples)
                var c = Array(md!.queue.prefix(n))
                md!.queue.removeFirst(n)
                let had = n > 0
                if c.count < encoder.frameSamples { c += [Int16](repeating: 0, count: encoder.frameSamples - c.count) }
                return (c, md!.remote, md!.weSend && !md!.ended, had)
            }
            guard allowed, let remote, let channel = rtpChannel.withLock({ $0 }) else { continue }
            guard let payload = try? encoder.encode(chunk) else { continue }
            let packet = RTPPacket(marker: first, payloadType: payloadType, sequenceNumber: seq, timestamp: timestamp, ssrc: ssrc, payload: payload)
            first = false
            seq &+= 1
            timestamp &+= encoder.timestampStep
            channel.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: channel.allocator.buffer(bytes: packet.serialized())), promise: nil)
            if hadAudio { server.metrics.answerSent(route: route.name, seconds: Double(ptime) / 1000) }
        }
    }

    let rtpChannel = Mutex<(any Channel)?>(nil)

    /// `.rtpTimeout` when the caller (who said it sends) sent nothing for `rtp_timeout_s`; `.maxDuration` at `max_duration_s`.
    private func watch() async {
        let limit = ContinuousClock.now + .seconds(route.maxDurationS)
        while !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(200))
            if Task.isCancelled { return }
            if ContinuousClock.now >= limit { inbox.yield(.maxDuration); return }
            guard options.rtpTimeoutS > 0 else { continue }
            let silent = media.withLock { md -> Bool in
                guard let md, md.callerSends else { return false }
                return ContinuousClock.now - md.lastRTP > .seconds(options.rtpTimeoutS)
            }
            if silent { inbox.yield(.rtpTimeout); return }
        }
    }
}

/// A call's RTP socket (UDP, a port of the kernel's choosing).
enum RTPSocket {
    static func bind(host: String, group: any EventLoopGroup, call: SIPCall) async throws -> any Channel {
        let channel = try await DatagramBootstrap(group: group)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 2048))
            .channelInitializer { ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(RTPHandler(call: call)) } }
            .bind(host: host, port: 0).get()
        call.rtpChannel.withLock { $0 = channel }
        return channel
    }
}

private final class RTPHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let call: SIPCall

    init(call: SIPCall) { self.call = call }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        let bytes = envelope.data.readBytes(length: envelope.data.readableBytes) ?? []
        call.rtpReceived(bytes, from: envelope.remoteAddress)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}
