import Foundation
import Testing

/// `voicepipe serve`'s `audiosocket` route: a real server, and an AudioSocket caller written from the
/// protocol's description (Tests/Fixtures/audiosocket_client.py, Python's standard library) over loopback.
@Suite("serve: AudioSocket route", .serialized, .timeLimit(.minutes(3)))
struct ServeAudioSocketTests {
    static let caller = packageRoot.appendingPathComponent("Tests/Fixtures/audiosocket_client.py").path

    /// Serve with an `audiosocket` route (`phone`) whose graph recognizes the call, speaks each final
    /// transcript back (flite) and writes the `mic` and recognizer events to `events.jsonl` in `dir`.
    static func start(maxSessions: Int = 10, idleMs: Int = 15000, in dir: URL) throws -> (Running, Int, Int, URL) {
        let events = dir.appendingPathComponent("events.jsonl")
        let graph = dir.appendingPathComponent("phone.yaml")
        try """
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              vad:     { type: vad, stop_ms: 350 }
              slicer:  { type: slicer, mode: utterance, slice_ms: 600, delivery: stream }
              asr:     { type: asr, engine: pocketsphinx }
              tts:     { type: tts }
              speaker: { type: app-sink, capacity: 200 }
              log:     { type: jsonl-sink, path: \(events.path) }
            links:
              - mic -> vad -> slicer -> asr
              - asr.text -> tts -> speaker
              - mic.events -> log
              - asr.events -> log
            """.write(to: graph, atomically: true, encoding: .utf8)
        let audioPort = ServeTests.freePort()
        let (server, port) = try ServeTests.start(maxSessions: maxSessions, extra: """
              - name: phone
                protocol: audiosocket
                port: \(audioPort)
                graph: \(graph.path)
                idle_timeout_ms: \(idleMs)
            """, in: dir)
        return (server, port, audioPort, events)
    }

    static func call(_ port: Int, _ steps: [String], timeout: Double = 60) throws -> [String] {
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", [caller, "127.0.0.1", "\(port)"] + steps, timeout: timeout)
        return r.stdout.split(separator: "\n").map(String.init) + (r.stderr.isEmpty ? [] : ["stderr: " + r.stderr])
    }

    /// `key=value` of the client's `answer` line.
    static func field(_ line: String, _ key: String) -> Double? {
        line.split(separator: " ").first { $0.hasPrefix(key + "=") }.flatMap { Double($0.dropFirst(key.count + 1)) }
    }

    static func wav(_ dir: URL, rate: Int) throws -> String {
        let speech = try ServeTests.speech(dir)
        let out = dir.appendingPathComponent("speech\(rate).wav").path
        _ = try ServeTests.voicepipeLike("/usr/bin/sox", [speech, "-r", "\(rate)", out])
        return out
    }

    static func metric(_ port: Int, _ line: String) throws -> Bool {
        for _ in 0..<50 {
            if try ServeTests.http(port, "/metrics").body.contains(line) { return true }
            usleep(100_000)
        }
        return false
    }

