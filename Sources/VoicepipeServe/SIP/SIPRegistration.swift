import Foundation
import PipelineCore
import Logging
import NIOCore

/// A `sip` route's registration (`register:`): REGISTER from the route's UDP port to the registrar,
/// answered challenges (401/407, digest MD5), renewed at four fifths of the granted expiry, retried with
/// a growing pause (5 s doubling to 5 min) after a refusal or silence. The outcome is logged and counted
/// (`register_failed` in `/metrics`).
final class SIPRegistration: Sendable {
    let endpoint: SIPEndpoint
    let options: SIPRouteOptions.Registration
    let callID = "\(SIPHeader.token(16))@voicepipe"
    let tag = SIPHeader.token()
    private let inbox: AsyncStream<SIPMessage>.Continuation
    private let stream: AsyncStream<SIPMessage>

    init(endpoint: SIPEndpoint, options: SIPRouteOptions.Registration) {
        self.endpoint = endpoint
        self.options = options
        (stream, inbox) = AsyncStream.makeStream(of: SIPMessage.self)
    }

    func response(_ m: SIPMessage) { inbox.yield(m) }

    private var logger: Logger { endpoint.logger }
    private var routeName: String { endpoint.route.name }

    /// Registers until the task is cancelled.
    func run(channel: any Channel) async {
        guard let (host, port) = SIPHeader.hostPort(options.registrar),
              let registrar = try? SocketAddress.makeAddressResolvingHost(host, port: port ?? 5060) else {
            logger.warning("route '\(routeName)': cannot resolve the registrar \(options.registrar)")
            endpoint.server.metrics.error(route: routeName, code: "register_failed")
            return
        }
        let domain = options.domain ?? host
        let aor = "<sip:\(options.user)@\(domain)>"
        let local = SIPEndpoint.sourceAddress(toward: registrar.ipAddress ?? "127.0.0.1") ?? "127.0.0.1"
        let peer = SIPPeer(channel: channel, address: registrar, reliable: false)
        var cseq: UInt32 = 0
        var iterator = stream.makeAsyncIterator()
        var pause = 5
        while !Task.isCancelled {
            var challenge: (header: String, value: DigestChallenge)?
            var granted: Int?
            var refusal: String?
            attempts: for _ in 0..<2 {
                cseq += 1
                var m = SIPMessage(start: .request(method: "REGISTER", uri: "sip:\(domain)"))
                m.add("Via", "SIP/2.0/UDP \(local):\(endpoint.port);branch=z9hG4bK\(SIPHeader.token(16));rport")
                m.add("Max-Forwards", "70")
                m.add("From", "\(aor);tag=\(tag)")
                m.add("To", aor)
                m.add("Call-ID", callID)
                m.add("CSeq", "\(cseq) REGISTER")
                m.add("Contact", "<sip:\(options.user)@\(local):\(endpoint.port)>")
                m.add("Expires", "\(options.expiresS)")
                m.add("User-Agent", "voicepipe")
                if let challenge {
                    m.add(challenge.header, challenge.value.authorization(method: "REGISTER", uri: "sip:\(domain)", user: options.user,
                                                                         password: options.password, cnonce: SIPHeader.token(12)))
                }
                guard let r = await exchange(m, peer: peer, iterator: &iterator, cseq: cseq) else {
                    refusal = "no answer from \(options.registrar)"
                    break attempts
                }
                switch r.status ?? 0 {
                case 200..<300:
                    let contactExpires = r.values("Contact").compactMap { SIPHeader.parameter($0, "expires").flatMap(Int.init) }.first
                    granted = contactExpires ?? r["Expires"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? options.expiresS
                    break attempts
                case 401, 407:
                    guard challenge == nil else { refusal = "\(r.status ?? 0): the registrar refused the credentials of \(options.user)"; break attempts }
                    let header = r.status == 401 ? "WWW-Authenticate" : "Proxy-Authenticate"
                    do {
                        challenge = (r.status == 401 ? "Authorization" : "Proxy-Authorization", try DigestChallenge.parse(r[header] ?? ""))
                    } catch {
                        refusal = "\(r.status ?? 0) with a challenge voicepipe cannot answer: \(error)"
                        break attempts
                    }
                default:
                    if case .response(let status, let reason) = r.start { refusal = "\(status) \(reason)" }
                    break attempts
                }
            }
            if let granted {
                logger.info("route '\(routeName)': registered \(options.user)@\(domain) with \(options.registrar) for \(granted) s")
                pause = 5
                try? await Task.sleep(for: .seconds(max(1, granted * 4 / 5)))
            } else {
                endpoint.server.metrics.error(route: routeName, code: "register_failed")
                logger.warning("route '\(routeName)': registration with \(options.registrar) failed (\(refusal ?? "?")); again in \(pause) s")
                try? await Task.sleep(for: .seconds(pause))
                pause = min(pause * 2, 300)
            }
        }
    }

    /// Sends `m` (again at 0.5, 1, 2, 4 s) and waits up to 32 s for its final response.
    private func exchange(_ m: SIPMessage, peer: SIPPeer, iterator: inout AsyncStream<SIPMessage>.Iterator, cseq: UInt32) async -> SIPMessage? {
        peer.send(m)
        let done = ManagedFlag()
        let resend = Task {
            var timer = SIPRetransmission()
            let start = ContinuousClock.now
            while !Task.isCancelled && !done.value {
                try? await Task.sleep(for: .milliseconds(100))
                switch timer.poll(elapsedMs: Int((ContinuousClock.now - start) / .milliseconds(1))) {
                case .retransmit: if !done.value { peer.send(m) }
                case .giveUp: inbox.yield(SIPMessage(start: .response(status: 408, reason: "Request Timeout"), headers: [("CSeq", "\(cseq) REGISTER")]))
                    return
                default: continue
                }
            }
        }
        defer { done.set(); resend.cancel() }
        while let r = await iterator.next() {
            guard r.cseq?.number == cseq, let status = r.status else { continue }
            if status < 200 { done.set(); continue }
            return status == 408 && r.callID == nil ? nil : r
        }
        return nil
    }
}

/// A flag set once, read from another task.
final class ManagedFlag: Sendable {
    private let state = LockedValue(false)
    var value: Bool { state.withLock { $0 } }
    func set() { state.withLock { $0 = true } }
}
