import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore

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
    private let running = LockedValue<LiveSession?>(nil)
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
        /// A transaction timer's deadline passed (a retransmission or a give-up may be due).
        case timer
    }

    /// The call's media, once negotiated.
    private let media = LockedValue<CallMedia?>(nil)
    /// The CSeq of the 2xx (to the INVITE or a re-INVITE) repeated until its ACK; `ackChanged` wakes the
    /// task repeating it when it changes.
    private let pending = LockedValue<UInt32?>(nil)
    private let ackChanged = ChangeSignal()

    /// Stops repeating the 2xx: its ACK came (`cseq`), or the call no longer waits for one (nil).
    private func acknowledged(_ cseq: UInt32? = nil) {
        pending.withLock { p in if cseq == nil || p == cseq { p = nil } }
        ackChanged.notify()
    }

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
        // The offer; or none (a late offer, RFC 3261 §13.2.1): voicepipe offers in its 200 and the caller
        // answers in the ACK.
        let contentType = invite["Content-Type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
        let lateOffer = invite.body.isEmpty
        guard lateOffer || contentType == "application/sdp" else {
            server.metrics.error(route: route.name, code: "no_offer")
            final(488, warning: "the body is \(contentType ?? "untyped"), not application/sdp")
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        var negotiation: MediaNegotiation?
        if !lateOffer {
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
            do {
                negotiation = try MediaNegotiation.negotiate(offer: offer, preferences: options.codecs)
            } catch {
                server.metrics.error(route: route.name, code: "no_common_codec")
                logger.info("route '\(route.name)': call \(callID): \(error)")
                final(488, warning: "\(error); this route takes \(options.codecs.map(\.rawValue).joined(separator: ", "))")
                await awaitACK(&iterator, final: last, cseq: inviteCSeq)
                return
            }
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
        // The call's media: made now when the INVITE had the offer, after the ACK's answer on a late offer
        // (on the port reserved here and named in voicepipe's offer).
        var callMediaSlot: CallMedia?
        defer { callMediaSlot?.close() }
        let rtpPort: Int
        do {
            pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
            guard let s = pipeline.appSource(route.sourceID) else { throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source") }
            source = s
            if let negotiation {
                let m = try makeMedia(negotiation)
                callMediaSlot = m
                rtpPort = try await m.bind(host: server.configuration.listen.host, group: endpoint.group)
                media.withLock { $0 = m }
            } else {
                let probe = try await DatagramBootstrap(group: endpoint.group).bind(host: server.configuration.listen.host, port: 0).get()
                rtpPort = probe.localAddress?.port ?? 0
                try await probe.close()
            }
        } catch {
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': call \(callID): cannot start: \(error)")
            final(500, warning: "\(error)")
            await awaitACK(&iterator, final: last, cseq: inviteCSeq)
            return
        }
        let localAddress = endpoint.localAddress(toward: peer)
        let sessionID = String(UInt32.random(in: 1...UInt32.max))
        var sdpVersion: UInt64 = 1
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
        ok.body = Array((negotiation?.answer(address: localAddress, port: rtpPort, sessionID: sessionID, version: sdpVersion)
                         ?? MediaNegotiation.offer(preferences: options.codecs, address: localAddress, port: rtpPort, sessionID: sessionID)).text().utf8)
        peer.send(ok)
        startRetransmitting(ok, cseq: inviteCSeq)
        if negotiation == nil {
            // A late offer: the answer comes in the ACK.
            switch await lateAnswer(&iterator, ok: ok, cseq: inviteCSeq) {
            case .answer(let n):
                do {
                    let m = try makeMedia(n)
                    callMediaSlot = m
                    _ = try await m.bind(host: server.configuration.listen.host, group: endpoint.group, port: rtpPort)
                    media.withLock { $0 = m }
                    negotiation = n
                } catch {
                    server.metrics.error(route: route.name, code: "graph_failed")
                    logger.warning("route '\(route.name)': call \(callID): cannot start: \(error)")
                    await hangUp(&iterator, reason: "\(error)")
                    return
                }
            case .unusable(let why):
                // RFC 3261 §13.2.2.4 / RFC 3264: the session cannot start; it is ended with a BYE.
                server.metrics.error(route: route.name, code: "bad_answer")
                logger.info("route '\(route.name)': call \(callID): late offer: \(why)")
                await hangUp(&iterator, reason: why)
                return
            case .gone:
                return
            }
        }
        guard var negotiation, let callMedia = callMediaSlot else { return }
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
        let forwarding = Task {
            for await e in events {
                bus.forward(e)
                if answerRoute?.interrupts(e) == true { callMedia.interrupt() }
            }
        }
        let mediaTasks = callMedia.start(source: source, sink: route.answer.flatMap { pipeline.appSink($0.sinkID) })
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
                    if let c = m.cseq?.number { acknowledged(c) }
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
                    callMedia.update(negotiation)
                    sdpVersion += 1
                    var r = m.response(200, toTag: toTag)
                    r.add("Contact", contact)
                    r.add("Content-Type", "application/sdp")
                    r.body = Array(negotiation.answer(address: localAddress, port: rtpPort, sessionID: sessionID, version: sdpVersion).text().utf8)
                    from.send(r)
                    startRetransmitting(r, cseq: m.cseq?.number ?? 0)
                    logger.info("route '\(route.name)': call \(callID): re-INVITE, caller \(negotiation.remoteDirection.rawValue)")
                case "UPDATE":
                    respond(m, 200, to: from)
                case "INFO":
                    let type = m["Content-Type"] ?? ""
                    if let digit = TelephoneEventDetector.info(contentType: type, body: String(decoding: m.body, as: UTF8.self)) {
                        callMedia.digit(digit)
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
            case .answerNow, .timer: continue
            }
        }
        acknowledged()
        await source.push(event: Event("call_end", fields: [("reason", .string(reason))]))
        source.finish()
        if stopAtOnce && reason != "graph_ended" { pipeline.stop() }
        let failure = await graph.value
        _ = await forwarding.value
        if !stopAtOnce && weHangUp {
            // The answer still queued is played out (bounded by the stall limit).
            await callMedia.waitUntilSent(deadline: .now + ServeSession.stallLimit)
        }
        callMedia.end()
        for t in mediaTasks + [watching] { t.cancel() }
        for t in mediaTasks + [watching] { _ = await t.value }
        if failure != nil && outcome == "completed" { outcome = "error" }
        if weHangUp { await hangUp(&iterator) }
        let counters = callMedia.counters
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

    /// The call's media for a negotiation, its counts going to the route's metrics.
    private func makeMedia(_ negotiation: MediaNegotiation) throws -> CallMedia {
        let (metrics, name) = (server.metrics, route.name)
        return try CallMedia(negotiation: negotiation, graphFormat: route.format, jitterMs: options.jitterMinMs...max(options.jitterMinMs, options.jitterMaxMs),
                             answerBufferMs: route.answer?.bufferMs ?? 20_000) { report in
            switch report {
            case .received(let bytes): metrics.audio(route: name, bytes: bytes)
            case .ignored(let code): metrics.error(route: name, code: code)
            case .sent(let seconds): metrics.answerSent(route: name, seconds: seconds)
            case .dropped(let seconds): metrics.answerDropped(route: name, messages: 1, seconds: seconds)
            }
        }
    }

    enum LateAnswer {
        case answer(MediaNegotiation)
        /// The ACK came without a usable answer: why.
        case unusable(String)
        /// The caller hung up, the ACK never came, or serve is stopping.
        case gone
    }

    /// On a late offer, after the 200 with voicepipe's offer: waits for the ACK and negotiates its answer
    /// (the first of the route's codecs the answer has), repeating the 200 for a repeated INVITE.
    private func lateAnswer(_ iterator: inout AsyncStream<Input>.Iterator, ok: SIPMessage, cseq: UInt32) async -> LateAnswer {
        while let input = await iterator.next() {
            switch input {
            case .request(let m, let from):
                switch m.method ?? "" {
                case "ACK" where m.cseq?.number == cseq:
                    acknowledged()
                    guard !m.body.isEmpty else { return .unusable("the ACK has no SDP answer to voicepipe's offer") }
                    let type = m["Content-Type"]?.split(separator: ";").first?.trimmingCharacters(in: .whitespaces).lowercased()
                    guard type == "application/sdp" else { return .unusable("the ACK's body is \(type ?? "untyped"), not application/sdp") }
                    let answer: SessionDescription
                    do {
                        answer = try SessionDescription.parse(String(decoding: m.body, as: UTF8.self))
                    } catch {
                        return .unusable("the ACK's SDP answer is malformed: \(error.message)")
                    }
                    do {
                        return .answer(try MediaNegotiation.negotiate(offer: answer, preferences: options.codecs))
                    } catch {
                        return .unusable("the ACK's answer has \(error); voicepipe offered \(options.codecs.map(\.rawValue).joined(separator: ", "))")
                    }
                case "INVITE" where m.cseq?.number == cseq:
                    from.send(ok)
                case "BYE":
                    acknowledged()
                    respond(m, 200, to: from)
                    return .gone
                case "CANCEL":
                    respond(m, 200, to: from)
                case "OPTIONS":
                    from.send(endpoint.optionsAnswer(m))
                case "ACK":
                    continue
                default:
                    respond(m, 491, to: from)
                }
            case .ackTimeout:
                logger.info("route '\(route.name)': call \(callID): no ACK to the 200 with voicepipe's offer")
                return .gone
            case .drain:
                await hangUp(&iterator, reason: "server stopping")
                return .gone
            default:
                continue
            }
        }
        return .gone
    }

    /// After a final non-2xx response: repeat it over UDP until the ACK (or 32 s), answering retransmitted INVITEs.
    private func awaitACK(_ iterator: inout AsyncStream<Input>.Iterator, final: SIPMessage?, cseq: UInt32) async {
        guard let final else { return }
        if peer.reliable { return }
        var timer = SIPRetransmission()
        let started = ContinuousClock.now
        let alarm = SIPAlarm { [inbox] in inbox.yield(.timer) }
        defer { alarm.cancel() }
        alarm.set(at: started + .milliseconds(timer.t1Ms))
        while let input = await iterator.next() {
            switch input {
            case .request(let m, let from):
                if m.method == "ACK" { return }
                if m.method == "INVITE" && m.cseq?.number == cseq { from.send(final); continue }
                if m.method == "CANCEL" { respond(m, 200, to: from); continue }
                respond(m, 481, to: from)
            case .drain: return
            case .timer:
                guard let next = timer.due(now: .now, since: started, retransmit: { peer.send(final) }, giveUp: {}) else { return }
                alarm.set(at: next)
            default: continue
            }
        }
    }

    /// Repeats a 2xx over UDP until the ACK with its CSeq arrives; 32 s without it ends the call.
    private func startRetransmitting(_ response: SIPMessage, cseq: UInt32) {
        guard !peer.reliable else { return }
        pending.withLock { $0 = cseq }
        ackChanged.notify()
        Task { [self, pending] in
            var timer = SIPRetransmission()
            let sentAt = ContinuousClock.now
            let waiting: @Sendable () -> Bool = { pending.withLock { $0 == cseq } }
            while waiting() {
                var gaveUp = false
                guard let next = timer.due(now: .now, since: sentAt, retransmit: { if waiting() { peer.send(response) } }, giveUp: { gaveUp = true }) else {
                    // 32 s without the ACK: the call ends (unless the ACK or the call's end came meanwhile).
                    let unanswered = pending.withLock { p -> Bool in
                        guard gaveUp, p == cseq else { return false }
                        p = nil
                        return true
                    }
                    if unanswered { inbox.yield(.ackTimeout) }
                    return
                }
                // Until the next repetition, or the ACK (or the end of the call) at once.
                _ = await ackChanged.wait(until: next) { !waiting() }
            }
        }
    }

    /// voicepipe's BYE, repeated over UDP until answered (at most 8 s: the call is over either way).
    private func hangUp(_ iterator: inout AsyncStream<Input>.Iterator, reason: String = "call ended") async {
        var bye = SIPMessage(start: .request(method: "BYE", uri: SIPHeader.uri(invite["Contact"] ?? "") ?? SIPHeader.uri(invite["From"] ?? "") ?? "sip:caller"))
        let local = endpoint.localAddress(toward: peer)
        bye.add("Via", "SIP/2.0/\(peer.transport) \(local.contains(":") ? "[\(local)]" : local):\(endpoint.port);branch=z9hG4bK\(SIPHeader.token(16));rport")
        bye.add("Max-Forwards", "70")
        for r in invite.values("Record-Route") { bye.add("Route", r) }
        bye.add("From", (invite["To"] ?? "") + (SIPHeader.parameter(invite["To"] ?? "", "tag") == nil ? ";tag=\(toTag)" : ""))
        bye.add("To", invite["From"] ?? "")
        bye.add("Call-ID", callID)
        bye.add("CSeq", "1 BYE")
        bye.add("Reason", "SIP;cause=200;text=\"\(reason.replacingOccurrences(of: "\"", with: "'"))\"")
        peer.send(bye)
        var timer = SIPRetransmission(reliable: peer.reliable)
        let started = ContinuousClock.now
        let limit = started + .seconds(8)
        let alarm = SIPAlarm { [inbox] in inbox.yield(.timer) }
        defer { alarm.cancel() }
        alarm.set(at: min(limit, started + .milliseconds(peer.reliable ? 8000 : timer.t1Ms)))
        while let input = await iterator.next() {
            switch input {
            case .response(let r) where r.cseq?.method == "BYE":
                if let s = r.status, s >= 200 { return }
            case .request(let m, let from):
                if m.method == "BYE" { respond(m, 200, to: from); return }
                if m.method == "ACK" { continue }
                respond(m, 481, to: from)
            case .timer:
                let now = ContinuousClock.now
                if now >= limit { return }
                guard let next = timer.due(now: now, since: started, retransmit: { peer.send(bye) }, giveUp: {}) else { return }
                alarm.set(at: min(next, limit))
            default: continue
            }
        }
    }

    /// `.rtpTimeout` when the caller (who said it sends) sent nothing for `rtp_timeout_s`; `.maxDuration` at `max_duration_s`.
    private func watch() async {
        let limit = ContinuousClock.now + .seconds(route.maxDurationS)
        let rtpTimeout = options.rtpTimeoutS
        // Sleeps until the nearer of the call's limit and the moment the caller will have been silent for the
        // RTP timeout (looked up again after each wake: RTP that came meanwhile moves it on). Without an RTP
        // timeout, a sleep until the limit.
        while !Task.isCancelled {
            var until = limit
            if rtpTimeout > 0 {
                let timeout = Duration.seconds(rtpTimeout)
                // On hold (the caller sends nothing by agreement) the deadline is looked at again a timeout later.
                let silence = (media.withLock({ $0 })?.silenceDeadline(timeout) ?? .now + timeout) + .milliseconds(1)
                until = min(limit, silence)
            }
            try? await Task.sleep(until: until, clock: .continuous)
            if Task.isCancelled { return }
            if ContinuousClock.now >= limit { inbox.yield(.maxDuration); return }
            guard rtpTimeout > 0 else { continue }
            if media.withLock({ $0 })?.silent(for: .seconds(rtpTimeout)) == true { inbox.yield(.rtpTimeout); return }
        }
    }
}

extension SIPCall {
    /// The audio rate a codec is coded at on a call (Opus follows the graph: 48 kHz above 16 kHz).
    static func codecRate(_ codec: TelephoneCodec, graphRate: Int) -> Int {
        switch codec {
        case .pcmu, .pcma: 8000
        case .g722: 16000
        case .opus: graphRate > 16000 ? 48000 : 16000
        }
    }
}
