import Crypto
import Foundation
import Logging
import NATSClient
import Testing

/// Issues the JWTs of NATS operator mode as NATS tooling does (header `{"typ":"JWT","alg":"ed25519-nkey"}`,
/// claims with a `nats` section of the right type, Ed25519 over `header.claims` by the issuer's key), so that
/// the tests can set up a server in operator mode without an `nsc` installation.
enum OperatorModeJWT {
    static func base64url(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func issue(by issuer: NKey, subject: String, name: String, nats: [String: Any], expires: Date? = nil) throws -> String {
        var claims: [String: Any] = ["iss": issuer.publicKey, "sub": subject, "name": name, "nats": nats,
                                     "iat": Int(Date().timeIntervalSince1970)]
        if let expires { claims["exp"] = Int(expires.timeIntervalSince1970) }
        let body = try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])
        claims["jti"] = Data(SHA256.hash(data: body)).base64EncodedString().prefix(43)
        let header = base64url(Array(#"{"typ":"JWT","alg":"ed25519-nkey"}"#.utf8))
        let payload = base64url(Array(try JSONSerialization.data(withJSONObject: claims, options: [.sortedKeys])))
        let signature = try issuer.sign(Array("\(header).\(payload)".utf8))
        return "\(header).\(payload).\(base64url(signature))"
    }

    static func `operator`(_ key: NKey) throws -> String {
        try issue(by: key, subject: key.publicKey, name: "voicepipe-test", nats: ["type": "operator", "version": 2])
    }

    /// An account with unlimited connections, and JetStream unless it is the system account.
    static func account(_ key: NKey, by op: NKey, name: String = "VOICEPIPE", jetStream: Bool = true) throws -> String {
        var limits: [String: Any] = ["subs": -1, "data": -1, "payload": -1, "imports": -1, "exports": -1, "wildcards": true,
                                     "conn": -1, "leaf": -1]
        if jetStream { limits.merge(["mem_storage": -1, "disk_storage": -1, "streams": -1, "consumer": -1]) { $1 } }
        return try issue(by: op, subject: key.publicKey, name: name,
                         nats: ["limits": limits, "default_permissions": ["pub": [:], "sub": [:]], "type": "account", "version": 2])
    }

    static func user(_ key: NKey, by account: NKey, expires: Date? = nil) throws -> String {
        try issue(by: account, subject: key.publicKey, name: "worker",
                  nats: ["pub": [:], "sub": [:], "subs": -1, "data": -1, "payload": -1, "type": "user", "version": 2], expires: expires)
    }

    static func creds(jwt: String, seed: String) -> String {
        """
        -----BEGIN NATS USER JWT-----
        \(jwt)
        ------END NATS USER JWT------

        ************************* IMPORTANT *************************
        NKEY Seed printed below can be used to sign and prove identity.

        -----BEGIN USER NKEY SEED-----
        \(seed)
        ------END USER NKEY SEED------
        """
    }
}

/// Operator (decentralized JWT) mode: nats-server trusts an operator, knows one account from a memory
/// resolver, and accepts users whose JWT that account signed and who sign its nonce with their seed.
@Suite("NATS client in operator mode (.creds)", .serialized)
struct NATSOperatorModeTests {
    let op = NKey.generate(.operator)
    let account = NKey.generate(.account)
    let system = NKey.generate(.account)
    let dir = NSTemporaryDirectory() + "vp-creds-\(UUID().uuidString.prefix(8))"

    func server() async throws -> NATSServerProcess {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let config = dir + "/server.conf"
        try """
        operator: "\(try OperatorModeJWT.operator(op))"
        system_account: \(system.publicKey)
        resolver: MEMORY
        resolver_preload: {
          \(account.publicKey): "\(try OperatorModeJWT.account(account, by: op))"
          \(system.publicKey): "\(try OperatorModeJWT.account(system, by: op, name: "SYS", jetStream: false))"
        }

        """.write(toFile: config, atomically: true, encoding: .utf8)
        let s = try NATSServerProcess(arguments: ["-c", config])
        try await s.start()
        return s
    }

    func credsFile(_ name: String, jwt: String, seed: String) throws -> String {
        let path = dir + "/\(name).creds"
        try OperatorModeJWT.creds(jwt: jwt, seed: seed).write(toFile: path, atomically: true, encoding: .utf8)
        return path
    }

