import Foundation
import Testing
@testable import VoicepipeServe

/// What `voicepipe serve`'s pages and session WebSockets accept: a real server, requests over loopback
/// with a foreign `Host` (DNS rebinding), a foreign `Origin` (a page of another site), and repeated tokens.
@Suite("serve: Host, Origin and tokens", .serialized, .timeLimit(.minutes(3)))
struct ServeAccessTests {
    /// Sends one request (raw, from Python's socket module) and returns its status code.
    static func status(_ port: Int, _ path: String, _ headers: [String] = [], upgrade: Bool = false) throws -> Int {
        var lines = ["GET \(path) HTTP/1.1"]
        if !headers.contains(where: { $0.lowercased().hasPrefix("host:") }) { lines.append("Host: 127.0.0.1:\(port)") }
        lines += headers
        if upgrade {
            lines += ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version: 13"]
        } else {
            lines.append("Connection: close")
        }
        let request = lines.joined(separator: "\r\n") + "\r\n\r\n"
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", ["-c", """
            import socket, sys
            s = socket.create_connection(("127.0.0.1", \(port)), timeout=10)
            s.sendall(sys.argv[1].encode())
            data = b""
            while b"\\r\\n" not in data:
                chunk = s.recv(4096)
                if not chunk: break
                data += chunk
            print(data.split(b"\\r\\n")[0].split(b" ")[1].decode())
            s.close()
            """, request])
        return Int(r.stdout.trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
    }

    @Test("without a token: a loopback Host is answered; a foreign Host or Origin is refused with 403; a foreign page opens no WebSocket")
    func withoutToken() throws {
        let dir = tempDir()
        let (server, port) = try ServeTests.start(extra: "console: { allowed_origins: [\"https://voice.example.com\"] }", in: dir)
        defer { server.signal(SIGKILL); _ = server.wait(timeout: 5) }
        for host in ["127.0.0.1:\(port)", "localhost:\(port)", "LOCALHOST", "[::1]:\(port)", "127.1.2.3"] {
            #expect(try Self.status(port, "/console", ["Host: \(host)"]) == 200, "Host: \(host)")
        }
        for path in ["/", "/console", "/console/stream", "/console/sessions.json", "/talk/routes.json"] {
            for host in ["evil.example:\(port)", "127.0.0.1.evil.example", "evil.example"] {
                #expect(try Self.status(port, path, ["Host: \(host)"]) == 403, "\(path) with Host: \(host)")
            }
            #expect(try Self.status(port, path, ["Origin: http://evil.example"]) == 403, "\(path) with a foreign Origin")
        }
        // Two Host headers: neither is trusted.
        #expect(try Self.status(port, "/console", ["Host: 127.0.0.1:\(port)", "Host: evil.example"]) == 403)
        #expect(try Self.status(port, "/console", ["Origin: http://localhost:3000"]) == 200)
        #expect(try Self.status(port, "/console", ["Origin: https://voice.example.com"]) == 200)
        // The page files hold no data.
        #expect(try Self.status(port, "/static/style.css", ["Host: evil.example"]) == 200)

        // Session WebSockets: a client that is not a browser (no Origin) as before; a browser page only
        // from a loopback origin, a listed one, or this server itself by its address.
        #expect(try Self.status(port, "/ws/recognize", upgrade: true) == 101)
        // WebSocket client libraries that send an Origin send ws://HOST, which no browser does.
        #expect(try Self.status(port, "/ws/recognize", ["Origin: ws://127.0.0.1"], upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: wss://asr.example"], upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: http://evil.example"], upgrade: true) == 403)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: null"], upgrade: true) == 403)
        #expect(try Self.status(port, "/ws/recognize", ["Host: evil.example:\(port)", "Origin: http://evil.example:\(port)"], upgrade: true) == 403,
                "a rebinding page is same-origin by name")
        #expect(try Self.status(port, "/ws/recognize", ["Origin: http://localhost:5173"], upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: http://127.0.0.1:\(port)"], upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: https://voice.example.com"], upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Host: 192.0.2.10:\(port)", "Origin: http://192.0.2.10:\(port)"], upgrade: true) == 101,
                "the talk page served by this server at its address")
        let metrics = try ServeTests.http(port, "/metrics").body
        #expect(metrics.contains(#"voicepipe_errors_total{route="raw",code="foreign_origin"} 3"#), "\(metrics)")
    }

    @Test("with a token: one token per request (a second is 400), any Host; a WebSocket of the talk page by name needs the token")
    func withToken() throws {
        let dir = tempDir()
        let token = "t0ken-for-access-tests"
        let (server, port) = try ServeTests.start(extra: "console: { token: \"\(token)\" }", in: dir)
        defer { server.signal(SIGKILL); _ = server.wait(timeout: 5) }
        #expect(try Self.status(port, "/console?token=\(token)") == 200)
        #expect(try Self.status(port, "/console?token=\(token)", ["Host: voice.example.com"]) == 200)
        #expect(try Self.status(port, "/console?token=\(token)&token=\(token)") == 400)
        #expect(try Self.status(port, "/console?token=guess1&token=guess2&token=\(token)") == 400)
        #expect(try Self.status(port, "/console?token=\(token)", ["Authorization: Bearer \(token)"]) == 400)
        #expect(try Self.status(port, "/console", ["Authorization: Bearer \(token)", "Authorization: Bearer guess"]) == 400)
        #expect(try Self.status(port, "/console/stream?token=a&token=b") == 400)
        #expect(try Self.status(port, "/console?token=wrong") == 401)
        #expect(try Self.status(port, "/console") == 401)

        #expect(try Self.status(port, "/ws/recognize?token=\(token)&token=guess", upgrade: true) == 400)
        let named = ["Host: voice.example.com:\(port)", "Origin: http://voice.example.com:\(port)"]
        #expect(try Self.status(port, "/ws/recognize", named, upgrade: true) == 403)
        #expect(try Self.status(port, "/ws/recognize?token=wrong", named, upgrade: true) == 403)
        #expect(try Self.status(port, "/ws/recognize?token=\(token)", named, upgrade: true) == 101)
        #expect(try Self.status(port, "/ws/recognize", ["Origin: http://evil.example"], upgrade: true) == 403)
    }

    @Test("a bad allowed_origins entry is named with its line and column")
    func badOrigin() throws {
        let dir = tempDir()
        let config = dir.appendingPathComponent("serve.yaml")
        try """
            listen: { host: 127.0.0.1, port: 0 }
            console:
              allowed_origins: ["https://ok.example", "ftp://x", "https://a.example/path"]
            routes:
              - name: raw
                path: /ws/recognize
                protocol: websocket
                graph: \(packageRoot.appendingPathComponent("pipelines/serve-recognizer.yaml").path)
            """.write(to: config, atomically: true, encoding: .utf8)
        let r = try voicepipe(["serve", config.path], timeout: 30)
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("serve.yaml:3:43") && r.stderr.contains("'ftp://x' is not an origin"), "\(r.stderr)")
        #expect(r.stderr.contains("serve.yaml:3:54"), "\(r.stderr)")
    }

    @Test("the rule: Host and Origin parsing")
    func rule() {
        let open = PageAccess(token: nil, allowedOrigins: ["https://Voice.Example.com:443/"])
        #expect(open.allowedOrigins == ["https://voice.example.com"])
        func page(_ host: String?, _ origin: String? = nil, ip: String = "127.0.0.1") -> PageAccess.Verdict {
            open.check(PageAccess.Request(uri: "/console", host: host, origin: origin, remoteIP: ip))
        }
        #expect(page(nil) == .allowed)
        #expect(page("127.0.0.1:8080") == .allowed && page("[::1]") == .allowed && page("localhost.") == .allowed)
        #expect(page("[::ffff:127.0.0.1]:80") == .allowed)
        for foreign in ["127.0.0.1.nip.io", "localhost.evil.example", "evil.example", "1.2.3.4", "[::2]", "", "a:b:c", "x/y"] {
            guard case .refused(403, _) = page(foreign) else { Issue.record("Host \(foreign) was let in"); continue }
        }
        guard case .refused(403, _) = page("localhost", ip: "192.0.2.1") else { Issue.record("a remote client was let in"); return }
        #expect(page("localhost", "http://[::1]:3000") == .allowed)
        guard case .refused(403, _) = page("localhost", "http://localhost.evil.example") else { Issue.record("a foreign origin was let in"); return }
    }
}
