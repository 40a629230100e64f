import Foundation
import Testing

/// `voicepipe serve`'s `twilio` route: a real server, and Twilio's side of a bidirectional Media Stream
/// played by Tests/Fixtures/twilio_client.py (written from Twilio's message reference, on
/// bench/serve_client.py's standard-library WebSocket) over loopback.
@Suite("serve: Twilio Media Streams route", .serialized, .timeLimit(.minutes(3)))
struct ServeTwilioTests {
    static let client = packageRoot.appendingPathComponent("Tests/Fixtures/twilio_client.py").path

    /// Serve with two `twilio` routes: `/twilio` recognizes the call and speaks each final transcript
    /// back (events to `events.jsonl` in `dir`); `/echo` sends the caller's audio straight back, and
    /// anything on the `mic`'s events (a DTMF digit) interrupts it.
    static func start(idleMs: Int = 15000, in dir: URL) throws -> (Running, Int, URL) {
        let events = dir.appendingPathComponent("events.jsonl")
        let answer = dir.appendingPathComponent("answer.yaml"), echo = dir.appendingPathComponent("echo.yaml")
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
            """.write(to: answer, atomically: true, encoding: .utf8)
        try """
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              speaker: { type: app-sink, capacity: 500 }
            links:
              - mic -> speaker
              - mic.events -> speaker.interrupt
            """.write(to: echo, atomically: true, encoding: .utf8)
        let (server, port) = try ServeTests.start(extra: """
              - name: phone
                protocol: twilio
                path: /twilio
                graph: \(answer.path)
                idle_timeout_ms: \(idleMs)
              - name: echo
                protocol: twilio
                path: /echo
                graph: \(echo.path)
            """, in: dir)
        return (server, port, events)
    }

    static func stream(_ port: Int, _ path: String, _ steps: [String], timeout: Double = 60) throws -> [String] {
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", [client, "ws://127.0.0.1:\(port)\(path)"] + steps, timeout: timeout)
        return r.stdout.split(separator: "\n").map(String.init) + (r.stderr.isEmpty ? [] : ["stderr: " + r.stderr])
    }

    static func field(_ line: String, _ key: String) -> Double? {
        line.split(separator: " ").first { $0.hasPrefix(key + "=") }.flatMap { Double($0.dropFirst(key.count + 1)) }
    }

    static func wav8k(_ dir: URL) throws -> String {
        let speech = try ServeTests.speech(dir)
        let out = dir.appendingPathComponent("speech8k.wav").path
        _ = try ServeTests.voicepipeLike("/usr/bin/sox", [speech, "-r", "8000", out])
        return out
    }

    @Test("A call: start, µ-law speech, a DTMF digit, stop — recognized, the digit an event, the spoken answer back as paced µ-law media and a mark after it")
    func callAnswered() throws {
        let dir = tempDir()
        let (server, port, events) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav8k(dir)
        let out = try Self.stream(port, "/twilio", ["connected", "start", "media:\(wav)", "dtmf:4", "silence:3000", "stop", "wait:5"])
        #expect(!out.contains { $0.hasPrefix("wrong streamSid") }, "\(out)")
        let media = try #require(out.first { $0.hasPrefix("media ") }, "\(out)")
        let seconds = try #require(Self.field(media, "audio_s")), span = try #require(Self.field(media, "span_s"))
        #expect(seconds > 0.2, "\(media)")
        // 160 bytes (20 ms) per message, sent at real time.
        #expect((Self.field(media, "messages") ?? 0) >= (Self.field(media, "bytes") ?? 0) / 160, "\(media)")
        #expect(span > seconds * 0.8 - 0.05 && span < seconds + 0.5, "\(media)")
        // The mark comes once the answer before it is sent: all of its audio has been received by then.
        let mark = try #require(out.first { $0.hasPrefix("mark answer-1") }, "\(out)")
        #expect(abs((Self.field(mark, "played") ?? 0) - seconds) < 0.001, "\(mark) after \(media)")
        #expect(out.last == "closed 1000", "\(out)")
        let lines = try String(contentsOf: events, encoding: .utf8).split(separator: "\n")
        #expect(lines.contains { $0.contains("\"final\":true") }, "\(lines)")
        #expect(lines.contains { $0.contains("\"node\":\"mic\"") && $0.contains("\"event\":\"dtmf\"") && $0.contains("\"digit\":\"4\"") }, "\(lines)")
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_total{route=\"phone\",outcome=\"completed\"} 1"))
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_active{route=\"phone\"} 0"))
    }

    @Test("Barge-in: an interruption of the answer sends `clear` and stops the media at once")
    func clearOnInterrupt() throws {
        let dir = tempDir()
        let (server, port, _) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav8k(dir)   // 3 s of speech and padding
        // The whole recording at once: its echo is paced at real time; a digit after a second interrupts it.
        let out = try Self.stream(port, "/echo", ["connected", "start", "media:\(wav):0", "sleep:1", "dtmf:1", "sleep:1.5", "stop", "wait:5"])
        let clear = try #require(out.first { $0.hasPrefix("clear") }, "\(out)")
        let media = try #require(out.first { $0.hasPrefix("media ") }, "\(out)")
        #expect((Self.field(media, "audio_s") ?? 9) < 1.6, "\(media)")
        // Speech came back as speech: µ-law decoded by the server and encoded again, then decoded here.
        #expect((Self.field(media, "rms") ?? 0) > 300, "\(media)")
        #expect((Self.field(clear, "at") ?? 0) > 0.7, "\(clear)")
        #expect(out.last == "closed 1000", "\(out)")
    }

    @Test("A mark of the client's own is echoed once the answer queued before it has been played out")
    func clientMark() throws {
        let dir = tempDir()
        let (server, port, _) = try Self.start(in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav8k(dir)   // 3 s, echoed
        let out = try Self.stream(port, "/echo", ["connected", "start", "media:\(wav):0", "sleep:0.3", "mark:probe", "sleep:4", "stop", "wait:5"])
        let media = try #require(out.first { $0.hasPrefix("media ") }, "\(out)")
        let mark = try #require(out.first { $0.hasPrefix("mark probe") }, "\(out)")
        let seconds = try #require(Self.field(media, "audio_s"))
        #expect(seconds > 2.9, "\(media)")
        // Echoed after all of the echo audio, about its duration after the first of it.
        #expect(Self.field(mark, "played") == seconds, "\(mark) / \(media)")
        #expect((Self.field(mark, "at") ?? 0) > seconds - 0.3, "\(mark)")
    }

    @Test("Bad input closes the stream with a close code, counted: not JSON, binary, media before start, another format, a second start")
    func malformed() throws {
        let dir = tempDir()
        let (server, port, _) = try Self.start(idleMs: 1500, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try Self.wav8k(dir)
        for (steps, code) in [(["connected", "text:hello"], 1007),
                              (["connected", "start", "text:{\"event\":\"media\",\"media\":{\"payload\":\"%%%\"}}"], 1007),
                              (["connected", "binary"], 1003),
                              (["connected", "media:\(wav):0"], 1002),
                              (["connected", "start:audio/x-alaw:8000"], 1008),
                              (["connected", "start", "start"], 1002)] {
            let out = try Self.stream(port, "/twilio", steps + ["wait:5"])
            #expect(out.last == "closed \(code)", "\(steps): \(out)")
        }
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"bad_message\"} 5"))
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"unsupported_format\"} 1"))
        // Nothing after start for idle_timeout_ms: closed, counted.
        #expect(try Self.stream(port, "/twilio", ["connected", "start", "wait:5"]).last == "closed 1000")
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_errors_total{route=\"phone\",code=\"idle\"} 1"))
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_active{route=\"phone\"} 0"))
    }

    @Test("A stream beyond max_sessions is closed with 1013 at its start; a message over max_frame_bytes with 1009")
    func busyAndTooLarge() throws {
        let dir = tempDir()
        let echo = dir.appendingPathComponent("echo.yaml")
        try """
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              speaker: { type: app-sink, capacity: 500 }
            links:
              - mic -> speaker
            """.write(to: echo, atomically: true, encoding: .utf8)
        let (server, port) = try ServeTests.start(maxSessions: 1, extra: """
              - name: echo
                protocol: twilio
                path: /echo
                graph: \(echo.path)
                max_frame_bytes: 4096
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let first = try Running("/usr/bin/python3", [Self.client, "ws://127.0.0.1:\(port)/echo", "connected", "start", "silence:2000", "stop", "wait:5"])
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_active{route=\"echo\"} 1"))
        // The call is on the console, by its callSid.
        let listed = try ServeTests.http(port, "/console/sessions.json").body
        #expect(listed.contains("\"route\":\"echo\"") && listed.contains("CA00000000000000000000000000000001"), "\(listed)")
        let second = try Self.stream(port, "/echo", ["connected", "start", "wait:5"])
        #expect(second.last == "closed 1013", "\(second)")
        #expect(first.wait(timeout: 30).stdout.hasSuffix("closed 1000\n"))
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_errors_total{route=\"echo\",code=\"busy\"} 1"))
        let big = try Self.stream(port, "/echo", ["connected", "start", "text:" + String(repeating: "x", count: 5000), "wait:5"])
        #expect(big.last == "closed 1009", "\(big)")
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_errors_total{route=\"echo\",code=\"message_too_large\"} 1"))
    }

    @Test("SIGTERM: open Twilio and AudioSocket calls end after the drain grace period, their queued answer played, with a close and a hangup")
    func drain() throws {
        let dir = tempDir()
        let echo = dir.appendingPathComponent("echo.yaml")
        try """
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              speaker: { type: app-sink, capacity: 500 }
            links:
              - mic -> speaker
            """.write(to: echo, atomically: true, encoding: .utf8)
        let audioPort = ServeTests.freePort()
        let (server, port) = try ServeTests.start(extra: """
              - name: echo
                protocol: twilio
                path: /echo
                graph: \(echo.path)
              - name: phone
                protocol: audiosocket
                port: \(audioPort)
                graph: \(echo.path)
            """, graceS: 1, in: dir)
        let twilio = try Running("/usr/bin/python3", [Self.client, "ws://127.0.0.1:\(port)/echo", "connected", "start", "silence:8000", "wait:5"])
        let call = try Running("/usr/bin/python3", [ServeAudioSocketTests.caller, "127.0.0.1", "\(audioPort)", "uuid", "silence:8000:0x10", "wait:5"])
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_active{route=\"phone\"} 1"))
        #expect(try ServeAudioSocketTests.metric(port, "voicepipe_sessions_active{route=\"echo\"} 1"))
        usleep(500_000)
        server.signal(SIGTERM)
        let stopped = server.wait(timeout: 30)
        #expect(stopped.status == 0, "\(stopped.stderr)")
        let t = twilio.wait(timeout: 30).stdout, a = call.wait(timeout: 30).stdout
        #expect(t.hasSuffix("closed 1000\n") && t.contains("media messages="), "\(t)")
        // µ-law silence (0xff) echoed is silence again.
        #expect(t.split(separator: "\n").first { $0.hasPrefix("media ") }.flatMap { Self.field(String($0), "rms") } ?? 99 < 10, "\(t)")
        #expect(a.hasSuffix("hangup\nclosed\n") && a.contains("answer type=0x10"), "\(a)")
    }

    @Test("back-pressure: a carrier sending 10 s of µ-law at 20x real time into a graph that takes it at 1x — the connection stops reading, what waits stays near 2 s of media messages, every sample arrives")
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
        // The call ends at max_duration_s, after the graph has taken the 10 s: what it holds is finished, not stopped.
        let (server, port) = try ServeTests.start(extra: """
              - name: slow
                protocol: twilio
                path: /slow
                graph: \(graph.path)
                max_duration_s: 15
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        // 10 s of µ-law (every byte value, 80 kB) in 20 ms media messages at 20x; then the file is compared.
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", ["-c", """
            import asyncio, base64, json, struct, sys, time, wave
            sys.path.insert(0, "\(packageRoot.appendingPathComponent("Tests/Fixtures").path)")
            import twilio_client as t
            async def main():
                ws = await t.WebSocket.connect("ws://127.0.0.1:\(port)/slow")
                await ws.send_text(json.dumps({"event": "connected", "protocol": "Call", "version": "1.0.0"}))
                await ws.send_text(json.dumps({"event": "start", "streamSid": t.STREAM, "start": {"streamSid": t.STREAM, "callSid": t.CALL,
                    "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}))
                seconds = 10
                ulaw = bytes((i * 7) % 256 for i in range(8000 * seconds))
                start = time.monotonic()
                for i in range(0, len(ulaw), 160):
                    await ws.send_text(json.dumps({"event": "media", "streamSid": t.STREAM, "sequenceNumber": str(i // 160 + 3),
                        "media": {"track": "inbound", "chunk": str(i // 160 + 1), "timestamp": str(i // 8),
                                  "payload": base64.b64encode(ulaw[i:i + 160]).decode()}}))
                    delay = start + (i + 160) / 8000 / 20 - time.monotonic()
                    if delay > 0: await asyncio.sleep(delay)
                print("sent", len(ulaw), "in", round(time.monotonic() - start, 2), flush=True)
                while (await asyncio.wait_for(ws.receive(), 60)) is not None: pass
                print("closed", ws.close_code, flush=True)
                expected = struct.pack("<%dh" % len(ulaw), *[t.unulaw(b) for b in ulaw])
                with wave.open("\(out)") as w:
                    got = w.readframes(w.getnframes())
                    print("file", w.getframerate(), w.getnchannels(), len(got), "same", got == expected, flush=True)
            asyncio.run(main())
            """], timeout: 90)
        #expect(r.status == 0, "\(r.stderr)")
        #expect(r.stdout.contains("closed 1000"), "\(r.stdout)")
        #expect(r.stdout.contains("file 8000 1 160000 same True"), "\(r.stdout)")
        let metrics = try ServeTests.http(port, "/metrics").body
        func value(_ name: String) -> Double? { ServeTests.metric(metrics, name) }
        // The limit is 40,000 bytes of messages (2 s of 20 ms media messages); one read of the socket may bring up to 4 x 64 KiB more.
        let peak = try #require(value("voicepipe_input_waiting_peak_bytes{route=\"slow\"}"), "\(metrics)")
        #expect(peak >= 40_000 && peak <= 40_000 + 4 * 65_536, "peak \(peak) bytes waiting")
        #expect((value("voicepipe_input_paused_total{route=\"slow\"}") ?? 0) >= 1, "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_total{route=\"slow\",outcome=\"limit\"} 1"), "\(metrics)")
    }
}
