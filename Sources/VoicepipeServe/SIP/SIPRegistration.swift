import Foundation
import PipelineCore
import Logging
import NIOCore

/// A registration with a registrar (RFC 3261 §10): REGISTER from one signalling socket or connection,
/// a challenge (401/407, digest MD5) answered, the granted expiry read; unregistering (Expires: 0) the same
/// way. Used by a `sip` route's `register:` (``run(onFailure:)``: renewed at four fifths of the granted
/// expiry, retried with a growing pause, 5 s doubling to 5 min, after a refusal or silence) and by
/// `voicepipe call --registrar` (``register(expires:)`` around the call).
///
/// Responses reach it through ``response(_:)`` (the owner of the socket dispatches them by ``callID``); a
/// REGISTER waits for its final response on a ``ChangeSignal``, repeated over UDP at the RFC 3261 timer
/// deadlines (never over TCP), for at most 32 s.
final class SIPRegistration: Sendable {
    let options: SIPRouteOptions.Registration
    /// Who answers a challenge (default: the registration's user).
    let authUser: String
    let callID = "\(SIPHeader.token(16))@voicepipe"
    let tag = SIPHeader.token()
    let local: String
    let localPort: Int
    let reliable: Bool
    let logger: Logger
    /// What log lines start with (`route 'phone': `).
    let label: String
    private let send: @Sendable (SIPMessage) -> Void
    private let received = LockedValue<[SIPMessage]>([])
    private let changed = ChangeSignal()
    private let cseq = LockedValue<UInt32>(0)

    enum Outcome: Sendable, Equatable {
        /// Registered for this many seconds (0: unregistered).
        case registered(seconds: Int)
        /// Why not, in words (`403 Forbidden after the credentials of alice`, `no answer from sip:…`).
        case refused(String)
    }

    /// `send` delivers a REGISTER to the registrar over the socket or connection whose address is
    /// `local`:`localPort` (named in Via and Contact).
    init(options: SIPRouteOptions.Registration, authUser: String? = nil, local: String, localPort: Int, reliable: Bool,
         logger: Logger, label: String, send: @escaping @Sendable (SIPMessage) -> Void) {
        self.options = options
        self.authUser = authUser ?? options.user
        self.local = local
        self.localPort = localPort
        self.reliable = reliable
        self.logger = logger
        self.label = label
        self.send = send
    }

    /// A response to one of the registration's REGISTERs.
    func response(_ m: SIPMessage) {
        guard m.status != nil else { return }
        received.withLock { $0.append(m) }
        changed.notify()
    }

    var domain: String { options.domain ?? SIPHeader.hostPort(options.registrar)?.host ?? "invalid" }
    var addressOfRecord: String { "sip:\(options.user)@\(domain)" }

    /// Registers (`expires` seconds; 0 unregisters) with the challenge answered once; the registrar's
    /// granted expiry, or why not.
    func register(expires: Int? = nil) async -> Outcome {
        let expires = expires ?? options.expiresS
        let aor = "<\(addressOfRecord)>"
        let host = local.contains(":") ? "[\(local)]" : local
        var challenge: (header: String, value: DigestChallenge)?
        for _ in 0..<2 {
            let number = cseq.withLock { c -> UInt32 in c += 1; return c }
            var m = SIPMessage(start: .request(method: "REGISTER", uri: "sip:\(domain)"))
            m.add("Via", "SIP/2.0/\(reliable ? "TCP" : "UDP") \(host):\(localPort);branch=z9hG4bK\(SIPHeader.token(16));rport")
            m.add("Max-Forwards", "70")
            m.add("From", "\(aor);tag=\(tag)")
            m.add("To", aor)
            m.add("Call-ID", callID)
            m.add("CSeq", "\(number) REGISTER")
            m.add("Contact", "<sip:\(options.user)@\(host):\(localPort)\(reliable ? ";transport=tcp" : "")>")
            m.add("Expires", "\(expires)")
            m.add("User-Agent", "voicepipe")
            if let challenge {
                m.add(challenge.header, challenge.value.authorization(method: "REGISTER", uri: "sip:\(domain)", user: authUser,
                                                                     password: options.password, cnonce: SIPHeader.token(12)))
            }
            guard let r = await exchange(m, cseq: number) else { return .refused("no answer from \(options.registrar) in 32 s") }
            let status = r.status ?? 0
            let words: String = switch r.start {
            case .response(let s, let reason): "\(s) \(reason)"
            default: "\(status)"
            }
            switch status {
            case 200..<300:
                if expires == 0 { return .registered(seconds: 0) }
                // The expiry granted to our Contact, else the Expires field, else what was asked.
                let contactExpires = r.values("Contact").compactMap { SIPHeader.parameter($0, "expires").flatMap(Int.init) }.first
                return .registered(seconds: contactExpires ?? r["Expires"].flatMap { Int($0.trimmingCharacters(in: .whitespaces)) } ?? expires)
            case 401 where challenge == nil, 407 where challenge == nil:
                if options.password.isEmpty { return .refused("\(words): the registrar asks for credentials and no password was given") }
                let header = status == 401 ? "WWW-Authenticate" : "Proxy-Authenticate"
                do {
                    challenge = (status == 401 ? "Authorization" : "Proxy-Authorization", try DigestChallenge.parse(r[header] ?? ""))
                } catch {
                    return .refused("\(words) with a challenge voicepipe cannot answer: \(error)")
                }
            case 401, 403, 407:
                return .refused(challenge == nil ? words : "\(words) after the credentials of \(authUser)")
            default:
                return .refused(words)
            }
        }
        return .refused("challenged twice")
    }

    /// A route's registration: kept up until the task is cancelled; `onFailure` runs for each failed attempt.
    func run(onFailure: @Sendable () -> Void) async {
        var pause = 5
        while !Task.isCancelled {
            switch await register() {
            case .registered(let granted):
                logger.info("\(label)registered \(options.user)@\(domain) with \(options.registrar) for \(granted) s")
                pause = 5
                try? await Task.sleep(for: .seconds(max(1, granted * 4 / 5)))
            case .refused(let why):
                if Task.isCancelled { return }
                onFailure()
                logger.warning("\(label)registration with \(options.registrar) failed (\(why)); again in \(pause) s")
                try? await Task.sleep(for: .seconds(pause))
                pause = min(pause * 2, 300)
            }
        }
    }

    /// Sends `m` (again over UDP at 0.5, 1, 2, 4 s… until a provisional response) and waits up to 32 s for
    /// its final response.
    private func exchange(_ m: SIPMessage, cseq: UInt32) async -> SIPMessage? {
        received.withLock { $0.removeAll() }
        send(m)
        var timer = SIPRetransmission(reliable: reliable)
        let start = ContinuousClock.now
        var proceeding = false
        while !Task.isCancelled {
            var gaveUp = false
            guard let next = timer.due(now: .now, since: start, retransmit: { if !proceeding { send(m) } }, giveUp: { gaveUp = true }), !gaveUp else { return nil }
            let mine: @Sendable (SIPMessage) -> Bool = { $0.cseq?.number == cseq && $0.cseq?.method == "REGISTER" }
            _ = await changed.wait(until: next) { [received] in received.withLock { $0.contains(where: mine) } }
            let responses = received.withLock { r -> [SIPMessage] in
                defer { r.removeAll() }
                return r.filter(mine)
            }
            if let final = responses.first(where: { ($0.status ?? 0) >= 200 }) { return final }
            if !responses.isEmpty { proceeding = true }
        }
        return nil
    }
}
