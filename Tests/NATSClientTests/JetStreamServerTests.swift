import Foundation
import Logging
import NATSClient
import Synchronization
import Testing

/// Against Debian's `nats-server` with JetStream: handshake, authentication, publish/subscribe with
/// headers, and the publisher's promise — everything acknowledged is stored once, across a server
/// that is absent at first, killed with SIGKILL mid-stream and started again.
@Suite("NATS client against nats-server", .serialized)
struct JetStreamServerTests {
    static let logger = Logger(label: "test.nats")

    func publisher(_ url: String, stream: String = "VPTEST", capacity: Int = 10_000, ackTimeout: Duration = .seconds(1)) throws -> JetStreamPublisher {
        var c = JetStreamPublisher.Configuration(options: try NATSOptions(url: url), stream: stream, streamSubjects: ["vp.>"])
        c.capacity = capacity
        c.ackTimeout = ackTimeout
        return JetStreamPublisher(configuration: c, logger: Self.logger)
    }

    @Test func handshakeRequestAndHeadersRoundTrip() async throws {
        let server = try NATSServerProcess()
        try await server.start()
        let c = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
        defer { c.close() }
        #expect(c.info.jetStream && c.info.headers)
        let received = Mutex<[NATSMessage]>([])
        c.subscribe("t.>") { m in received.withLock { $0.append(m) } }
        c.publish("t.a", headers: [("Nats-Msg-Id", "abc"), ("X-Two", "2")], payload: Array("payload".utf8))
        c.publish("t.b", payload: [])
        try await c.roundTrip(timeout: .seconds(2))
        try await Task.sleep(for: .milliseconds(100))
        let got = received.withLock { $0 }
        #expect(got.count == 2)
        #expect(got.first?.subject == "t.a" && got.first?.header("nats-msg-id") == "abc" && got.first?.header("X-Two") == "2")
        #expect(got.first.map { String(decoding: $0.payload, as: UTF8.self) } == "payload")
        #expect(got.last?.subject == "t.b" && got.last?.payload.isEmpty == true)
        // JetStream API request/reply; and nobody on a subject → noResponders, not a hang.
        let info = try await c.request("$JS.API.INFO", payload: [], timeout: .seconds(2))
        #expect(String(decoding: info.payload, as: UTF8.self).contains("\"memory\""))
        await #expect(throws: NATSError.self) { try await c.request("nobody.here", payload: [], timeout: .seconds(2)) }
    }

    @Test func credentialsAreCheckedAndComeFromTheEnvironment() async throws {
        let server = try NATSServerProcess(arguments: ["--user", "vp", "--pass", "s3cret"])
        try await server.start()
        do {
            _ = try await NATSConnection.connect(options: try NATSOptions(url: "nats://vp:wrong@127.0.0.1:\(server.port)"))
            Issue.record("a wrong password was accepted")
        } catch let e as NATSError {
            #expect("\(e)".lowercased().contains("authorization"), "\(e)")
            #expect(!"\(e)".contains("wrong"), "the password must not appear in the error")
        }
        var options = try NATSOptions(url: server.url)
        options.applyEnvironment(["NATS_USER": "vp", "NATS_PASSWORD": "s3cret"])
        let c = try await NATSConnection.connect(options: options)
        try await c.roundTrip(timeout: .seconds(2))
        c.close()
    }

    @Test func unreachableServerIsAClearError() async throws {
        let port = try NATSServerProcess.freePort()
        do {
            _ = try await NATSConnection.connect(options: try NATSOptions(url: "nats://127.0.0.1:\(port)"))
            Issue.record("connected to nothing")
        } catch let e as NATSError {
            #expect("\(e)".contains("127.0.0.1:\(port)") && "\(e)".contains("refused"), "\(e)")
        }
    }

