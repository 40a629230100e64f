import Foundation

/// One server to connect to.
public struct NATSServerAddress: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    /// Credentials written in the URL (`nats://user:password@host`, or `nats://token@host`).
    public var user: String?
    public var password: String?
    /// `tls://`: TLS from the start of the session (after the server's INFO, as NATS does).
    public var tls: Bool

    public init(host: String, port: Int = 4222, user: String? = nil, password: String? = nil, tls: Bool = false) {
        self.host = host; self.port = port; self.user = user; self.password = password; self.tls = tls
    }

    /// A server a cluster member named (`connect_urls`: `host:port`, IPv6 in brackets), reached like `template`
    /// (same TLS and URL credentials).
    public init?(discovered text: String, like template: NATSServerAddress) {
        var host = Substring(text), port = 4222
        if text.hasPrefix("[") {
            guard let close = text.firstIndex(of: "]") else { return nil }
            host = text[text.index(after: text.startIndex)..<close]
            let rest = text[text.index(after: close)...]
            if rest.hasPrefix(":") { guard let p = Int(rest.dropFirst()) else { return nil }; port = p }
        } else if let colon = text.lastIndex(of: ":") {
            host = text[..<colon]
            guard let p = Int(text[text.index(after: colon)...]) else { return nil }
            port = p
        }
        guard !host.isEmpty, (1...65535).contains(port) else { return nil }
        self.init(host: String(host), port: port, user: template.user, password: template.password, tls: template.tls)
    }

    /// Without credentials, for logs.
    public var description: String { "\(tls ? "tls" : "nats")://\(host.contains(":") ? "[\(host)]" : host):\(port)" }
}

/// How to reach NATS and who to be: servers (from a URL list), credentials, limits.
///
/// ```swift
/// var options = try NATSOptions(url: "nats://127.0.0.1:4222")
/// options.applyEnvironment(ProcessInfo.processInfo.environment)   // NATS_USER / NATS_PASSWORD / NATS_TOKEN
/// ```
public struct NATSOptions: Sendable {
    /// Servers, tried in order (and round again) until one accepts.
    public var servers: [NATSServerAddress]
    public var user: String?
    public var password: String?
    public var token: String?
    /// Client name shown by the server's monitoring (`connz`).
    public var name = "voicepipe"
    /// TCP connect + handshake limit per attempt.
    public var connectTimeout: Duration = .seconds(3)
    /// Interval of our keep-alive `PING`; the connection is closed after two unanswered ones.
    public var pingInterval: Duration = .seconds(10)
    /// TLS: the CA certificates (PEM) that sign the server's certificate, instead of the system's.
    public var tlsCAFile: String?
    /// TLS client certificate and key (PEM), for servers that verify clients.
    public var tlsCertFile: String?
    public var tlsKeyFile: String?
    /// NKEY authentication: a file holding a user seed (`SU…`; `NATS_NKEY`).
    public var nkeyFile: String?
    /// Operator (JWT) mode: a `.creds` file with the user JWT and its seed (`NATS_CREDS`); read at every
    /// connection, so rotated credentials are used from the next reconnect on.
    public var credsFile: String?

    /// Parses `nats://[user:password@]host[:port]` or `tls://…` (TLS), comma-separated for several servers.
    /// A `nats://` server that requires TLS (its INFO says so) gets TLS too.
    public init(url: String) throws {
        var servers: [NATSServerAddress] = []
        for part in url.split(separator: ",").map({ $0.trimmingCharacters(in: .whitespaces) }) where !part.isEmpty {
            var text = part
            var tls = false
            if let r = text.range(of: "://") {
                let scheme = text[..<r.lowerBound].lowercased()
                guard scheme == "nats" || scheme == "tls" else {
                    throw NATSError.badURL("\(part): scheme '\(scheme)' is not supported (use nats:// or tls://)")
                }
                tls = scheme == "tls"
                text = String(text[r.upperBound...])
            }
            while text.hasSuffix("/") { text.removeLast() }
            var user: String?, password: String?
            if let at = text.lastIndex(of: "@") {
                let cred = String(text[..<at])
                text = String(text[text.index(after: at)...])
                if let colon = cred.firstIndex(of: ":") {
                    user = String(cred[..<colon]).removingPercentEncoding
                    password = String(cred[cred.index(after: colon)...]).removingPercentEncoding
                } else {
                    user = cred.removingPercentEncoding
                }
            }
            var host = text, port = 4222
            if text.hasPrefix("[") {
                guard let close = text.firstIndex(of: "]") else { throw NATSError.badURL("\(part): unclosed '['") }
                host = String(text[text.index(after: text.startIndex)..<close])
                let rest = text[text.index(after: close)...]
                if rest.hasPrefix(":") {
                    guard let p = Int(rest.dropFirst()), (1...65535).contains(p) else { throw NATSError.badURL("\(part): bad port") }
                    port = p
                }
            } else if let colon = text.lastIndex(of: ":") {
                host = String(text[..<colon])
                guard let p = Int(text[text.index(after: colon)...]), (1...65535).contains(p) else { throw NATSError.badURL("\(part): bad port") }
                port = p
            }
            guard !host.isEmpty else { throw NATSError.badURL("\(part): no host") }
            servers.append(NATSServerAddress(host: host, port: port, user: user, password: password, tls: tls))
        }
        guard !servers.isEmpty else { throw NATSError.badURL("'\(url)': no server; expected nats://host:4222") }
        self.servers = servers
    }