    @Test func aUserOfTheAccountConnectsAndPublishesIntoJetStream() async throws {
        let server = try await server()
        let user = NKey.generateUser()
        let path = try credsFile("worker", jwt: try OperatorModeJWT.user(user, by: account), seed: user.seed)

        var options = try NATSOptions(url: server.url)
        options.applyEnvironment(["NATS_CREDS": path])
        try options.checkCredentials()
        var c = JetStreamPublisher.Configuration(options: options, stream: "VPCREDS", streamSubjects: ["vp.>"])
        c.ackTimeout = .seconds(1)
        let publisher = JetStreamPublisher(configuration: c, logger: Logger(label: "test.nats.creds"))
        let loop = Task { await publisher.run() }
        for i in 0..<100 { publisher.publish(subject: "vp.creds.\(i % 2)", payload: Array("{\"i\":\(i)}".utf8)) }
        let stats = await publisher.close(timeout: .seconds(10))
        await loop.value
        #expect(stats.acknowledged == 100 && stats.held == 0 && stats.dropped == 0, "\(stats) \(publisher.lastError.map { "\($0)" } ?? "")")

        // What the account's stream holds, asked over the same kind of connection.
        let conn = try await NATSConnection.connect(options: options)
        defer { conn.close() }
        let info = try await conn.request("$JS.API.STREAM.INFO.VPCREDS", payload: [], timeout: .seconds(2))
        let json = try #require(try JSONSerialization.jsonObject(with: Data(info.payload)) as? [String: Any])
        #expect((json["state"] as? [String: Any])?["messages"] as? Int == 100, "\(json)")
    }

    @Test func badCredentialsAreNamedBeforeOrByTheServer() async throws {
        let server = try await server()
        let user = NKey.generateUser()
        let jwt = try OperatorModeJWT.user(user, by: account)

        // No credentials at all: told what to set.
        do {
            _ = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
            Issue.record("connected without credentials")
        } catch let e as NATSError {
            #expect("\(e)".contains("NATS_CREDS"), "\(e)")
        }

        // The seed of another user next to this user's JWT: caught when the file is read, key named.
        let other = NKey.generateUser()
        var mismatched = try NATSOptions(url: server.url)
        mismatched.credsFile = try credsFile("mismatched", jwt: jwt, seed: other.seed)
        #expect { try mismatched.checkCredentials() } throws: { "\($0)".contains("not the key of the JWT's user") && "\($0)".contains(other.publicKey) }

        // An expired JWT: its date and what to do.
        let expired = try OperatorModeJWT.user(user, by: account, expires: Date().addingTimeInterval(-60))
        var old = try NATSOptions(url: server.url)
        old.credsFile = try credsFile("expired", jwt: expired, seed: user.seed)
        #expect { try old.checkCredentials() } throws: { "\($0)".contains("expired at") && "\($0)".contains("new credentials") }

        // A user signed by an account this server does not know: refused by the server.
        let stranger = NKey.generate(.account)
        var unknown = try NATSOptions(url: server.url)
        unknown.credsFile = try credsFile("unknown", jwt: try OperatorModeJWT.user(user, by: stranger), seed: user.seed)
        try unknown.checkCredentials()      // well-formed: only the server can tell
        do {
            _ = try await NATSConnection.connect(options: unknown)
            Issue.record("a user of an unknown account was accepted")
        } catch let e as NATSError {
            #expect("\(e)".lowercased().contains("authorization"), "\(e)")
            #expect(!"\(e)".contains(user.seed), "the seed must not appear in errors")
        }
    }

    @Test func malformedCredsFilesAreExplained() throws {
        let user = NKey.generateUser()
        let jwt = try OperatorModeJWT.user(user, by: account)
        #expect { try NATSCredentials(text: user.seed) } throws: { "\($0)".contains("no user JWT") }
        #expect { try NATSCredentials(text: "-----BEGIN NATS USER JWT-----\n\(jwt)\n------END NATS USER JWT------\n") } throws: {
            "\($0)".contains("no NKEY seed")
        }
        #expect { try NATSCredentials(text: OperatorModeJWT.creds(jwt: "not.a-jwt", seed: user.seed)) } throws: { "\($0)".contains("not a JWT") }
        let accountJWT = try OperatorModeJWT.account(account, by: op)
        #expect { try NATSCredentials(text: OperatorModeJWT.creds(jwt: accountJWT, seed: user.seed)) } throws: {
            "\($0)".contains("an account JWT, not a user's")
        }
        let good = try NATSCredentials(text: OperatorModeJWT.creds(jwt: jwt, seed: user.seed))
        #expect(good.jwt == jwt && good.key.publicKey == user.publicKey && good.name == "worker" && good.expires == nil)
        #expect { try NATSCredentials.fromFile("/nonexistent/user.creds") } throws: { "\($0)".contains("/nonexistent/user.creds") }
    }
}