    @Test func everyMessageIsStoredOnceAndInOrder() async throws {
        let server = try NATSServerProcess()
        try await server.start()
        let p = try publisher(server.url)
        let loop = Task { await p.run() }
        for i in 0..<500 { p.publish(subject: "vp.a.\(i % 3)", payload: Array("{\"i\":\(i)}".utf8)) }
        let stats = await p.close(timeout: .seconds(10))
        await loop.value
        #expect(stats.acknowledged == 500 && stats.held == 0 && stats.dropped == 0 && stats.rejected == 0)
        let c = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
        defer { c.close() }
        let reader = StreamReader(connection: c, stream: "VPTEST")
        let all = try await reader.all()
        #expect(all.count == 500)
        #expect(all.map(\.payload) == (0..<500).map { "{\"i\":\($0)}" })
        #expect(all.map(\.subject) == (0..<500).map { "vp.a.\($0 % 3)" })
    }

    @Test func heldWhileTheServerIsAwayThenSentAndNothingLostAcrossACrash() async throws {
        let server = try NATSServerProcess()
        // The server is not running yet: events are held.
        let p = try publisher(server.url, ackTimeout: .milliseconds(500))
        let loop = Task { await p.run() }
        for i in 0..<50 { p.publish(subject: "vp.held", payload: Array("\(i)".utf8)) }
        try await Task.sleep(for: .milliseconds(400))
        #expect(p.statistics.held == 50 && p.statistics.acknowledged == 0)
        try await server.start()
        #expect(await p.flush(timeout: .seconds(10)))
        #expect(p.statistics.acknowledged == 50)
        // A steady stream; the server is killed (no goodbye) and restarted on the same store meanwhile.
        let producer = Task {
            for i in 50..<2050 {
                p.publish(subject: "vp.live", payload: Array("\(i)".utf8))
                if i % 20 == 0 { try? await Task.sleep(for: .milliseconds(5)) }
            }
        }
        try await Task.sleep(for: .milliseconds(150))
        server.kill()
        try await Task.sleep(for: .milliseconds(700))
        try await server.start()
        await producer.value
        let stats = await p.close(timeout: .seconds(20))
        await loop.value
        #expect(stats.held == 0 && stats.dropped == 0, "\(stats)")
        #expect(stats.disconnects >= 1 && stats.connects >= 2, "\(stats)")
        let c = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
        defer { c.close() }
        let all = try await StreamReader(connection: c, stream: "VPTEST").all()
        let values = all.map { Int($0.payload) ?? -1 }
        // Each exactly once: resends after the crash were recognised as duplicates by Nats-Msg-Id.
        #expect(values.count == 2050, "stored \(values.count), resent \(stats.resent)")
        #expect(Set(values) == Set(0..<2050))
    }

    @Test func aFullBufferDropsTheOldestAndSaysHowMany() async throws {
        let server = try NATSServerProcess()
        let p = try publisher(server.url, capacity: 10)
        let loop = Task { await p.run() }
        for i in 0..<25 { p.publish(subject: "vp.x", payload: Array("\(i)".utf8)) }
        #expect(p.statistics.dropped == 15 && p.statistics.held == 10)
        try await server.start()
        let stats = await p.close(timeout: .seconds(10))
        await loop.value
        #expect(stats.acknowledged == 10 && stats.dropped == 15)
        let c = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
        defer { c.close() }
        let all = try await StreamReader(connection: c, stream: "VPTEST").all()
        #expect(all.map(\.payload) == (15..<25).map(String.init))
    }

    @Test func aServerWithoutJetStreamIsReportedAndEventsAreHeld() async throws {
        let port = try NATSServerProcess.freePort()
        let plain = Process()
        plain.executableURL = URL(fileURLWithPath: NATSServerProcess.binary)
        plain.arguments = ["-a", "127.0.0.1", "-p", "\(port)"]
        plain.standardOutput = FileHandle.nullDevice
        plain.standardError = FileHandle.nullDevice
        try plain.run()
        defer { plain.terminate(); plain.waitUntilExit() }
        for _ in 0..<100 where !NATSServerProcess.accepts(port: port) { try await Task.sleep(for: .milliseconds(50)) }
        let p = try publisher("nats://127.0.0.1:\(port)")
        let loop = Task { await p.run() }
        p.publish(subject: "vp.y", payload: [1])
        try await Task.sleep(for: .milliseconds(500))
        #expect(p.lastError?.contains("JetStream") == true, "\(p.lastError ?? "nil")")
        let stats = await p.close(timeout: .milliseconds(100))
        await loop.value
        #expect(stats.held == 1 && stats.acknowledged == 0)
    }
}

