import Foundation
import Testing

/// The project's Python environment (scripts/install-python-deps.sh): nats-py, kubernetes-validate.
let projectPython = packageRoot.appendingPathComponent(".deps/venv/bin/python3").path

/// Beyond one machine: session events on NATS JetStream (a real nats-server, read back with nats-py),
/// `nats-sink` in `voicepipe run`, the cluster of three workers behind nginx with a drain and a crash,
/// and the Kubernetes manifests checked against the Kubernetes schemas.
@Suite("scale-out: NATS, cluster, Kubernetes", .serialized, .timeLimit(.minutes(6)))
struct ScaleOutTests {
    static let python = projectPython
    static let natsServer = ["/usr/sbin/nats-server", "/usr/bin/nats-server", "/usr/local/bin/nats-server"].first { FileManager.default.isExecutableFile(atPath: $0) } ?? "nats-server"

    /// A nats-server with JetStream on `port`, its store in `dir`.
    static func startNATS(port: Int, dir: URL) throws -> Running {
        let nats = try Running(natsServer, ["-a", "127.0.0.1", "-p", "\(port)", "-js", "-sd", dir.appendingPathComponent("js").path])
        for _ in 0..<100 {
            if canConnect(port) { return nats }
            usleep(50_000)
        }
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "nats-server did not start: \(nats.wait(timeout: 1).stderr)"])
    }

    static func canConnect(_ port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var a = sockaddr_in()
        a.sin_family = sa_family_t(AF_INET)
        a.sin_addr.s_addr = inet_addr("127.0.0.1")
        a.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &a) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
    }

    /// The stream's messages, read with nats-py.
    static func stream(_ port: Int, _ name: String = "VOICEPIPE") throws -> [[String: Any]] {
        let r = try ServeTests.voicepipeLike(Self.python, [packageRoot.appendingPathComponent("Tests/Fixtures/nats_stream.py").path, "nats://127.0.0.1:\(port)", name])
        guard r.status == 0 else { throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "reading the stream failed: \(r.stderr)"]) }
        return r.stdout.split(separator: "\n").compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
    }

    static func metric(_ text: String, _ name: String) -> Double? {
        text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "") }
    }

    @Test("serve publishes started, the graph's events and one finished per session to JetStream; events are held while NATS is down and sent when it comes",
          .enabled(if: FileManager.default.isExecutableFile(atPath: projectPython)))
    func servePublishesSessionEvents() throws {
        let dir = tempDir()
        let natsPort = ServeTests.freePort()
        // NATS is not running yet: the server starts anyway and holds what its sessions publish.
        let (server, port) = try ServeTests.start(extra: "nats: { url: \"nats://127.0.0.1:\(natsPort)\", stream: VOICEPIPE, worker: test-worker }", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try ServeTests.speech(dir)
        let first = try ServeTests.voicepipeLike("/usr/bin/python3", [ServeTests.client, "websocket", "ws://127.0.0.1:\(port)/ws/recognize?session_id=early.one", wav, "--pace", "0"])
        #expect(first.stdout.contains("garage door") && first.stdout.contains("closed 1000"), "\(first.stdout)")
        var metrics = try ServeTests.http(port, "/metrics").body
        let held = Self.metric(metrics, "voicepipe_nats_held") ?? 0
        #expect(held >= 3 && Self.metric(metrics, "voicepipe_nats_connected") == 0, "\(metrics)")

        let nats = try Self.startNATS(port: natsPort, dir: dir)
        defer { nats.signal(SIGTERM); _ = nats.wait(timeout: 10) }
        for _ in 0..<100 {
            metrics = try ServeTests.http(port, "/metrics").body
            if Self.metric(metrics, "voicepipe_nats_held") == 0 { break }
            usleep(100_000)
        }
        #expect(Self.metric(metrics, "voicepipe_nats_held") == 0 && Self.metric(metrics, "voicepipe_nats_connected") == 1, "\(metrics)")
        // A session while connected, on the Tencent route: its voice_id names it.
        let second = try ServeTests.voicepipeLike("/usr/bin/python3", [ServeTests.client, "tencent", "ws://127.0.0.1:\(port)", "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "0"],
                                                  env: [:])
        #expect(second.stdout.contains("\"final\":1"), "\(second.stdout)")
        let voiceID = second.stdout.split(separator: "\n").first.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }?["voice_id"] as? String ?? "?"

        let messages = try Self.stream(natsPort)
        func events(_ session: String) -> [[String: Any]] {
            messages.filter { ($0["subject"] as? String)?.hasPrefix("voicepipe.") == true && (($0["data"] as? [String: Any])?["session"] as? String) == session }
        }
        for (session, route, token) in [("early.one", "raw", "early_one"), (voiceID, "asr", voiceID)] {
            let list = events(session)
            let names = list.compactMap { ($0["data"] as? [String: Any])?["event"] as? String }
            #expect(names.first == "started" && names.last == "finished", "\(session): \(names)")
            #expect(names.filter { $0 == "finished" }.count == 1 && names.filter { $0 == "started" }.count == 1, "\(names)")
            let finalText = list.compactMap { $0["data"] as? [String: Any] }.first { $0["event"] as? String == "transcript" && $0["final"] as? Bool == true }?["text"] as? String
            #expect(finalText == "please open the garage door", "\(session): \(String(describing: finalText))")
            for m in list {
                let data = m["data"] as? [String: Any] ?? [:]
                #expect(m["subject"] as? String == "voicepipe.\(route).\(token).\(data["event"] as? String ?? "?")")
                #expect(data["worker"] as? String == "test-worker" && data["route"] as? String == route)
                #expect((m["msg_id"] as? String)?.isEmpty == false)
            }
            let finished = list.last?["data"] as? [String: Any]
            #expect(finished?["outcome"] as? String == "completed" && (finished?["audio_bytes"] as? Int ?? 0) > 40_000, "\(String(describing: finished))")
            // The recognizer's own `finished` is folded into the session's one.
            #expect(finished?["text"] as? String == "please open the garage door", "\(String(describing: finished))")
        }
        // Nothing twice: every message id once.
        let ids = messages.compactMap { $0["msg_id"] as? String }
        #expect(Set(ids).count == ids.count && ids.count == messages.count)
    }

    @Test("a bad nats: section is a located error; an unknown key too")
    func natsConfigurationErrors() throws {
        let dir = tempDir()
        let template = packageRoot.appendingPathComponent("Tests/Fixtures/serve-pocketsphinx.yaml").path
        let config = dir.appendingPathComponent("bad.yaml").path
        try """
            listen: { host: 127.0.0.1, port: 0 }
            nats: { url: "ws://nats:4222", stream: "VOICE.PIPE", colour: blue }
            routes:
              - { name: raw, path: /ws, protocol: websocket, graph: \(template) }
            """.write(toFile: config, atomically: true, encoding: .utf8)
        let r = try voicepipe(["serve", config, "--check"])
        #expect(r.status == 2)
        #expect(r.stderr.contains("bad.yaml:2:") && r.stderr.contains("ws") && r.stderr.contains("VOICE.PIPE") && r.stderr.contains("colour"), "\(r.stderr)")
    }

    @Test("nats-sink: a bad URL, stream or subject is a validation error naming the node")
    func natsSinkValidation() throws {
        let dir = tempDir()
        let graph = try writeGraph("""
            version: 1
            nodes:
              mic: { type: file-source, path: \(packageRoot.appendingPathComponent("samples/sentences.wav").path) }
              vad: { type: vad }
              bus: { type: nats-sink, url: "http://nats:4222", stream: "A.B", subject: "kiosk.*" }
            links:
              - mic -> vad
              - vad.events -> bus
            """, in: dir)
        let r = try voicepipe(["validate", graph])
        #expect(r.status == 2, "\(r.stdout)\(r.stderr)")
        #expect(r.stderr.contains("bus") && r.stderr.contains("http") && r.stderr.contains("A.B") && r.stderr.contains("kiosk.*"), "\(r.stderr)")
    }

    @Test("nats-sink: `voicepipe run` publishes a file's recognition to JetStream (started, transcripts, finished)",
          .enabled(if: FileManager.default.isExecutableFile(atPath: projectPython)))
    func natsSinkInRun() throws {
        let dir = tempDir()
        let natsPort = ServeTests.freePort()
        let nats = try Self.startNATS(port: natsPort, dir: dir)
        defer { nats.signal(SIGTERM); _ = nats.wait(timeout: 10) }
        let wav = try ServeTests.speech(dir)
        let graph = try writeGraph("""
            version: 1
            name: to-nats
            nodes:
              mic:    { type: file-source, path: \(wav), realtime: false }
              vad:    { type: vad, stop_ms: 350 }
              slicer: { type: slicer, mode: utterance, slice_ms: 600, delivery: stream }
              asr:    { type: asr, engine: pocketsphinx }
              bus:    { type: nats-sink, url: "nats://127.0.0.1:\(natsPort)", stream: RUNS, route: kiosk, session: take-1, events: [transcript] }
            links:
              - mic -> vad -> slicer -> asr
              - asr.events -> bus
            """, in: dir)
        let r = try voicepipe(["run", graph, "--stats"], timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        let messages = try Self.stream(natsPort, "RUNS")
        let subjects = messages.compactMap { $0["subject"] as? String }
        #expect(subjects.first == "voicepipe.kiosk.take-1.started" && subjects.last == "voicepipe.kiosk.take-1.finished", "\(subjects)")
        #expect(subjects.dropFirst().dropLast().allSatisfy { $0 == "voicepipe.kiosk.take-1.transcript" }, "\(subjects)")
        let finals = messages.compactMap { $0["data"] as? [String: Any] }.filter { $0["final"] as? Bool == true }.compactMap { $0["text"] as? String }
        #expect(finals == ["please open the garage door"], "\(finals)")
        let finished = messages.last?["data"] as? [String: Any]
        #expect(finished?["text"] as? String == "please open the garage door" && finished?["outcome"] as? String == "completed", "\(String(describing: finished))")

        // `subject:` names the whole subject before the event; a new stream is made to take it.
        let custom = try writeGraph("""
            version: 1
            nodes:
              mic: { type: file-source, path: \(wav), realtime: false }
              vad: { type: vad }
              bus: { type: nats-sink, url: "nats://127.0.0.1:\(natsPort)", stream: KIOSK, subject: kiosk.front-door, events: [speech_start] }
            links:
              - mic -> vad
              - vad.events -> bus
            """, in: dir, name: "custom.yaml")
        let k = try voicepipe(["run", custom], timeout: 60)
        #expect(k.status == 0, "\(k.stderr)")
        let kiosk = try Self.stream(natsPort, "KIOSK").compactMap { $0["subject"] as? String }
        #expect(kiosk == ["kiosk.front-door.started", "kiosk.front-door.speech_start", "kiosk.front-door.finished"], "\(kiosk)")
    }

    @Test("nats-sink with NATS unreachable: the run still ends, and says what was not stored")
    func natsSinkUnreachable() throws {
        let dir = tempDir()
        let port = ServeTests.freePort()
        let graph = try writeGraph("""
            version: 1
            name: to-nowhere
            nodes:
              tone: { type: file-source, path: \(packageRoot.appendingPathComponent("samples/sentences.wav").path), realtime: false }
              vol:  { type: volume, interval_ms: 500 }
              bus:  { type: nats-sink, url: "nats://127.0.0.1:\(port)", flush_timeout_ms: 300, buffer: 5 }
              out:  { type: jsonl-sink, path: "-" }
            links:
              - tone -> vol
              - vol.events -> bus
              - bus.events -> out
            """, in: dir)
        let r = try voicepipe(["run", graph], timeout: 60)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("\"code\":\"nats_unacknowledged\"") && r.stdout.contains("dropped (buffer of 5 full)"), "\(r.stdout)")
        #expect(r.stderr.contains("127.0.0.1:\(port)") && r.stderr.contains("refused"), "\(r.stderr)")
    }

    @Test("cluster: three workers behind nginx, one drained and one killed mid-load; every session completes; one finished event each in JetStream",
          .enabled(if: FileManager.default.isExecutableFile(atPath: projectPython) && FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx")))
    func cluster() throws {
        let out = tempDir().appendingPathComponent("cluster.json").path
        let r = try ServeTests.voicepipeLike(Self.python, [packageRoot.appendingPathComponent("bench/cluster/cluster.py").path,
                                                      "--voicepipe", voicepipeBinary, "--sessions", "24", "--concurrency", "4", "--json", out],
                                             timeout: 300)
        #expect(r.status == 0, "\(r.stdout.suffix(3000))\n\(r.stderr.suffix(2000))")
        #expect(r.stdout.contains("PASS"))
        let results = (try? JSONSerialization.jsonObject(with: Data(contentsOf: URL(fileURLWithPath: out)))) as? [String: Any]
        #expect(results != nil, "no results written")
    }

    @Test("nats-sink spool_dir: events held while NATS is away survive the process being killed, and the next run sends them")
    func spoolSurvivesAKill() async throws {
        let dir = tempDir()
        let spool = dir.appendingPathComponent("spool").path
        let natsPort = ServeTests.freePort()
        let sentences = packageRoot.appendingPathComponent("samples/sentences.wav").path
        func graph(_ name: String, session: String, realtime: Bool) throws -> String {
            try writeGraph("""
                version: 1
                nodes:
                  src: { type: file-source, path: \(sentences), realtime: \(realtime) }
                  vol: { type: volume, interval_ms: 100 }
                  bus: { type: nats-sink, url: "nats://127.0.0.1:\(natsPort)", stream: SPOOLED, session: \(session), spool_dir: "\(spool)", flush_timeout_ms: 3000 }
                links:
                  - src -> vol
                  - vol.events -> bus
                """, in: dir, name: name)
        }
        // NATS is away; the run holds its events, spooled, and is killed (no chance to say anything).
        let first = try Running(voicepipeBinary, ["run", try graph("first.yaml", session: "killed", realtime: true)])
        try await Task.sleep(for: .milliseconds(1500))
        first.signal(SIGKILL)
        _ = first.wait(timeout: 10)
        let files = try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".spool") }
        #expect(files.count == 1, "\(files)")
        let text = try String(contentsOfFile: spool + "/" + (files.first ?? ""), encoding: .utf8)
        let held = text.split(separator: "\n").filter { $0.contains("\"i\"") }.count
        #expect(held >= 5, "spooled \(held) events")

        // NATS is up; the next run on the same spool directory sends the killed run's events too.
        let nats = try Self.startNATS(port: natsPort, dir: dir)
        defer { nats.signal(SIGTERM); _ = nats.wait(timeout: 10) }
        let second = try voicepipe(["run", try graph("second.yaml", session: "next", realtime: false)], timeout: 60)
        #expect(second.status == 0, "\(second.stderr)")
        #expect(second.stderr.contains("left unsent by an earlier process"), "\(second.stderr)")
        let subjects = try Self.stream(natsPort, "SPOOLED").compactMap { $0["subject"] as? String }
        let killed = subjects.filter { $0.hasPrefix("voicepipe.run.killed.") }
        #expect(killed.count == held, "\(killed.count) of \(held) spooled events stored")
        #expect(killed.first == "voicepipe.run.killed.started" && !killed.contains("voicepipe.run.killed.finished"), "\(killed.prefix(3))")
        #expect(subjects.contains("voicepipe.run.next.finished"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).filter { $0.hasSuffix(".spool") }.isEmpty)
    }

    @Test("full_response: http behind nginx: a session that finds its worker full is retried by nginx on another worker and completes",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/sbin/nginx")))
    func fullWorkerIsRetriedByNginx() async throws {
        let dirA = tempDir(), dirB = tempDir()
        let (a, portA) = try ServeTests.start(maxSessions: 1, extra: "full_response: http", in: dirA)
        defer { a.signal(SIGTERM); _ = a.wait(timeout: 30) }
        let (b, portB) = try ServeTests.start(maxSessions: 1, extra: "full_response: http", in: dirB)
        defer { b.signal(SIGTERM); _ = b.wait(timeout: 30) }
        // nginx prefers worker A; B is only tried when A fails — or answers 503.
        let dir = tempDir()
        let port = ServeTests.freePort()
        let user = geteuid() == 0 ? "user root;\n" : ""
        let conf = dir.appendingPathComponent("nginx.conf").path
        try """
            \(user)worker_processes 1;
            pid \(dir.path)/nginx.pid;
            error_log \(dir.path)/error.log notice;
            events { worker_connections 256; }
            http {
                client_body_temp_path \(dir.path)/body;
                proxy_temp_path \(dir.path)/proxy;
                fastcgi_temp_path \(dir.path)/fastcgi;
                uwsgi_temp_path \(dir.path)/uwsgi;
                scgi_temp_path \(dir.path)/scgi;
                access_log \(dir.path)/access.log;
                map $http_upgrade $connection_upgrade { default upgrade; "" close; }
                upstream voicepipe {
                    server 127.0.0.1:\(portA);
                    server 127.0.0.1:\(portB) backup;
                }
                server {
                    listen 127.0.0.1:\(port);
                    location / {
                        proxy_pass http://voicepipe;
                        proxy_http_version 1.1;
                        proxy_set_header Upgrade $http_upgrade;
                        proxy_set_header Connection $connection_upgrade;
                        proxy_set_header Host $host;
                        proxy_next_upstream error timeout http_503 non_idempotent;
                        proxy_read_timeout 300s;
                    }
                }
            }
            """.write(toFile: conf, atomically: true, encoding: .utf8)
        let nginx = try Running("/usr/sbin/nginx", ["-p", dir.path + "/", "-e", dir.appendingPathComponent("error.log").path, "-c", conf, "-g", "daemon off;"])
        defer { nginx.signal(SIGTERM); _ = nginx.wait(timeout: 10) }
        for _ in 0..<100 where !Self.canConnect(port) { usleep(50_000) }

        let wav = try ServeTests.speech(dir, "the kitchen light is on")
        let base = "ws://127.0.0.1:\(port)"
        let first = try Running("/usr/bin/python3", [ServeTests.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "1"])
        try await Task.sleep(for: .milliseconds(800))
        let second = try ServeTests.voicepipeLike("/usr/bin/python3", [ServeTests.client, "tencent", base, "1250000001", "AKIDtest", "s3cret-key", wav, "--pace", "0"])
        #expect(second.stdout.contains("\"final\":1") && !second.stdout.contains("4006"), "\(second.stdout) \(second.stderr)")
        let r = first.wait(timeout: 30)
        #expect(r.stdout.contains("\"final\":1"), "\(r.stdout)")
        // A refused the second session before the upgrade; B served it.
        let metricsA = try ServeTests.http(portA, "/metrics").body, metricsB = try ServeTests.http(portB, "/metrics").body
        #expect(metricsA.contains("voicepipe_errors_total{route=\"asr\",code=\"busy\"} 1"), "\(metricsA)")
        #expect(metricsA.contains("voicepipe_sessions_total{route=\"asr\",outcome=\"completed\"} 1"), "\(metricsA)")
        #expect(metricsB.contains("voicepipe_sessions_total{route=\"asr\",outcome=\"completed\"} 1"), "\(metricsB)")
    }

    @Test("Kubernetes manifests: valid against the Kubernetes schemas and consistent with serve (probes, drain, metric, template)",
          .enabled(if: FileManager.default.isExecutableFile(atPath: projectPython)))
    func kubernetesManifests() throws {
        let r = try ServeTests.voicepipeLike(packageRoot.appendingPathComponent("scripts/check-manifests.sh").path, [], timeout: 120)
        #expect(r.status == 0, "\(r.stdout)\n\(r.stderr)")
        // The ConfigMap's serve configuration and template, as the pod mounts them, pass `voicepipe serve --check`.
        let dir = tempDir()
        let extract = try ServeTests.voicepipeLike(Self.python, ["-c", """
            import sys, yaml
            for doc in yaml.safe_load_all(open(sys.argv[1])):
                if doc and doc.get("kind") == "ConfigMap":
                    for name, text in doc["data"].items():
                        open(sys.argv[2] + "/" + name, "w").write(text)
            """, packageRoot.appendingPathComponent("deploy/kubernetes/configmap.yaml").path, dir.path])
        #expect(extract.status == 0, "\(extract.stderr)")
        let check = try voicepipe(["serve", dir.appendingPathComponent("serve.yaml").path, "--check"],
                                  environment: ["NATS_URL": "nats://nats:4222", "VOICEPIPE_WORKER": "voicepipe-0", "TENCENT_APPID": "1250000001",
                                                "TENCENT_SECRET_ID": "AKIDexample", "TENCENT_SECRET_KEY": "example"])
        #expect(check.status == 0, "\(check.stdout)\(check.stderr)")
    }
}
