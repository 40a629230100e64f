import PipelineCore

/// What a `protocol: sip` route takes besides `port`, `graph` and the common limits.
struct SIPRouteOptions: Sendable {
    /// Codecs answered with, in preference order.
    var codecs: [TelephoneCodec] = [.pcmu, .pcma, .g722, .opus]
    /// A call whose caller sends no RTP for this long ends with a BYE (0: never).
    var rtpTimeoutS = 30
    /// A TCP connection that carries no call and sends nothing for this long is closed.
    var tcpIdleS = 64
    /// How long the call rings (180) before it is answered: a caller may CANCEL meanwhile.
    var ringMs = 0
    /// The address written into SDP for RTP (behind NAT: the public one); else the address the call reached.
    var mediaAddress: String?
    /// Playout delay range of the jitter buffer, milliseconds.
    var jitterMinMs = 20
    var jitterMaxMs = 200
    /// Sit behind a registrar (a PBX or a SIP trunk): REGISTER with digest authentication, renewed before it expires.
    var register: Registration?

    struct Registration: Sendable {
        var registrar: String
        var user: String
        var password: String
        /// The domain of the address of record (default: the registrar's host).
        var domain: String?
        var expiresS = 3600
    }

    mutating func parse(key: String, value v: YAMLNode, problem: (YAMLNode, String) -> Void, int: (YAMLNode, String, ClosedRange<Int>) -> Int?) {
        switch key {
        case "codecs":
            guard let list = v.sequence, !list.isEmpty else { problem(v, "codecs: expected a list such as [pcmu, pcma, g722, opus]"); return }
            var out: [TelephoneCodec] = []
            for item in list {
                guard let c = item.string.flatMap({ TelephoneCodec(rawValue: $0.lowercased()) }) else {
                    problem(item, "codecs: '\(item.string ?? "a collection")' is not one of \(TelephoneCodec.allCases.map(\.rawValue).joined(separator: ", "))")
                    continue
                }
                if !out.contains(c) { out.append(c) }
            }
            if !out.isEmpty { codecs = out }
        case "rtp_timeout_s": rtpTimeoutS = int(v, "rtp_timeout_s", 0...3600) ?? rtpTimeoutS
        case "tcp_idle_s": tcpIdleS = int(v, "tcp_idle_s", 1...3600) ?? tcpIdleS
        case "ring_ms": ringMs = int(v, "ring_ms", 0...60_000) ?? ringMs
        case "media_address":
            guard let a = v.string, !a.isEmpty, !a.contains(" ") else { problem(v, "media_address: expected an IP address"); return }
            mediaAddress = a
        case "jitter_ms":
            guard let list = v.sequence, list.count == 2, let lo = int(list[0], "jitter_ms", 0...1000), let hi = int(list[1], "jitter_ms", 20...2000), lo <= hi else {
                problem(v, "jitter_ms: expected [MIN, MAX] in milliseconds, e.g. [20, 200]")
                return
            }
            jitterMinMs = lo
            jitterMaxMs = hi
        case "register":
            guard let m = v.mapping else { problem(v, "register: expected { registrar: \"sip:pbx.example:5060\", user: …, password: … }"); return }
            var r = Registration(registrar: "", user: "", password: "")
            for (k, value) in m {
                switch k.string ?? "" {
                case "registrar": r.registrar = value.string ?? ""
                case "user": r.user = value.string ?? ""
                case "password": r.password = value.string ?? ""
                case "domain": r.domain = value.string
                case "expires": r.expiresS = int(value, "register.expires", 60...86_400) ?? r.expiresS
                default: problem(k, "register: unknown key '\(k.string ?? "?")'; expected registrar, user, password, domain, expires")
                }
            }
            if !r.registrar.lowercased().hasPrefix("sip:") || SIPHeader.hostPort(r.registrar) == nil {
                problem(v, "register.registrar: expected a SIP URI such as sip:pbx.example:5060, got '\(r.registrar)'")
            }
            if r.user.isEmpty || r.user.contains(where: { " <>@:;\"".contains($0) }) { problem(v, "register.user: expected a user name (no spaces, <, >, @, :, ;)") }
            register = r
        default: break
        }
    }
}
