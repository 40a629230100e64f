import Foundation

/// A user's credentials for a NATS server in operator (decentralized JWT) mode: the user JWT that an
/// account signed, and the user's NKEY seed, as a `.creds` file holds them (`nsc` and NATS tooling write
/// these files):
///
/// ```text
/// -----BEGIN NATS USER JWT-----
/// eyJ0eXAiOiJKV1QiLCJhbGciOiJlZDI1NTE5LW5rZXkifQ.eyJ…
/// ------END NATS USER JWT------
///
/// -----BEGIN USER NKEY SEED-----
/// SUAM…
/// ------END USER NKEY SEED------
/// ```
///
/// In `CONNECT` the client sends the JWT (`jwt`) and the server's nonce signed with the seed (`sig`).
/// The file is read at every connection, so credentials rotated on disk (a re-mounted Kubernetes Secret)
/// are picked up at the next reconnect. Reading checks what a server would otherwise refuse with a bare
/// "Authorization Violation": the seed must belong to the JWT's user, and the JWT must not have expired.
public struct NATSCredentials: Sendable {
    /// The user JWT, as sent.
    public let jwt: String
    /// The user's key (signs the nonce).
    public let key: NKey
    /// The JWT's `name`, if any (for messages).
    public let name: String?
    /// When the JWT stops being valid (`exp`), if it says.
    public let expires: Date?

    /// Parses the text of a `.creds` file; `source` names it in errors.
    public init(text: String, source: String = ".creds", now: Date = Date()) throws {
        func fail(_ m: String) -> NATSError { .credentials("credentials \(source): \(m)") }
        let lines = text.split(whereSeparator: \.isNewline).map { $0.trimmingCharacters(in: .whitespaces) }
        /// The first line of content after a `-----BEGIN …<what>…-----` line.
        func block(_ what: String) -> String? {
            guard let begin = lines.firstIndex(where: { $0.hasPrefix("---") && $0.contains("BEGIN") && $0.contains(what) }) else { return nil }
            return lines[(begin + 1)...].prefix { !$0.hasPrefix("---") }.first { !$0.isEmpty }
        }
        guard let jwt = block("JWT") else {
            throw fail("no user JWT (a '-----BEGIN NATS USER JWT-----' block); is this a .creds file?")
        }
        guard let seed = block("SEED") else {
            throw fail("no NKEY seed (a '-----BEGIN USER NKEY SEED-----' block)")
        }
        let key: NKey
        do { key = try NKey(seed: seed) } catch { throw fail("\(error)") }

        let parts = jwt.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 3, let body = Base64URL.decode(parts[1]),
              let claims = (try? JSONSerialization.jsonObject(with: Data(body))) as? [String: Any] else {
            throw fail("the user JWT is not a JWT (three base64url parts, the middle one JSON)")
        }
        let nats = claims["nats"] as? [String: Any]
        let type = (nats?["type"] as? String) ?? (claims["type"] as? String)
        guard type == "user" else {
            throw fail("the JWT is a\(type == "account" || type == "operator" ? "n" : "") \(type ?? "untyped") JWT, not a user's")
        }
        guard let subject = claims["sub"] as? String, subject == key.publicKey else {
            throw fail("the seed is not the key of the JWT's user (JWT subject \(claims["sub"] as? String ?? "missing"), seed's public key \(key.publicKey))")
        }
        let exp = (claims["exp"] as? NSNumber)?.doubleValue ?? 0
        let expires = exp > 0 ? Date(timeIntervalSince1970: exp) : nil
        if let expires, expires < now {
            throw fail("the user JWT expired at \(ISO8601DateFormatter().string(from: expires)); ask the account's operator for new credentials")
        }
        self.jwt = jwt
        self.key = key
        self.name = claims["name"] as? String
        self.expires = expires
    }

    /// Reads a `.creds` file.
    public static func fromFile(_ path: String) throws -> NATSCredentials {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw NATSError.credentials("credentials \(path): cannot read it")
        }
        return try NATSCredentials(text: text, source: path)
    }
}
