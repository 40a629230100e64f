import Foundation
import Testing

/// `voicepipe serve`: a real server process, clients over loopback — voicepipe's own Tencent ASR client
/// (written against the published protocol), and bench/serve_client.py (an independent WebSocket client
/// in Python's standard library).
@Suite("voicepipe serve", .serialized, .timeLimit(.minutes(3)))
struct ServeTests {
    static let client = packageRoot.appendingPathComponent("bench/serve_client.py").path

    /// A free TCP port (bound and released; the server binds it right after).
    static func freePort() -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        _ = withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: a.sin_port))
    }

    /// Writes a serve configuration (routes on the bundled recognizer template) and starts the server.
    static func start(maxSessions: Int = 10, idleMs: Int = 15000, rawLimits: String = "", extra: String = "", graceS: Int = 20,
                      template: String = "Tests/Fixtures/serve-pocketsphinx.yaml", in dir: URL) throws -> (Running, Int) {
        let port = freePort()
        let config = dir.appendingPathComponent("serve.yaml")
        let template = packageRoot.appendingPathComponent(template).path
        try """
            listen: { host: 127.0.0.1, port: \(port) }
            max_sessions: \(maxSessions)
            drain_grace_s: \(graceS)
            routes:
              - name: asr
                path: /asr/v2/{appid}
                protocol: tencent-asr
                graph: \(template)
                keys: { "1250000001": { secret_id: AKIDtest, secret_key: "${SERVE_TEST_SECRET}" } }
                idle_timeout_ms: \(idleMs)
              - name: raw
                path: /ws/recognize
                protocol: websocket
                graph: \(template)\(rawLimits)
            \(extra)
            """.write(to: config, atomically: true, encoding: .utf8)
        let server = try Running(voicepipeBinary, ["serve", config.path], environment: ["SERVE_TEST_SECRET": "s3cret-key"])
        // Up once /healthz answers.
        for _ in 0..<100 {
            if (try? http(port, "/healthz").status) == 200 { return (server, port) }
            usleep(100_000)
        }
        let r = server.wait(timeout: 1)
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "serve did not come up: \(r.stderr)"])
    }

    /// GET `path`: status and body (python3's urllib: an independent HTTP client).
    static func http(_ port: Int, _ path: String) throws -> (status: Int, body: String) {
        let r = try voicepipeLike("/usr/bin/python3", ["-c", """
            import sys, urllib.request, urllib.error
            try:
                r = urllib.request.urlopen("http://127.0.0.1:\(port)\(path)", timeout=5); print(r.status); print(r.read().decode())
            except urllib.error.HTTPError as e:
                print(e.code); print(e.read().decode())
            """])
        let lines = r.stdout.split(separator: "\n", maxSplits: 1, omittingEmptySubsequences: false)
        return (Int(lines.first ?? "") ?? -1, lines.count > 1 ? String(lines[1]) : "")
    }

    static func voicepipeLike(_ tool: String, _ args: [String], env: [String: String]? = nil, timeout: Double = 60) throws -> Finished {
        try Running(tool, args, environment: env).wait(timeout: timeout)
    }

    static func speech(_ dir: URL, _ text: String = "please open the garage door") throws -> String {
        let raw = dir.appendingPathComponent("speech-raw.wav").path, out = dir.appendingPathComponent("speech.wav").path
        _ = try voicepipeLike("/usr/bin/flite", ["-voice", "slt", "-t", text, "-o", raw])
        _ = try voicepipeLike("/usr/bin/sox", [raw, "-r", "16000", out, "pad", "0.3", "0.8"])
        return out
    }

    @Test("voicepipe's own Tencent ASR client recognizes through serve's tencent-asr route; /metrics counts the session")
    func tencentClient() throws {
        let dir = tempDir()
        let (server, port) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir)
        let graph = dir.appendingPathComponent("client.yaml")
        try """
            version: 1
            nodes:
              mic: { type: file-source, path: "\(wav)", realtime: true }
              asr: { type: asr, engine: tencent, app_id: "1250000001", secret_id: AKIDtest, secret_key: s3cret-key, endpoint: "ws://127.0.0.1:\(port)" }
              out: { type: jsonl-sink, path: "-" }
            links: [ "mic -> asr", "asr.events -> out" ]
            """.write(to: graph, atomically: true, encoding: .utf8)
        let r = try voicepipe(["run", graph.path], timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        let finals = r.stdout.split(separator: "\n").filter { $0.contains("\"transcript\"") && $0.contains("\"final\":true") }
        #expect(finals.contains { $0.contains("garage door") }, "\(r.stdout)")
        #expect(!r.stdout.contains("\"error\""), "\(r.stdout)")
        let metrics = try Self.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_sessions_total{route=\"asr\",outcome=\"completed\"} 1"), "\(metrics)")
        #expect(metrics.contains("voicepipe_first_result_seconds{route=\"asr\""))
        // No secret in the logs.
        let log = server.wait(timeout: 0.1)
        #expect(!log.stderr.contains("s3cret-key") && !log.stdout.contains("s3cret-key"))
    }

    @Test("plain WebSocket route on the bundled pipelines/serve-recognizer.yaml: PCM in, JSON events out, Whisper's final with its timings, a normal close")
    func websocketRoute() throws {
        let dir = tempDir()
        let (server, port) = try Self.start(template: "pipelines/serve-recognizer.yaml", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir, "please turn on the lights in the garage")
        let r = try Self.voicepipeLike("/usr/bin/python3", [Self.client, "websocket", "ws://127.0.0.1:\(port)/ws/recognize", wav, "--pace", "0"])
        #expect(r.status == 0, "\(r.stderr)")
        let finals = r.stdout.split(separator: "\n").filter { $0.contains("\"final\":true") }
        // Whisper (the template's engine when installed, as scripts/test.sh does) writes capitals and punctuation
        // and says what its decoding cost; PocketSphinx, the fallback, writes lower-case words only.
        #expect(finals.contains { $0.contains("Please turn on the lights in the garage") && $0.contains("\"decode_ms\"") }, "\(r.stdout)")
        #expect(r.stdout.contains("closed 1000"), "\(r.stdout)")
    }

    @Test("Tencent protocol errors: wrong key 4002, unknown appid 4003, expired 4002, missing parameter 4001, idle 4008; other sessions unaffected")
    func tencentErrors() throws {
        let dir = tempDir()
        let (server, port) = try Self.start(idleMs: 600, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        func attempt(_ python: String) throws -> String {
            try Self.voicepipeLike("/usr/bin/python3", ["-c", """
                import asyncio, sys
                sys.path.insert(0, "\(packageRoot.appendingPathComponent("bench").path)")
                import serve_client as c
                async def main():
                    \(python)
                    ws = await c.WebSocket.connect(url)
                    while True:
                        m = await asyncio.wait_for(ws.receive(), 10)
                        if m is None: break
                        print(m)
                asyncio.run(main())
                """]).stdout
        }
        let base = "ws://127.0.0.1:\(port)"
        #expect(try attempt("url = c.tencent_url('\(base)', '1250000001', 'AKIDtest', 'wrong-key')").contains("\"code\":4002"))
        #expect(try attempt("url = c.tencent_url('\(base)', '1999999999', 'AKIDtest', 's3cret-key')").contains("\"code\":4003"))
        #expect(try attempt("url = c.tencent_url('\(base)', '1250000001', 'AKIDtest', 's3cret-key', expired_in=-10)").contains("\"code\":4002"))
        #expect(try attempt("url = c.tencent_url('\(base)', '1250000001', 'AKIDtest', 's3cret-key').replace('nonce=', 'n=')").contains("\"code\":4001"))
        // Signed correctly, then silent: 4008 after idle_timeout_ms.
        let idle = try attempt("url = c.tencent_url('\(base)', '1250000001', 'AKIDtest', 's3cret-key')")
        #expect(idle.contains("\"code\":0") && idle.contains("\"code\":4008"), "\(idle)")
        let metrics = try Self.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_errors_total{route=\"asr\",code=\"4002\"} 2"), "\(metrics)")
        #expect(metrics.contains("voicepipe_errors_total{route=\"asr\",code=\"idle\"} 1"), "\(metrics)")
        // The server is still healthy.
        #expect(try Self.http(port, "/healthz").status == 200)
    }

    @Test("max_sessions: a session over the limit gets 4006 and /readyz says 503 while full; SIGTERM drains: the running session still gets its final")
    func limitsAndDrain() async throws {
        let dir = tempDir()
        let (server, port) = try Self.start(maxSessions: 1, in: dir)
        let wav = try Self.speech(dir, "the kitchen light is on and the garage door is open")
        let base = "ws://127.0.0.1:\(port)"
        // One session paced at 1x (about 4 s).
        let first = try Running("/usr/bin/python3", [Self.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "1"])
        try await Task.sleep(for: .milliseconds(800))
        #expect(try Self.http(port, "/readyz").status == 503)
        let second = try Self.voicepipeLike("/usr/bin/python3", [Self.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "0"])
        #expect(second.stdout.contains("\"code\":4006"), "\(second.stdout)")
        // Drain while the first session runs: it finishes with its final result; new sessions are refused.
        server.signal(SIGTERM)
        try await Task.sleep(for: .milliseconds(300))
        #expect(try Self.http(port, "/readyz").status == 503)
        let r = first.wait(timeout: 30)
        #expect(r.stdout.contains("\"slice_type\":2") && r.stdout.contains("\"final\":1"), "\(r.stdout)")
        let s = server.wait(timeout: 30)
        #expect(s.status == 0, "\(s.stderr)")
        #expect(s.stderr.contains("draining"))
    }

    @Test("full_response: http — a session over the limit is answered 503 before the upgrade (a load balancer retries it elsewhere), counted, and the slot is free again after")
    func fullAnswersHTTP503() async throws {
        let dir = tempDir()
        let (server, port) = try Self.start(maxSessions: 1, extra: "full_response: http", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir, "the kitchen light is on")
        let base = "ws://127.0.0.1:\(port)"
        let first = try Running("/usr/bin/python3", [Self.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "1"])
        try await Task.sleep(for: .milliseconds(800))
        // An upgrade request while full: 503 with the reason, and no WebSocket.
        let raw = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import http.client
            c = http.client.HTTPConnection("127.0.0.1", \(port), timeout=5)
            c.request("GET", "/ws/recognize", headers={"Upgrade": "websocket", "Connection": "Upgrade",
                      "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Version": "13"})
            r = c.getresponse(); print(r.status, r.getheader("Retry-After")); print(r.read().decode().strip())
            """])
        #expect(raw.stdout.hasPrefix("503 1") && raw.stdout.contains("full: 1 of 1 sessions"), "\(raw.stdout) \(raw.stderr)")
        let second = try Self.voicepipeLike("/usr/bin/python3", [Self.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "0"])
        #expect(second.stderr.contains("upgrade refused") && second.stderr.contains("503"), "\(second.stdout) \(second.stderr)")
        #expect(!second.stdout.contains("4006"))
        let r = first.wait(timeout: 30)
        #expect(r.stdout.contains("\"final\":1"), "\(r.stdout)")
        // The slot is free again: the refused upgrades did not leave a reservation behind.
        let third = try Self.voicepipeLike("/usr/bin/python3", [Self.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "0"])
        #expect(third.stdout.contains("\"final\":1"), "\(third.stdout) \(third.stderr)")
        let metrics = try Self.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_errors_total{route=\"raw\",code=\"busy\"} 1")
                && metrics.contains("voicepipe_errors_total{route=\"asr\",code=\"busy\"} 1"), "\(metrics)")
    }

    @Test("Wyoming route: a client written with the `wyoming` package gets info and a transcript per utterance (48 kHz stereo converted)",
          .enabled(if: FileManager.default.isExecutableFile(atPath: packageRoot.appendingPathComponent(".deps/venv/bin/python3").path)))
    func wyomingRoute() throws {
        let dir = tempDir()
        let wyomingPort = Self.freePort()
        let template = packageRoot.appendingPathComponent("Tests/Fixtures/serve-pocketsphinx.yaml").path
        let (server, port) = try Self.start(extra: """
              - name: stt
                protocol: wyoming
                port: \(wyomingPort)
                graph: \(template)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir)
        let stereo = dir.appendingPathComponent("stereo48.wav").path
        _ = try Self.voicepipeLike("/usr/bin/sox", [wav, "-r", "48000", "-c", "2", stereo])
        let r = try Self.voicepipeLike(packageRoot.appendingPathComponent(".deps/venv/bin/python3").path,
                                       [packageRoot.appendingPathComponent("Tests/Fixtures/wyoming_asr_client.py").path, "127.0.0.1", "\(wyomingPort)", wav, stereo])
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n")
        #expect(lines.first?.hasPrefix("info") == true && lines.first?.contains("stt") == true, "\(r.stdout)")
        let transcripts = lines.filter { $0.hasPrefix("transcript") }
        #expect(transcripts.count == 2 && transcripts.allSatisfy { $0.contains("garage") }, "\(r.stdout)")
        let metrics = try Self.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_sessions_total{route=\"stt\",outcome=\"completed\"} 2"), "\(metrics)")
    }

    /// Starts serve with a Wyoming route (`stt`) on the recognizer template; returns the server, its HTTP and Wyoming ports.
    static func startWyoming(idleMs: Int = 15000, graceS: Int = 20, in dir: URL) throws -> (Running, Int, Int) {
        let wyomingPort = freePort()
        let template = packageRoot.appendingPathComponent("Tests/Fixtures/serve-pocketsphinx.yaml").path
        let (server, port) = try start(extra: """
              - name: stt
                protocol: wyoming
                port: \(wyomingPort)
                graph: \(template)
                idle_timeout_ms: \(idleMs)
            """, graceS: graceS, in: dir)
        return (server, port, wyomingPort)
    }

    /// Runs the standard-library Wyoming client (Tests/Fixtures/wyoming_raw_client.py) with `steps`.
    static func wyoming(_ port: Int, _ steps: [String], timeout: Double = 60) throws -> [String] {
        let r = try voicepipeLike("/usr/bin/python3", [packageRoot.appendingPathComponent("Tests/Fixtures/wyoming_raw_client.py").path,
                                                       "127.0.0.1", "\(port)"] + steps, timeout: timeout)
        return r.stdout.split(separator: "\n").map(String.init) + (r.stderr.isEmpty ? [] : ["stderr: " + r.stderr])
    }

    /// The value of `voicepipe_sessions_active` for `route` (0 when the line is absent).
    static func activeSessions(_ port: Int, route: String) throws -> Int {
        let body = try http(port, "/metrics").body
        let prefix = "voicepipe_sessions_active{route=\"\(route)\"} "
        return body.split(separator: "\n").first { $0.hasPrefix(prefix) }.flatMap { Int($0.dropFirst(prefix.count)) } ?? 0
    }

    @Test("Wyoming under hostile clients: chunks that split samples, formats named by the field at fault, audio-start inside a transcription")
    func wyomingHostileChunks() throws {
        let dir = tempDir()
        let (server, port, wport) = try Self.startWyoming(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir)
        let stereo = dir.appendingPathComponent("stereo48.wav").path
        _ = try Self.voicepipeLike("/usr/bin/sox", [wav, "-r", "48000", "-c", "2", stereo])
        // Odd-length chunks (a byte of a sample carried to the next chunk), and chunks that end inside a
        // stereo frame (2 mod 4 bytes).
        for (file, rate, channels, chunk) in [(wav, 16000, 1, 3201), (wav, 16000, 1, 641), (stereo, 48000, 2, 9602)] {
            let out = try Self.wyoming(wport, ["start:\(rate):2:\(channels)", "audio:\(file):\(chunk)", "stop", "read:60"])
            #expect(out.first?.hasPrefix("transcript") == true && out.first?.contains("garage door") == true, "chunks of \(chunk) bytes: \(out)")
        }
        // A refused format names the field at fault.
        for (start, field) in [("start:0:2:1", "rate 0"), ("start:16000:2:0", "channels 0"), ("start:16000:1:1", "width 1"), ("start:-5:2:1", "rate -5")] {
            let out = try Self.wyoming(wport, [start, "read:10"])
            #expect(out.first?.hasPrefix("error unsupported_format") == true && out.first?.contains(field) == true, "\(start): \(out)")
        }
        // audio-start inside an open transcription: the first is abandoned, the gauge comes back to 0.
        let again = try Self.wyoming(wport, ["start:16000:2:1", "audio:\(wav):3200", "start:16000:2:1", "audio:\(wav):3200", "stop", "read:60"])
        #expect(again.first?.contains("garage door") == true, "\(again)")
        _ = try Self.wyoming(wport, ["start:16000:2:1", "audio:\(wav):3200", "start:16000:2:1", "start:16000:2:1", "sleep:0.5"])
        var active = -1
        for _ in 0..<50 {
            active = try Self.activeSessions(port, route: "stt")
            if active == 0 { break }
            usleep(100_000)
        }
        #expect(active == 0, "sessions active after every client left: \(active)")
    }

    @Test("Wyoming: a transcription idle after audio-start is timed out; one open when the drain ends still gets its transcript")
    func wyomingIdleAndDrain() throws {
        let dir = tempDir()
        let wav = try Self.speech(dir)
        do {
            let (server, _, wport) = try Self.startWyoming(idleMs: 800, in: dir)
            defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
            for steps in [["start:16000:2:1", "read:10"], ["start:16000:2:1", "audio:\(wav):3200", "read:10"]] {
                let began = Date()
                let out = try Self.wyoming(wport, steps + ["read:5"])
                #expect(out.first?.hasPrefix("error idle") == true && out.dropFirst().first == "closed", "\(steps): \(out)")
                #expect(Date().timeIntervalSince(began) < 6, "timed out in \(Date().timeIntervalSince(began)) s")
            }
        }
        // SIGTERM with a transcription open (audio sent, no audio-stop): at the end of the grace period it
        // is finished as if audio-stop had come, and its client gets the transcript.
        let (server, _, wport) = try Self.startWyoming(graceS: 1, in: dir)
        let client = try Running("/usr/bin/python3", [packageRoot.appendingPathComponent("Tests/Fixtures/wyoming_raw_client.py").path,
                                                     "127.0.0.1", "\(wport)", "start:16000:2:1", "audio:\(wav):3200", "read:30"])
        Thread.sleep(forTimeInterval: 1.5)
        server.signal(SIGTERM)
        let r = client.wait(timeout: 40)
        let s = server.wait(timeout: 30)
        #expect(r.stdout.hasPrefix("transcript") && r.stdout.contains("garage door"), "\(r.stdout) \(r.stderr)")
        #expect(s.status == 0, "\(s.stderr)")
    }

    @Test("Tencent route: a signature whose timestamp is old (0, or 90 days before expired) is refused with 4002; a fresh one is taken")
    func tencentTimestampFreshness() throws {
        let dir = tempDir()
        let (server, port) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        func attempt(_ extra: String) throws -> String {
            try Self.voicepipeLike("/usr/bin/python3", ["-c", """
                import asyncio, sys, time
                sys.path.insert(0, "\(packageRoot.appendingPathComponent("bench").path)")
                import serve_client as c
                async def main():
                    now = int(time.time())
                    url = c.tencent_url('ws://127.0.0.1:\(port)', '1250000001', 'AKIDtest', 's3cret-key', extra=\(extra))
                    ws = await c.WebSocket.connect(url)
                    m = await asyncio.wait_for(ws.receive(), 10)
                    print(m)
                asyncio.run(main())
                """]).stdout
        }
        let old = try attempt("{'timestamp': '0'}")
        #expect(old.contains("\"code\":4002") && old.contains("timestamp"), "\(old)")
        let ninetyDays = try attempt("{'timestamp': str(now - 90 * 86400 + 3000)}")
        #expect(ninetyDays.contains("\"code\":4002"), "\(ninetyDays)")
        let reversed = try attempt("{'timestamp': str(now + 200), 'expired': str(now + 100)}")
        #expect(reversed.contains("\"code\":4002"), "\(reversed)")
        let fresh = try attempt("{'timestamp': str(now - 60)}")
        #expect(fresh.contains("\"code\":0"), "\(fresh)")
    }

    /// Serve with only the plain WebSocket route, started through bash so that `ulimit -n` can be set.
    static func startPlain(requestTimeoutMs: Int, openFiles: Int? = nil, in dir: URL) throws -> (Running, Int) {
        let port = freePort()
        let config = dir.appendingPathComponent("serve-plain.yaml")
        try """
            listen: { host: 127.0.0.1, port: \(port) }
            request_timeout_ms: \(requestTimeoutMs)
            routes:
              - name: raw
                path: /ws/recognize
                protocol: websocket
                graph: \(packageRoot.appendingPathComponent("Tests/Fixtures/serve-pocketsphinx.yaml").path)
            """.write(to: config, atomically: true, encoding: .utf8)
        let limit = openFiles.map { "ulimit -n \($0); " } ?? ""
        let server = try Running("/bin/bash", ["-c", "\(limit)exec '\(voicepipeBinary)' serve '\(config.path)'"])
        for _ in 0..<100 {
            if (try? http(port, "/healthz").status) == 200 { return (server, port) }
            usleep(100_000)
        }
        let r = server.wait(timeout: 1)
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "serve did not come up: \(r.stderr)"])
    }

    @Test("HTTP clients that never finish a request are closed at the deadline: malformed, silent, half-sent, one byte at a time, a short body")
    func httpDeadlines() throws {
        let dir = tempDir()
        let (server, port) = try Self.startPlain(requestTimeoutMs: 1000, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        // Each client prints how long the server took to close its connection (or "open" after 8 s).
        let r = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import socket, sys, threading, time
            out = threading.Lock()
            def say(*words):
                # One write per line under a lock: print() from threads interleaves its pieces.
                with out:
                    sys.stdout.write(" ".join(str(w) for w in words) + "\\n")
                    sys.stdout.flush()
            def client(name, first, trickle=None):
                s = socket.create_connection(("127.0.0.1", \(port)))
                start = time.monotonic()
                s.sendall(first)
                s.settimeout(0.25)
                got = b""
                while time.monotonic() - start < 8:
                    if trickle is not None:
                        try: s.sendall(trickle)
                        except OSError: pass
                    try:
                        b = s.recv(4096)
                    except socket.timeout:
                        continue
                    except OSError:
                        b = b""
                    if not b:
                        say(name, "closed", round(time.monotonic() - start, 2), got[:12].decode(errors="replace"))
                        return
                    got += b
                say(name, "open")
            cases = [("malformed", b"GARBAGE\\r\\n\\r\\n", None), ("silent", b"", None),
                     ("half", b"GET /healthz HTTP/1.1\\r\\nHost: x\\r\\n", None),
                     ("slowloris", b"GET /healthz HTTP/1.1\\r\\nX-A: ", b"a"),
                     ("shortbody", b"POST /healthz HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 1000\\r\\n\\r\\n0123456789", None)]
            ts = [threading.Thread(target=client, args=c) for c in cases]
            [t.start() for t in ts]; [t.join() for t in ts]
            """], timeout: 30)
        for name in ["malformed", "silent", "half", "slowloris", "shortbody"] {
            let line = r.stdout.split(separator: "\n").first { $0.hasPrefix(name + " ") } ?? ""
            let seconds = line.split(separator: " ").dropFirst(2).first.flatMap { Double($0) } ?? 99
            #expect(line.contains("closed") && seconds < 3, "\(name): \(line) \(r.stderr)")
        }
        #expect(r.stdout.contains("malformed closed") && r.stdout.contains("HTTP/1.1 400"), "\(r.stdout)")
        #expect(try Self.http(port, "/healthz").status == 200)
    }

    /// CPU seconds a process has used (utime + stime from /proc/PID/stat).
    static func cpuSeconds(_ pid: Int32) -> Double {
        guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
              let close = stat.lastIndex(of: ")") else { return 0 }
        let fields = stat[stat.index(after: close)...].split(separator: " ")
        guard fields.count > 13, let u = Double(fields[11]), let s = Double(fields[12]) else { return 0 }
        return (u + s) / Double(sysconf(Int32(_SC_CLK_TCK)))
    }

    @Test("at the file-descriptor limit the accept loop backs off instead of spinning, and /healthz answers again")
    func acceptAtDescriptorLimit() throws {
        let dir = tempDir()
        let (server, port) = try Self.startPlain(requestTimeoutMs: 1000, openFiles: 96, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        // 300 silent connections, held 6 s: the server runs out of descriptors at once.
        let holder = try Running("/usr/bin/python3", ["-c", """
            import socket, time
            held = []
            for _ in range(300):
                try: held.append(socket.create_connection(("127.0.0.1", \(port)), timeout=2))
                except OSError: pass
            print(len(held), flush=True)
            time.sleep(6)
            """])
        Thread.sleep(forTimeInterval: 1.5)
        let pid = server.process.processIdentifier
        let before = Self.cpuSeconds(pid)
        Thread.sleep(forTimeInterval: 3)
        let used = Self.cpuSeconds(pid) - before
        #expect(used < 1.5, "serve used \(used) s of CPU in 3 s at the descriptor limit")
        // /healthz answers while the silent clients still hold their sockets (their server ends are closed at the deadline).
        var status = -1
        let deadline = Date().addingTimeInterval(10)
        while status != 200 && Date() < deadline { status = (try? Self.http(port, "/healthz").status) ?? -1 }
        #expect(status == 200, "/healthz: \(status)")
        _ = holder.wait(timeout: 20)
    }

    @Test("limits: max_bytes ends the audio (results so far still sent), an oversized message closes its connection only, an unknown Tencent message is 4010")
    func sessionLimits() throws {
        let dir = tempDir()
        let (server, port) = try Self.start(rawLimits: "\n    max_bytes: 40000\n    max_frame_bytes: 4096", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.speech(dir, "please open the garage door and then turn on the kitchen light")
        // 40,000 bytes = 1.25 s of the audio: the session ends early but cleanly.
        let limited = try Self.voicepipeLike("/usr/bin/python3", [Self.client, "websocket", "ws://127.0.0.1:\(port)/ws/recognize", wav, "--pace", "0"])
        #expect(limited.stdout.contains("closed 1000"), "\(limited.stdout)")
        #expect(!limited.stdout.contains("kitchen"), "audio past max_bytes was recognized: \(limited.stdout)")
        // A message larger than max_frame_bytes: that connection is closed (1009), the server goes on.
        let big = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import asyncio, sys
            sys.path.insert(0, "\(packageRoot.appendingPathComponent("bench").path)")
            import serve_client as c
            async def main():
                ws = await c.WebSocket.connect("ws://127.0.0.1:\(port)/ws/recognize")
                await ws.send_binary(bytes(8192))
                while (await asyncio.wait_for(ws.receive(), 10)) is not None: pass
                print("closed", ws.close_code)
            asyncio.run(main())
            """])
        #expect(big.stdout.contains("closed 1009"), "\(big.stdout) \(big.stderr)")
        let unknown = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import asyncio, sys
            sys.path.insert(0, "\(packageRoot.appendingPathComponent("bench").path)")
            import serve_client as c
            async def main():
                ws = await c.WebSocket.connect(c.tencent_url("ws://127.0.0.1:\(port)", "1250000001", "AKIDtest", "s3cret-key"))
                await ws.send_text('{"type":"pause"}')
                while True:
                    m = await asyncio.wait_for(ws.receive(), 10)
                    if m is None: break
                    print(m)
            asyncio.run(main())
            """])
        #expect(unknown.stdout.contains("\"code\":4010"), "\(unknown.stdout)")
        #expect(try Self.http(port, "/healthz").status == 200)
        let metrics = try Self.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_errors_total{route=\"raw\",code=\"max_bytes\"} 1"), "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_total{route=\"raw\",outcome=\"limit\"} 1"), "\(metrics)")
    }

    /// The value of the sample named `name` (with its labels) in a /metrics text, nil when it is not there.
    static func metric(_ metrics: String, _ name: String) -> Double? {
        metrics.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) }
    }

    @Test("back-pressure: a client sending 48 kHz stereo at 20x real time into a graph that takes it at 1x — the connection stops reading, what waits stays near 2 s of audio, every sample arrives")
    func floodIsHeldBackNotDropped() throws {
        let dir = tempDir()
        let out = dir.appendingPathComponent("out.wav").path
        let template = try writeGraph("""
            version: 1
            nodes:
              mic: { type: app-source, rate: 48000, channels: 2, capacity: 10 }
              out: { type: wav-sink, path: "\(out)", realtime: true }
            links:
              - mic -> out
            """, in: dir, name: "slow.yaml")
        let port = Self.freePort()
        let config = dir.appendingPathComponent("serve.yaml")
        try """
            listen: { host: 127.0.0.1, port: \(port) }
            routes:
              - name: slow
                path: /ws/slow
                protocol: websocket
                graph: \(template)
            """.write(to: config, atomically: true, encoding: .utf8)
        let server = try Running(voicepipeBinary, ["serve", config.path])
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        var up = false
        for _ in 0..<100 where !up {
            up = (try? Self.http(port, "/healthz").status) == 200
            if !up { usleep(100_000) }
        }
        try #require(up, "\(server.wait(timeout: 1).stderr)")
        // 10 s of numbered samples (1.9 MB) in 40 ms messages at 20x; then the end; then the file is compared.
        let r = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import asyncio, json, struct, sys, time, wave
            sys.path.insert(0, "\(packageRoot.appendingPathComponent("bench").path)")
            import serve_client as c
            async def main():
                ws = await c.WebSocket.connect("ws://127.0.0.1:\(port)/ws/slow")
                rate, channels, seconds = 48000, 2, 10
                n = rate * channels * seconds
                audio = struct.pack("<%dh" % n, *[(i * 7) % 65536 - 32768 for i in range(n)])
                step = rate * channels * 2 * 40 // 1000
                start = time.monotonic()
                for i in range(0, len(audio), step):
                    await ws.send_binary(audio[i:i + step])
                    delay = start + (i + step) / (rate * channels * 2) / 20 - time.monotonic()
                    if delay > 0: await asyncio.sleep(delay)
                print("sent", len(audio), "in", round(time.monotonic() - start, 2), flush=True)
                await ws.send_text(json.dumps({"type": "end"}))
                while (await asyncio.wait_for(ws.receive(), 60)) is not None: pass
                print("closed", ws.close_code, flush=True)
                with wave.open("\(out)") as w:
                    got = w.readframes(w.getnframes())
                    print("file", w.getframerate(), w.getnchannels(), len(got), "same", got == audio, flush=True)
            asyncio.run(main())
            """], timeout: 90)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("closed 1000"), "\(r.stdout)")
        #expect(r.stdout.contains("file 48000 2 1920000 same True"), "\(r.stdout)")
        let metrics = try Self.http(port, "/metrics").body
        func value(_ name: String) -> Double? { ServeTests.metric(metrics, name) }
        // 2 s of 48 kHz stereo is 384,000 bytes; one read of the socket may bring up to 4 x 64 KiB more.
        let peak = try #require(value("voicepipe_input_waiting_peak_bytes{route=\"slow\"}"), "\(metrics)")
        #expect(peak >= 384_000 && peak <= 384_000 + 300_000, "peak \(peak) bytes waiting")
        #expect((value("voicepipe_input_paused_total{route=\"slow\"}") ?? 0) >= 1, "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_total{route=\"slow\",outcome=\"completed\"} 1"), "\(metrics)")
    }

    @Test("back-pressure on a Wyoming route: 10 s of 16 kHz audio-chunks at 20x real time into a graph that takes it at 1x — the connection stops reading, what waits stays near 2 s of audio, every sample arrives")
    func wyomingFloodIsHeldBackNotDropped() throws {
        let dir = tempDir()
        let out = dir.appendingPathComponent("out.wav").path
        let graph = try writeGraph("""
            version: 1
            nodes:
              mic: { type: app-source, rate: 16000, channels: 1, capacity: 10 }
              out: { type: wav-sink, path: "\(out)", realtime: true }
            links:
              - mic -> out
            """, in: dir, name: "slow.yaml")
        let wyomingPort = Self.freePort()
        let (server, port) = try Self.start(extra: """
              - name: slow
                protocol: wyoming
                port: \(wyomingPort)
                graph: \(graph)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        // 10 s of numbered samples (320 kB) in 40 ms chunks at 20x, audio-stop, the transcript; then the file is compared.
        let r = try Self.voicepipeLike("/usr/bin/python3", ["-c", """
            import socket, struct, sys, time, wave
            sys.path.insert(0, "\(packageRoot.appendingPathComponent("Tests/Fixtures").path)")
            import wyoming_raw_client as wy
            sock = socket.create_connection(("127.0.0.1", \(wyomingPort)), timeout=10)
            sock.settimeout(None)
            spec = {"rate": 16000, "width": 2, "channels": 1}
            wy.send(sock, "audio-start", spec)
            rate, seconds = 16000, 10
            n = rate * seconds
            audio = struct.pack("<%dh" % n, *[(i * 7) % 65536 - 32768 for i in range(n)])
            step = rate * 2 * 40 // 1000
            start = time.monotonic()
            for i in range(0, len(audio), step):
                wy.send(sock, "audio-chunk", spec, audio[i:i + step])
                delay = start + (i + step) / (rate * 2) / 20 - time.monotonic()
                if delay > 0: time.sleep(delay)
            print("sent", len(audio), "in", round(time.monotonic() - start, 2), flush=True)
            wy.send(sock, "audio-stop")
            kind, data = wy.Reader(sock).event(time.monotonic() + 60)
            print("event", kind, flush=True)
            with wave.open("\(out)") as w:
                frames = w.readframes(w.getnframes())
                print("file", w.getframerate(), w.getnchannels(), len(frames), "same", frames == audio, flush=True)
            """], timeout: 90)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("event transcript"), "\(r.stdout)")
        #expect(r.stdout.contains("file 16000 1 320000 same True"), "\(r.stdout)")
        let metrics = try Self.http(port, "/metrics").body
        func value(_ name: String) -> Double? { ServeTests.metric(metrics, name) }
        // 2 s of 16 kHz mono is 64,000 bytes; one read of the socket may bring up to 4 x 64 KiB more.
        let peak = try #require(value("voicepipe_input_waiting_peak_bytes{route=\"slow\"}"), "\(metrics)")
        #expect(peak >= 64_000 && peak <= 64_000 + 4 * 65_536, "peak \(peak) bytes waiting")
        #expect((value("voicepipe_input_paused_total{route=\"slow\"}") ?? 0) >= 1, "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_total{route=\"slow\",outcome=\"completed\"} 1"), "\(metrics)")
    }

    @Test("a bad configuration is named with file:line:column, exit 2; a template without app-source is refused")
    func badConfiguration() throws {
        let dir = tempDir()
        let config = dir.appendingPathComponent("bad.yaml")
        try """
            listen: { host: 127.0.0.1, port: 99999 }
            routes:
              - name: raw
                path: /ws
                protocol: smoke-signals
                graph: x.yaml
              - name: two
                path: /ws2
                protocol: websocket
                graph: \(packageRoot.appendingPathComponent("pipelines/recognizer-file.yaml").path)
            """.write(to: config, atomically: true, encoding: .utf8)
        let r = try voicepipe(["serve", config.path, "--check"])
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("bad.yaml:1:"), "\(r.stderr)")
        #expect(r.stderr.contains("smoke-signals"), "\(r.stderr)")
        #expect(r.stderr.contains("exactly one app-source"), "\(r.stderr)")
        let ok = try voicepipe(["serve", packageRoot.appendingPathComponent("pipelines/serve.yaml").path, "--check"])
        #expect(ok.status == 0, "\(ok.stderr)")
    }
}