    @Test("A call: UUID, a spoken sentence at 16 kHz, a DTMF digit, hangup — recognized, the digit an event, the spoken answer back paced in 20 ms messages")
    func callRecognizedAndAnswered() throws {
        let dir = tempDir()
        let (server, port, audioPort, events) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav(dir, rate: 16000)
        let out = try Self.call(audioPort, ["uuid:0123456789abcdef0123456789abcdef", "audio:\(wav):0x12", "dtmf:7", "silence:3000:0x12", "hangup", "wait:5"])
        let answer = try #require(out.first { $0.hasPrefix("answer type=0x12") }, "\(out)")
        let seconds = try #require(Self.field(answer, "audio_s"))
        let span = try #require(Self.field(answer, "span_s"))
        // The answer is flite saying the transcript (a second or more), sent at the caller's rate in 20 ms
        // messages (640 bytes at 16 kHz), at real time: its messages span about its duration.
        #expect(seconds > 0.8, "\(out)")
        #expect(Self.field(answer, "max_bytes") == 640, "\(answer)")
        #expect(span > seconds * 0.8 && span < seconds + 0.5, "answer of \(seconds) s sent over \(span) s")
        #expect(out.last == "closed", "\(out)")
        let lines = try String(contentsOf: events, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.contains("\"final\":true") && $0.contains("garage door") }, "\(lines)")
        #expect(lines.contains { $0.contains("\"node\":\"mic\"") && $0.contains("\"event\":\"dtmf\"") && $0.contains("\"digit\":\"7\"") }, "\(lines)")
        #expect(try Self.metric(port, "voicepipe_sessions_total{route=\"phone\",outcome=\"hangup\"} 1"))
        #expect(try Self.metric(port, "voicepipe_sessions_active{route=\"phone\"} 0"))
    }

    @Test("An 8 kHz telephone call: the answer comes back as 8 kHz audio messages (320 bytes each)")
    func narrowbandCall() throws {
        let dir = tempDir()
        let (server, _, audioPort, events) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav(dir, rate: 8000)
        let out = try Self.call(audioPort, ["uuid", "audio:\(wav):0x10", "silence:3000:0x10", "hangup", "wait:5"])
        let answer = try #require(out.first { $0.hasPrefix("answer type=0x10") }, "\(out)")
        #expect(Self.field(answer, "max_bytes") == 320, "\(answer)")
        #expect((Self.field(answer, "audio_s") ?? 0) > 0.2, "\(answer)")
        #expect(!out.contains { $0.hasPrefix("answer type=0x12") }, "\(out)")
        let lines = try String(contentsOf: events, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.contains("\"final\":true") }, "\(lines)")
    }

    @Test("Malformed calls are answered with error 0x80 and closed, counted; a truncated header, a caller's error and silence end the call cleanly")
    func malformed() throws {
        let dir = tempDir()
        let (server, port, audioPort, _) = try Self.start(idleMs: 1500, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        for steps in [["uuid", "raw:420000"],              // unknown type 0x42
                      ["uuid", "raw:104e21"],              // 20001 bytes of 8 kHz audio: over a second
                      ["silence:40:0x10"],                 // audio before the UUID
                      ["raw:010003aabbcc"],                // a UUID of 3 bytes
                      ["uuid", "raw:030002"],              // DTMF of 2 bytes
                      ["uuid", "uuid"]] {                  // a second UUID
            let out = try Self.call(audioPort, steps + ["wait:5"])
            #expect(out == ["error 0x80", "closed"], "\(steps): \(out)")
        }
        #expect(try Self.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"bad_message\"} 6"))
        // A header cut short, then the connection closes: counted, the session ends.
        #expect(try Self.call(audioPort, ["uuid", "raw:10", "sleep:0.2"]) == ["closed"])
        #expect(try Self.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"truncated\"} 1"))
        // The same before the UUID is complete.
        #expect(try Self.call(audioPort, ["raw:01001000112233", "sleep:0.2"]) == ["closed"])
        #expect(try Self.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"truncated\"} 2"))
        // The caller's own error ends its call with a hangup.
        #expect(try Self.call(audioPort, ["uuid", "raw:ff000101", "wait:5"]) == ["hangup", "closed"])
        #expect(try Self.metric(port, "voicepipe_sessions_total{route=\"phone\",outcome=\"caller_error\"} 1"))
        // Nothing for idle_timeout_ms: error 0x84.
        #expect(try Self.call(audioPort, ["uuid", "wait:5"]) == ["error 0x84", "closed"])
        #expect(try Self.metric(port, "voicepipe_sessions_active{route=\"phone\"} 0"))
        // The server is still there.
        let wav = try Self.wav(dir, rate: 8000)
        let out = try Self.call(audioPort, ["uuid", "audio:\(wav):0x10:0", "hangup", "wait:5"])
        // The graph may answer a first 20 ms before the hangup reaches it; then the call closes.
        #expect(out.last == "closed" && out.dropLast().allSatisfy { $0.hasPrefix("answer type=0x10") }, "\(out)")
    }

    @Test("Calls beyond max_sessions get error 0x81 and are counted as refused")
    func busy() throws {
        let dir = tempDir()
        let (server, port, audioPort, _) = try Self.start(maxSessions: 1, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let first = try Running("/usr/bin/python3", [Self.caller, "127.0.0.1", "\(audioPort)", "uuid:00112233445566778899aabbccddeeff", "silence:2000:0x10", "hangup", "wait:5"])
        #expect(try Self.metric(port, "voicepipe_sessions_active{route=\"phone\"} 1"))
        // The call is on the console, by its UUID.
        let listed = try ServeTests.http(port, "/console/sessions.json").body
        #expect(listed.contains("\"route\":\"phone\"") && listed.contains("00112233-4455-6677-8899-aabbccddeeff"), "\(listed)")
        let second = try Self.call(audioPort, ["uuid", "wait:5"])
        #expect(second == ["error 0x81", "closed"], "\(second)")
        #expect(first.wait(timeout: 30).stdout.hasSuffix("closed\n"))
        #expect(try Self.metric(port, "voicepipe_sessions_total{route=\"phone\",outcome=\"refused\"} 1"))
        #expect(try Self.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"busy\"} 1"))
    }

    @Test("Barge-in: an interruption discards the answer audio not yet sent; the call goes on")
    func interrupted() throws {
        let dir = tempDir()
        let echo = dir.appendingPathComponent("echo.yaml")
        // The caller's audio comes straight back; a DTMF digit (an event of `mic`) interrupts it.
        try """
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              speaker: { type: app-sink, capacity: 500 }
            links:
              - mic -> speaker
              - mic.events -> speaker.interrupt
            """.write(to: echo, atomically: true, encoding: .utf8)
        let audioPort = ServeTests.freePort()
        let (server, _) = try ServeTests.start(extra: """
              - name: echo
                protocol: audiosocket
                port: \(audioPort)
                graph: \(echo.path)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav(dir, rate: 8000)   // about 3 s
        // The whole recording at once; its echo is paced at real time and interrupted after a second.
        let out = try Self.call(audioPort, ["uuid", "audio:\(wav):0x10:0", "sleep:1", "dtmf:1", "sleep:1.5", "hangup", "wait:5"])
        let answer = try #require(out.first { $0.hasPrefix("answer type=0x10") }, "\(out)")
        #expect((Self.field(answer, "audio_s") ?? 9) < 1.6, "\(answer)")
        #expect((Self.field(answer, "rms") ?? 0) > 300, "\(answer)")
        // Without the digit the whole echo comes back.
        let whole = try Self.call(audioPort, ["uuid", "audio:\(wav):0x10:0", "sleep:5", "hangup", "wait:5"])
        let all = try #require(whole.first { $0.hasPrefix("answer type=0x10") }, "\(whole)")
        #expect((Self.field(all, "audio_s") ?? 0) > 2.9, "\(all)")
    }

    @Test("back-pressure: a caller sending 10 s of 8 kHz audio at 20x real time into a graph that takes it at 1x — the connection stops reading, what waits stays near 2 s of audio, every sample arrives")
    func floodIsHeldBackNotDropped() throws {
        let dir = tempDir()
        let out = dir.appendingPathComponent("out.wav").path
        let graph = dir.appendingPathComponent("slow.yaml")
        try """
            version: 1
            nodes:
              mic: { type: app-source, rate: 8000, channels: 1, capacity: 10 }
              out: { type: wav-sink, path: "\(out)", realtime: true }
            links:
              - mic -> out
            """.write(to: graph, atomically: true, encoding: .utf8)
        let audioPort = ServeTests.freePort()
        // The call ends at max_duration_s, after the graph has taken the 10 s: what it holds is finished, not stopped.
        let (server, port) = try ServeTests.start(extra: """
              - name: slow
                protocol: audiosocket
                port: \(audioPort)
                graph: \(graph.path)
                max_duration_s: 15
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        // 10 s of numbered samples (160 kB) in 20 ms audio messages at 20x; then the file is compared.
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", ["-c", """
            import socket, struct, time, uuid, wave
            sock = socket.create_connection(("127.0.0.1", \(audioPort)), timeout=60)
            def message(kind, payload=b""): return struct.pack(">BH", kind, len(payload)) + payload
            sock.sendall(message(0x01, uuid.uuid4().bytes))
            rate, seconds = 8000, 10
            n = rate * seconds
            audio = struct.pack("<%dh" % n, *[(i * 7) % 65536 - 32768 for i in range(n)])
            step = rate * 2 * 20 // 1000
            start = time.monotonic()
            for i in range(0, len(audio), step):
                sock.sendall(message(0x10, audio[i:i + step]))
                delay = start + (i + step) / (rate * 2) / 20 - time.monotonic()
                if delay > 0: time.sleep(delay)
            print("sent", len(audio), "in", round(time.monotonic() - start, 2), flush=True)
            got = b""
            while True:
                b = sock.recv(65536)
                if not b: break
                got += b
            print("closed", got.hex(), flush=True)
            with wave.open("\(out)") as w:
                frames = w.readframes(w.getnframes())
                print("file", w.getframerate(), w.getnchannels(), len(frames), "same", frames == audio, flush=True)
            """], timeout: 90)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("closed 000000"), "\(r.stdout)")     // voicepipe's hangup
        #expect(r.stdout.contains("file 8000 1 160000 same True"), "\(r.stdout)")
        let metrics = try ServeTests.http(port, "/metrics").body
        func value(_ name: String) -> Double? { ServeTests.metric(metrics, name) }
        // 2 s of 8 kHz mono is 32,000 bytes; one read of the socket may bring up to 4 x 64 KiB more.
        let peak = try #require(value("voicepipe_input_waiting_peak_bytes{route=\"slow\"}"), "\(metrics)")
        #expect(peak >= 32_000 && peak <= 32_000 + 4 * 65_536, "peak \(peak) bytes waiting")
        #expect((value("voicepipe_input_paused_total{route=\"slow\"}") ?? 0) >= 1, "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_total{route=\"slow\",outcome=\"limit\"} 1"), "\(metrics)")
    }
}
