import Crypto
import Foundation

/// HTTP digest authentication as SIP uses it (RFC 2617, RFC 8760's MD5): a registrar's or proxy's
/// challenge (`WWW-Authenticate` / `Proxy-Authenticate`) and the `Authorization` answering it. Pure.
struct DigestChallenge: Sendable, Equatable {
    var realm: String
    var nonce: String
    var opaque: String?
    /// `auth` when the challenge offers it (qop-less RFC 2069 answers otherwise).
    var qop: String?
    var algorithm: String

    struct Problem: Error, Sendable, CustomStringConvertible {
        var description: String
    }

    /// Reads `Digest realm="…", nonce="…", qop="auth,auth-int", algorithm=MD5, opaque="…"`.
    static func parse(_ header: String) throws(Problem) -> DigestChallenge {
        let trimmed = header.trimmingCharacters(in: .whitespaces)
        guard trimmed.lowercased().hasPrefix("digest ") else { throw Problem(description: "not a Digest challenge: '\(header.prefix(40))'") }
        var fields: [String: String] = [:]
        for part in SIPHeader.splitList(String(trimmed.dropFirst(7))) {
            guard let eq = part.firstIndex(of: "=") else { continue }
            let key = part[..<eq].trimmingCharacters(in: .whitespaces).lowercased()
            var value = part[part.index(after: eq)...].trimmingCharacters(in: .whitespaces)
            if value.hasPrefix("\""), value.hasSuffix("\""), value.count >= 2 { value = String(value.dropFirst().dropLast()) }
            fields[key] = value
        }
        guard let realm = fields["realm"], let nonce = fields["nonce"] else { throw Problem(description: "a Digest challenge without realm or nonce") }
        let algorithm = fields["algorithm"] ?? "MD5"
        guard algorithm.uppercased() == "MD5" else { throw Problem(description: "digest algorithm \(algorithm) is not supported (MD5 is)") }
        let qops = (fields["qop"] ?? "").split(separator: ",").map { $0.trimmingCharacters(in: .whitespaces).lowercased() }
        if fields["qop"] != nil && !qops.contains("auth") { throw Problem(description: "digest qop \(fields["qop"] ?? "") is not supported (auth is)") }
        return DigestChallenge(realm: realm, nonce: nonce, opaque: fields["opaque"], qop: qops.contains("auth") ? "auth" : nil, algorithm: algorithm)
    }

    static func md5(_ text: String) -> String {
        Insecure.MD5.hash(data: Data(text.utf8)).map { String(format: "%02x", $0) }.joined()
    }

    /// The `Authorization` (or `Proxy-Authorization`) value for one request.
    func authorization(method: String, uri: String, user: String, password: String, cnonce: String, nc: Int = 1) -> String {
        let ha1 = Self.md5("\(user):\(realm):\(password)")
        let ha2 = Self.md5("\(method):\(uri)")
        let count = String(format: "%08x", nc)
        let response = qop == nil ? Self.md5("\(ha1):\(nonce):\(ha2)") : Self.md5("\(ha1):\(nonce):\(count):\(cnonce):auth:\(ha2)")
        var v = "Digest username=\"\(user)\", realm=\"\(realm)\", nonce=\"\(nonce)\", uri=\"\(uri)\", response=\"\(response)\", algorithm=MD5"
        if qop != nil { v += ", qop=auth, nc=\(count), cnonce=\"\(cnonce)\"" }
        if let opaque { v += ", opaque=\"\(opaque)\"" }
        return v
    }
}