    /// Credentials from the environment when the URL has none: `NATS_USER` + `NATS_PASSWORD`, `NATS_TOKEN`,
    /// `NATS_CREDS` (a `.creds` file: user JWT and seed) or `NATS_NKEY` (a user seed file); TLS files from
    /// `NATS_TLS_CA`, `NATS_TLS_CERT`, `NATS_TLS_KEY`.
    public mutating func applyEnvironment(_ env: [String: String]) {
        func value(_ k: String) -> String? { env[k].flatMap { $0.isEmpty ? nil : $0 } }
        if user == nil, let u = value("NATS_USER") { user = u; password = env["NATS_PASSWORD"] }
        if token == nil, let t = value("NATS_TOKEN") { token = t }
        tlsCAFile = tlsCAFile ?? value("NATS_TLS_CA")
        tlsCertFile = tlsCertFile ?? value("NATS_TLS_CERT")
        tlsKeyFile = tlsKeyFile ?? value("NATS_TLS_KEY")
        nkeyFile = nkeyFile ?? value("NATS_NKEY")
        credsFile = credsFile ?? value("NATS_CREDS")
    }

    /// Reads the `.creds` or seed file now, so that a missing, mismatched or expired one is reported at
    /// start rather than as a refused connection later.
    public func checkCredentials() throws {
        if let credsFile { _ = try NATSCredentials.fromFile(credsFile) }
        else if let nkeyFile { _ = try NKey.fromFile(nkeyFile) }
    }

    /// Whether a credential answers a server's nonce (operator mode or NKEY users).
    var signsNonce: Bool { credsFile != nil || nkeyFile != nil }

    /// The `CONNECT` fields for a server.
    func connectFields(for server: NATSServerAddress, info: NATSServerInfo) throws -> [String: Any] {
        var f: [String: Any] = [
            "verbose": false, "pedantic": false, "tls_required": server.tls || info.tlsRequired, "name": name, "lang": "swift",
            "version": "1.0", "protocol": 1, "headers": true, "no_responders": true, "echo": true,
        ]
        let u = server.user ?? user, p = server.password ?? password
        if let u, let p { f["user"] = u; f["pass"] = p }
        else if let u { f["auth_token"] = u }        // nats://token@host
        else if let token { f["auth_token"] = token }
        if let credsFile {
            let creds = try NATSCredentials.fromFile(credsFile)
            f["jwt"] = creds.jwt
            if let nonce = info.nonce { f["sig"] = try creds.key.sign(nonce: nonce) }
        } else if let nkeyFile {
            let key = try NKey.fromFile(nkeyFile)
            f["nkey"] = key.publicKey
            if let nonce = info.nonce { f["sig"] = try key.sign(nonce: nonce) }
        }
        return f
    }
}

/// Errors of the NATS client, each saying what to do.
public enum NATSError: Error, Sendable, CustomStringConvertible {
    case badURL(String)
    /// An NKEY seed or `.creds` file that cannot be used.
    case credentials(String)
    /// The spool directory cannot be used.
    case spool(String)
    case connectFailed(NATSServerAddress, String)
    case handshake(NATSServerAddress, String)
    case closed(String)
    case timeout(String)
    case noResponders(String)
    case jetStream(code: Int, errCode: Int, description: String)

    public var description: String {
        switch self {
        case .badURL(let m): "NATS URL: \(m)"
        case .credentials(let m): "NATS \(m)"
        case .spool(let m): "NATS spool: \(m)"
        case .connectFailed(let s, let m): "cannot connect to NATS at \(s): \(m)"
        case .handshake(let s, let m): "NATS at \(s) refused the connection: \(m)"
        case .closed(let m): "NATS connection closed: \(m)"
        case .timeout(let m): "NATS: no answer in time (\(m))"
        case .noResponders(let subject): "NATS: nothing answers on \(subject)"
        case .jetStream(let code, let errCode, let d): "JetStream error \(code)/\(errCode): \(d)"
        }
    }
}
