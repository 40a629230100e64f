import PipelineCore

/// What a `protocol: sip` route takes besides `port`, `graph` and the common limits.
struct SIPRouteOptions: Sendable {
    /// Codecs answered with, in preference order.
    var codecs: [TelephoneCodec] = [.pcmu, .pcma, .g722, .opus]
    /// A call whose caller sends no RTP for this long ends with a BYE (0: never).
    var rtpTimeoutS = 30
    /// How long the call rings (180) before it is answered: a caller may CANCEL meanwhile.
    var ringMs = 0
    /// The address written into SDP for RTP (behind NAT: the public one); else the address the call reached.
    var mediaAddress: String?
    /// Playout delay range of the jitter buffer, milliseconds.
    var jitterMinMs = 20
    var jitterMaxMs = 200

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
            problem(v, "register: registering with a SIP registrar is not supported yet; point the PBX or trunk at this route's port instead")
        default: break
        }
    }
}