/// TLS to nats-server (`--tls`): `tls://`, a `nats://` server that requires TLS, a private CA, and the
/// error when the certificate cannot be verified.
@Suite("NATS client over TLS", .serialized)
struct NATSTLSTests {
    /// A CA and a certificate for `localhost` / 127.0.0.1, made with the openssl tool.
    static func makeCertificates() throws -> (ca: String, cert: String, key: String) {
        let dir = NSTemporaryDirectory() + "vp-nats-tls-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let ext = dir + "/server.ext"
        try "subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n"
            .write(toFile: ext, atomically: true, encoding: .utf8)
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/ca.key",
             "-out", dir + "/ca.pem", "-days", "2", "-subj", "/CN=voicepipe NATS test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", dir + "/server.key",
             "-out", dir + "/server.csr", "-subj", "/CN=localhost"],
            ["x509", "-req", "-in", dir + "/server.csr", "-CA", dir + "/ca.pem", "-CAkey", dir + "/ca.key", "-CAcreateserial",
             "-out", dir + "/server.pem", "-days", "2", "-extfile", ext],
        ]
        for args in steps {
            let p = Process()
            p.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
            p.arguments = args
            p.standardOutput = FileHandle.nullDevice
            p.standardError = FileHandle.nullDevice
            try p.run()
            p.waitUntilExit()
            guard p.terminationStatus == 0 else { throw NATSError.badURL("openssl \(args.first ?? "") failed") }
        }
        return (dir + "/ca.pem", dir + "/server.pem", dir + "/server.key")
    }

    @Test func publishesOverTLSAndRefusesAnUnverifiableServer() async throws {
        let files = try Self.makeCertificates()
        let server = try NATSServerProcess(arguments: ["--tls", "--tlscert", files.cert, "--tlskey", files.key])
        try await server.start()
        // tls:// to the name in the certificate, trusting the private CA.
        var options = try NATSOptions(url: "tls://localhost:\(server.port)")
        options.applyEnvironment(["NATS_TLS_CA": files.ca])
        var c = JetStreamPublisher.Configuration(options: options, stream: "VPTLS", streamSubjects: ["tls.>"])
        c.ackTimeout = .seconds(1)
        let p = JetStreamPublisher(configuration: c, logger: JetStreamServerTests.logger)
        let loop = Task { await p.run() }
        for i in 0..<100 { p.publish(subject: "tls.a", payload: Array("\(i)".utf8)) }
        let stats = await p.close(timeout: .seconds(10))
        await loop.value
        #expect(stats.acknowledged == 100 && stats.held == 0, "\(stats) \(p.lastError ?? "")")
        // nats:// to a server that requires TLS: TLS all the same; the address checked against the certificate's IP.
        var plain = try NATSOptions(url: "nats://127.0.0.1:\(server.port)")
        plain.tlsCAFile = files.ca
        let conn = try await NATSConnection.connect(options: plain)
        let stored = try await StreamReader(connection: conn, stream: "VPTLS").messageCount()
        #expect(stored == 100)
        conn.close()
        // Without the CA the server's certificate cannot be verified: a clear handshake error, no connection.
        do {
            _ = try await NATSConnection.connect(options: try NATSOptions(url: "tls://localhost:\(server.port)"))
            Issue.record("an unverifiable certificate was accepted")
        } catch let e as NATSError {
            #expect("\(e)".contains("localhost:\(server.port)") && "\(e)".lowercased().contains("certificate"), "\(e)")
        }
    }
}

/// NKEY authentication against nats-server configured with a user's public key: the server checks our
/// encoding of the key and our signature of its nonce.
@Suite("NATS client with NKEY authentication", .serialized)
struct NATSNKeyTests {
    @Test func theServerAcceptsOurSignatureAndRefusesAnotherKey() async throws {
        let key = NKey.generateUser()
        #expect(key.publicKey.hasPrefix("U") && key.publicKey.count == 56)
        #expect(key.seed.hasPrefix("SU") && key.seed.count == 58)
        #expect(try NKey(seed: key.seed).publicKey == key.publicKey)      // round trip of our own text form
        var broken = Array(key.seed)
        broken[10] = broken[10] == "A" ? "B" : "A"
        #expect(throws: NATSError.self) { try NKey(seed: String(broken)) }  // the checksum catches a typo

        let dir = NSTemporaryDirectory() + "vp-nkey-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let config = dir + "/server.conf"
        try "authorization { users = [ { nkey: \(key.publicKey) } ] }\n".write(toFile: config, atomically: true, encoding: .utf8)
        let server = try NATSServerProcess(arguments: ["-c", config])
        try await server.start()
        let seedFile = dir + "/user.nk"
        try "# a user seed\n\(key.seed)\n".write(toFile: seedFile, atomically: true, encoding: .utf8)

        var options = try NATSOptions(url: server.url)
        options.applyEnvironment(["NATS_NKEY": seedFile])
        let c = try await NATSConnection.connect(options: options)
        try await c.roundTrip(timeout: .seconds(2))
        c.close()

        // Without a key: told what to set. With another key: refused by the server.
        do {
            _ = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
            Issue.record("connected without credentials")
        } catch let e as NATSError {
            #expect("\(e)".contains("NATS_NKEY"), "\(e)")
        }
        let other = dir + "/other.nk"
        try NKey.generateUser().seed.write(toFile: other, atomically: true, encoding: .utf8)
        var wrong = try NATSOptions(url: server.url)
        wrong.nkeyFile = other
        do {
            _ = try await NATSConnection.connect(options: wrong)
            Issue.record("another key was accepted")
        } catch let e as NATSError {
            #expect("\(e)".lowercased().contains("authorization"), "\(e)")
        }
    }
}

/// The spool: a file copy of held events that outlives the process.
@Suite("NATS publisher spool", .serialized)
struct PublishSpoolTests {
    static let logger = Logger(label: "test.nats.spool")

    func directory() -> String {
        let d = NSTemporaryDirectory() + "vp-spool-\(UUID().uuidString.prefix(8))"
        try? FileManager.default.createDirectory(atPath: d, withIntermediateDirectories: true)
        return d
    }

    func configuration(_ url: String, spool: String, capacity: Int = 10_000) throws -> JetStreamPublisher.Configuration {
        var c = JetStreamPublisher.Configuration(options: try NATSOptions(url: url), stream: "VPSPOOL", streamSubjects: ["vp.>"])
        c.spoolDirectory = spool
        c.capacity = capacity
        c.ackTimeout = .milliseconds(500)
        return c
    }

    func files(_ dir: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).filter { $0.hasSuffix(".spool") }
    }

    @Test func eventsHeldAtAStopAreSentByTheNextPublisherUnderTheirIDs() async throws {
        let dir = directory()
        let server = try NATSServerProcess()
        // NATS is away: the first publisher holds 120 events and stops (its flush times out).
        let first = JetStreamPublisher(configuration: try configuration(server.url, spool: dir), logger: Self.logger)
        let loop1 = Task { await first.run() }
        for i in 0..<120 { first.publish(subject: "vp.spool.\(i % 4)", payload: Array("\(i)".utf8), id: "first-\(i)") }
        let s1 = await first.close(timeout: .milliseconds(300))
        await loop1.value
        #expect(s1.held == 120 && s1.acknowledged == 0)
        #expect(files(dir).count == 1, "\(files(dir))")

        // NATS is back; a new publisher on the same directory sends them, then its own.
        try await server.start()
        let second = JetStreamPublisher(configuration: try configuration(server.url, spool: dir), logger: Self.logger)
        #expect(second.statistics.held == 120)
        let loop2 = Task { await second.run() }
        for i in 0..<30 { second.publish(subject: "vp.spool.new", payload: Array("n\(i)".utf8)) }
        let s2 = await second.close(timeout: .seconds(10))
        await loop2.value
        #expect(s2.acknowledged == 150 && s2.held == 0, "\(s2)")
        #expect(files(dir).isEmpty, "nothing held, nothing left: \(files(dir))")

        let c = try await NATSConnection.connect(options: try NATSOptions(url: server.url))
        defer { c.close() }
        let all = try await StreamReader(connection: c, stream: "VPSPOOL").all()
        #expect(all.filter { $0.subject != "vp.spool.new" }.map(\.payload) == (0..<120).map(String.init))
        #expect(all.filter { $0.subject == "vp.spool.new" }.count == 30)
    }

    @Test func aLiveOnesFileIsNotAdoptedAndSettledOrTornRecordsAreNotResent() throws {
        let dir = directory()
        // A live publisher's file is locked: another publisher leaves it alone.
        let live = JetStreamPublisher(configuration: try configuration("nats://127.0.0.1:1", spool: dir), logger: Self.logger)
        live.publish(subject: "vp.a", payload: [1])
        let other = JetStreamPublisher(configuration: try configuration("nats://127.0.0.1:1", spool: dir), logger: Self.logger)
        #expect(other.statistics.held == 0 && live.statistics.held == 1)
        #expect(files(dir).count == 2)

        // A dead process's file: settled records and a torn last line are not sent again.
        let text = """
            {"i":"a","p":"MQ==","s":"vp.x"}
            {"i":"b","p":"Mg==","s":"vp.x"}
            {"d":"a"}
            {"i":"c","p":"Mw==","s":"vp.y"}
            {"i":"d","p":"N
            """
        let dead = dir + "/dead.spool"
        try text.write(toFile: dead, atomically: true, encoding: .utf8)
        let adopter = JetStreamPublisher(configuration: try configuration("nats://127.0.0.1:1", spool: dir), logger: Self.logger)
        #expect(adopter.statistics.held == 2)
        #expect(!FileManager.default.fileExists(atPath: dead))
        // The adopted events are in the adopter's own file now, before the orphan went.
        let own = try #require(files(dir).map { dir + "/" + $0 }.first { (try? String(contentsOfFile: $0, encoding: .utf8))?.contains("\"i\":\"b\"") == true })
        let ownText = try String(contentsOfFile: own, encoding: .utf8)
        #expect(ownText.contains("\"i\":\"c\"") && !ownText.contains("\"i\":\"a\""))
    }

    @Test func anUnusableDirectoryIsSaid() throws {
        let file = NSTemporaryDirectory() + "vp-spool-file-\(UUID().uuidString.prefix(8))"
        try "x".write(toFile: file, atomically: true, encoding: .utf8)
        let p = JetStreamPublisher(configuration: try configuration("nats://127.0.0.1:1", spool: file + "/sub"), logger: Self.logger)
        #expect(p.spoolProblem?.contains(file) == true, "\(p.spoolProblem ?? "nil")")
    }

    @Test func aLongOutageWithDropsKeepsTheFileBounded() async throws {
        let dir = directory()
        let p = JetStreamPublisher(configuration: try configuration("nats://127.0.0.1:1", spool: dir, capacity: 50), logger: Self.logger)
        let payload = [UInt8](repeating: 65, count: 100)
        for i in 0..<2000 { p.publish(subject: "vp.z", payload: payload, id: "z-\(i)") }
        #expect(p.statistics.held == 50 && p.statistics.dropped == 1950)
        // Stopped while NATS is still away: the file stays, with its settled records written out.
        _ = await p.close(timeout: .milliseconds(50))
        let path = try #require(files(dir).first.map { dir + "/" + $0 })
        let size = (try FileManager.default.attributesOfItem(atPath: path)[.size] as? Int) ?? 0
        // Rewritten whenever settled records outnumber the capacity: at most ~capacity held + capacity settled lines.
        #expect(size < 50 * 200 + 60 * 40, "spool file \(size) bytes")
        let text = try String(contentsOfFile: path, encoding: .utf8)
        // What a restart would send is exactly what is held: the newest 50.
        let ids = text.split(separator: "\n").compactMap { (try? JSONSerialization.jsonObject(with: Data($0.utf8))) as? [String: String] }
        var pending: [String] = []
        for r in ids { if let i = r["i"] { pending.append(i) } else if let d = r["d"] { pending.removeAll { $0 == d } } }
        #expect(pending == (1950..<2000).map { "z-\($0)" })
    }
}
