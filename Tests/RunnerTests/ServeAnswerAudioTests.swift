import Foundation
import PipelineCore
import Testing
@testable import VoicepipeCLI
@testable import VoicepipeServe

/// What a session writes to its client, ordered and bounded: the notes around the answer audio, the
/// oldest audio dropped when the client falls behind, interrupts, the closing stats.
@Suite("serve: session outbox")
struct SessionOutboxTests {
    static let format = AudioFormat(sampleRate: 16000, channels: 1)

    /// 20 ms of 16 kHz mono, every sample `value`.
    static func frame(_ value: Int16 = 1) -> AudioBuffer { AudioBuffer(format: format, samples: [Int16](repeating: value, count: 320)) }

    static func drain(_ box: inout SessionOutbox) -> [SessionOutbox.Message] {
        var out: [SessionOutbox.Message] = []
        while let m = box.next() { out.append(m) }
        return out
    }

    @Test func formatIsAnnouncedOnceBeforeTheFirstAudioAndMarksFrameEachText() {
        var box = SessionOutbox(capacityMs: 1000)
        box.text("event 1")
        box.audio(Self.frame(0x0102), marks: FrameMarks(speechStart: true))
        box.audio(Self.frame())
        box.audio(Self.frame(), marks: FrameMarks(speechEnd: true))
        box.audio(AudioBuffer(format: AudioFormat(sampleRate: 24000, channels: 1), samples: [-2, 3]))
        let out = Self.drain(&box)
        let shape = out.map { m -> String in
            switch m {
            case .text(let t): t
            case .audio(let bytes, let nanos): "audio \(bytes.count) \(nanos / 1_000_000)ms"
            }
        }
        #expect(shape == [
            "event 1",
            #"{"type":"audio_format","rate":16000,"channels":1,"encoding":"s16le"}"#,
            #"{"type":"audio_start"}"#,
            "audio 640 20ms", "audio 640 20ms", "audio 640 20ms",
            #"{"type":"audio_end"}"#,
            #"{"type":"audio_format","rate":24000,"channels":1,"encoding":"s16le"}"#,
            "audio 4 0ms",
        ])
        // Little-endian s16.
        if case .audio(let bytes, _) = out[3] { #expect(Array(bytes.prefix(4)) == [0x02, 0x01, 0x02, 0x01]) } else { Issue.record("not audio: \(out[3])") }
        if case .audio(let bytes, _) = out[8] { #expect(bytes == [0xFE, 0xFF, 0x03, 0x00]) } else { Issue.record("not audio: \(out[8])") }
        #expect(box.counts.sentMessages == 4 && box.counts.droppedMessages == 0)
        #expect(box.isEmpty)
    }

    @Test func aClientBehindLosesTheOldestAudioNeverTheTexts() {
        var box = SessionOutbox(capacityMs: 100)                    // five 20 ms frames
        for i in 0..<12 {
            box.audio(Self.frame(Int16(i)))
            if i == 3 { box.text("tts_end") }
        }
        #expect(box.waitingAudioNanos == 100_000_000)
        #expect(box.counts.droppedMessages == 7 && box.counts.droppedNanos == 140_000_000)
        let out = Self.drain(&box)
        let firstSamples = out.compactMap { m -> Int16? in
            if case .audio(let b, _) = m { return Int16(bitPattern: UInt16(b[0]) | UInt16(b[1]) << 8) }
            return nil
        }
        #expect(firstSamples == [7, 8, 9, 10, 11])                 // the newest five
        #expect(out.contains(.text("tts_end")))
        #expect(out.first == .text(SessionOutbox.formatNote(Self.format)))
        #expect(box.statsNote == #"{"type":"audio_stats","sent_messages":5,"sent_ms":100,"dropped_messages":7,"dropped_ms":140,"flushed_messages":0,"flushed_ms":0}"#)
    }

    @Test func anInterruptFlushesTheWaitingAudioAndSaysSo() {
        var box = SessionOutbox(capacityMs: 1000)
        box.audio(Self.frame(), marks: FrameMarks(speechStart: true))
        box.audio(Self.frame())
        _ = box.next()
        _ = box.next()
        _ = box.next()                                              // format, start, one frame sent
        box.audio(Self.frame())
        box.audio(Self.frame())
        box.text("speech_start")
        let flushed = box.flushAudio()
        #expect(flushed.messages == 3 && flushed.nanos == 60_000_000)
        #expect(Self.drain(&box) == [.text("speech_start"), .text(#"{"type":"audio_flush","flushed_ms":60}"#)])
        // The end of a session: what the client did not take is dropped, texts stay.
        box.audio(Self.frame())
        box.text("last event")
        #expect(box.dropWaitingAudio().messages == 1)
        #expect(Self.drain(&box) == [.text("last event")])
        #expect(box.counts == SessionOutbox.Counts(sentMessages: 1, sentNanos: 20_000_000, droppedMessages: 1, droppedNanos: 20_000_000,
                                                   flushedMessages: 3, flushedNanos: 60_000_000))
    }
}

/// `voicepipe serve` with pipelines/serve-assistant.yaml: a client's spoken question goes through
/// recognition to a local OpenAI-compatible chat server (Python, standard library), the answer is
/// synthesized, and its audio comes back over the same WebSocket as binary messages.
@Suite("serve: answer audio", .serialized, .timeLimit(.minutes(4)))
struct ServeAnswerAudioTests {
    static let template = packageRoot.appendingPathComponent("pipelines/serve-assistant.yaml").path
    static let bench = packageRoot.appendingPathComponent("bench").path

    /// A streaming chat-completions server answering every request with `answer` (as a few SSE chunks),
    /// logging each request's last user message to `log`.
    static func chatServer(port: Int, answer: String, log: URL) throws -> Running {
        func quoted(_ s: String) throws -> String {
            let encoder = JSONEncoder()
            encoder.outputFormatting = .withoutEscapingSlashes
            return String(decoding: try encoder.encode(s), as: UTF8.self)
        }
        let script = """
            import json, sys
            from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
            ANSWER = \(try quoted(answer))
            class H(BaseHTTPRequestHandler):
                protocol_version = "HTTP/1.1"
                def log_message(self, *a): pass
                def do_POST(self):
                    if self.headers.get("Content-Length") is not None:
                        raw = self.rfile.read(int(self.headers["Content-Length"]))
                    else:                                   # chunked
                        raw = b""
                        while True:
                            n = int(self.rfile.readline().split(b";")[0], 16)
                            raw += self.rfile.read(n)
                            self.rfile.readline()
                            if n == 0: break
                    body = json.loads(raw)
                    with open(\(try quoted(log.path)), "a") as f:
                        f.write(self.path + " " + json.dumps(body["messages"][-1]) + "\\n")
                    words = ANSWER.split(" ")
                    pieces = [" ".join(words[i:i + 3]) + " " for i in range(0, len(words), 3)]
                    out = ""
                    for p in pieces:
                        out += "data: " + json.dumps({"choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]}) + "\\n\\n"
                    out += "data: " + json.dumps({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}) + "\\n\\ndata: [DONE]\\n\\n"
                    data = out.encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "text/event-stream")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
            ThreadingHTTPServer(("127.0.0.1", \(port)), H).serve_forever()
            """
        let server = try Running("/usr/bin/python3", ["-c", script])
        // Up once it accepts connections.
        for _ in 0..<100 {
            let probe = try ServeTests.voicepipeLike("/usr/bin/python3", ["-c", "import socket; socket.create_connection(('127.0.0.1', \(port)), 1)"])
            if probe.status == 0 { return server }
            usleep(100_000)
        }
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "chat server did not come up: \(server.wait(timeout: 1).stderr)"])
    }

    /// Starts `voicepipe serve` with one route, `assistant`, on the shipped template.
    static func startServe(chatPort: Int, routeExtra: String = "", in dir: URL) throws -> (Running, Int) {
        let port = ServeTests.freePort()
        let config = dir.appendingPathComponent("serve.yaml")
        try """
            listen: { host: 127.0.0.1, port: \(port) }
            max_sessions: 4
            drain_grace_s: 10
            routes:
              - name: assistant
                path: /ws/assistant
                protocol: websocket
                graph: \(template)\(routeExtra)
            """.write(to: config, atomically: true, encoding: .utf8)
        // flite: these tests are about carrying the answer's audio, and need much of it made fast.
        let server = try Running(voicepipeBinary, ["serve", config.path], environment: ["CHAT_URL": "http://127.0.0.1:\(chatPort)", "TTS": "flite"])
        for _ in 0..<100 {
            if (try? ServeTests.http(port, "/healthz").status) == 200 { return (server, port) }
            usleep(100_000)
        }
        throw CocoaError(.fileReadUnknown, userInfo: [NSLocalizedDescriptionKey: "serve did not come up: \(server.wait(timeout: 1).stderr)"])
    }

    /// A client that streams `wav` as fast as it can, sends `{"type":"end"}` and reads everything:
    /// prints each text message, `BINARY n` for each binary one (its bytes appended to `audioOut`),
    /// then `closed CODE`. With `neverRead`, it sends the same but reads nothing (its receive buffer
    /// made small) and holds the connection for `holdS` seconds.
    static func client(port: Int, wav: String, audioOut: URL, neverRead: Bool = false, holdS: Int = 0) throws -> Running {
        try Running("/usr/bin/python3", ["-c", """
            import asyncio, json, socket, sys
            sys.path.insert(0, "\(bench)")
            import serve_client as c
            async def main():
                url = "ws://127.0.0.1:\(port)/ws/assistant"
                audio, rate = c.pcm("\(wav)")
                if \(neverRead ? "True" : "False"):
                    s = socket.socket()
                    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
                    s.connect(("127.0.0.1", \(port)))
                    import base64, os
                    reader, writer = await asyncio.open_connection(sock=s)
                    key = base64.b64encode(os.urandom(16)).decode()
                    writer.write((f"GET /ws/assistant HTTP/1.1\\r\\nHost: x\\r\\nUpgrade: websocket\\r\\nConnection: Upgrade\\r\\n"
                                  f"Sec-WebSocket-Key: {key}\\r\\nSec-WebSocket-Version: 13\\r\\n\\r\\n").encode())
                    await writer.drain()
                    head = await reader.readuntil(b"\\r\\n\\r\\n")
                    print(head.split(b"\\r\\n")[0].decode(), flush=True)
                    ws = c.WebSocket(reader, writer)
                    await c.stream(ws, audio, rate, pace=0)
                    await ws.send_text(json.dumps({"type": "end"}))
                    print("sent", flush=True)
                    await asyncio.sleep(\(holdS))
                    return
                ws = await c.WebSocket.connect(url)
                async def reader():
                    with open("\(audioOut.path)", "wb") as f:
                        while True:
                            m = await ws.receive()
                            if m is None: break
                            if isinstance(m, str): print(m, flush=True)
                            else:
                                f.write(m)
                                print("BINARY", len(m), flush=True)
                task = asyncio.create_task(reader())
                await c.stream(ws, audio, rate, pace=0)
                await ws.send_text(json.dumps({"type": "end"}))
                await asyncio.wait_for(task, 90)
                print("closed", ws.close_code, flush=True)
            asyncio.run(main())
            """])
    }

    /// What a reading client got.
    struct Received {
        var lines: [Substring]
        var audio: [Int16]

        init(_ r: Finished, audio file: URL) throws {
            lines = r.stdout.split(separator: "\n")
            let bytes = [UInt8](try Data(contentsOf: file))
            audio = (0..<bytes.count / 2).map { Int16(bitPattern: UInt16(bytes[2 * $0]) | UInt16(bytes[2 * $0 + 1]) << 8) }
        }

        func events(_ name: String) -> [[String: Any]] {
            lines.compactMap { line in
                guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], o["event"] as? String == name else { return nil }
                return o
            }
        }

        func notes(_ type: String) -> [[String: Any]] {
            lines.compactMap { line in
                guard let o = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any], o["type"] as? String == type else { return nil }
                return o
            }
        }

        func index(_ predicate: (Substring) -> Bool) -> Int? { lines.firstIndex(where: predicate) }
        var binaryCount: Int { lines.filter { $0.hasPrefix("BINARY ") }.count }
        var rms: Double { audio.isEmpty ? 0 : (audio.reduce(0.0) { $0 + Double($1) * Double($1) } / Double(audio.count)).squareRoot() }
    }

    @Test("a spoken question through asr and chat: the answer's audio comes back as binary PCM after audio_format, as long as tts made it, with tts_start/tts_end, then audio_stats and a normal close")
    func answerAudio() throws {
        let dir = tempDir()
        let chatPort = ServeTests.freePort()
        let log = dir.appendingPathComponent("chat.log")
        let chat = try Self.chatServer(port: chatPort, answer: "The garage door is open now. Is there anything else?", log: log)
        defer { chat.signal(SIGTERM); _ = chat.wait(timeout: 5) }
        let (server, port) = try Self.startServe(chatPort: chatPort, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try ServeTests.speech(dir, "please open the garage door")
        let audioFile = dir.appendingPathComponent("answer.raw")
        let r = try Self.client(port: port, wav: wav, audioOut: audioFile).wait(timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        let got = try Received(r, audio: audioFile)
        // The question reached the chat server as the recognized text.
        let asked = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
        #expect(asked.hasPrefix("/v1/chat/completions") && asked.lowercased().contains("garage"), "\(asked)")
        // The format, once, before the first audio.
        let formats = got.notes("audio_format")
        #expect(formats.count == 1, "\(r.stdout)")
        #expect(formats.first?["rate"] as? Int == 16000 && formats.first?["channels"] as? Int == 1 && formats.first?["encoding"] as? String == "s16le")
        let formatAt = try #require(got.index { $0.contains("\"audio_format\"") })
        let firstBinary = try #require(got.index { $0.hasPrefix("BINARY ") }, "no audio: \(r.stdout)")
        #expect(formatAt < firstBinary)
        // Two sentences, two texts spoken: their events and the notes around each one's audio.
        let ends = got.events("tts_end")
        #expect(got.events("tts_start").count == 2 && ends.count == 2, "\(r.stdout)")
        #expect(got.notes("audio_start").count == 2 && got.notes("audio_end").count == 2)
        // As much audio as tts said it made (each text within a 20 ms frame), and speech, not silence.
        let ttsMs = ends.compactMap { $0["duration_ms"] as? Int }.reduce(0, +)
        let receivedMs = got.audio.count * 1000 / 16000
        #expect(ttsMs > 1500, "\(r.stdout)")
        #expect(abs(receivedMs - ttsMs) <= 40, "received \(receivedMs) ms, tts made \(ttsMs) ms")
        #expect(got.rms > 300, "rms \(got.rms)")
        // The last audio and events came before the stats and the normal close; nothing dropped.
        let stats = try #require(got.notes("audio_stats").first, "\(r.stdout)")
        #expect(stats["dropped_messages"] as? Int == 0)
        #expect(stats["sent_messages"] as? Int == got.binaryCount)
        #expect(abs((stats["sent_ms"] as? Int ?? 0) - receivedMs) <= 1)
        let statsAt = try #require(got.index { $0.contains("\"audio_stats\"") })
        #expect(try #require(got.lines.lastIndex { $0.hasPrefix("BINARY ") }) < statsAt)
        #expect(try #require(got.lines.lastIndex { $0.contains("\"tts_end\"") }) < statsAt)
        #expect(r.stdout.hasSuffix("closed 1000\n"), "\(r.stdout)")
        let metrics = try ServeTests.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_sessions_total{route=\"assistant\",outcome=\"completed\"} 1"), "\(metrics)")
        #expect(metrics.contains("voicepipe_answer_audio_seconds_total{route=\"assistant\"}"), "\(metrics)")
        #expect(!metrics.contains("voicepipe_answer_audio_dropped_total{route=\"assistant\"}"), "\(metrics)")
    }

    @Test("a client that never reads: its answer audio is dropped oldest first and counted, the server stays responsive, another session completes with its whole answer")
    func clientThatNeverReads() throws {
        let dir = tempDir()
        let chatPort = ServeTests.freePort()
        // About 150 s of speech (4.8 MB): far more than answer_buffer_ms and the kernel's socket buffers
        // (which on loopback grow to a few MB) hold. A reading client is at most a sentence behind.
        let sentence = "This is a long answer that keeps talking so that the audio is much larger than any buffer on the way."
        let sentences = 30
        let chat = try Self.chatServer(port: chatPort, answer: Array(repeating: sentence, count: sentences).joined(separator: " "),
                                       log: dir.appendingPathComponent("chat.log"))
        defer { chat.signal(SIGTERM); _ = chat.wait(timeout: 5) }
        let (server, port) = try Self.startServe(chatPort: chatPort, routeExtra: "\n    answer_buffer_ms: 10000", in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let wav = try ServeTests.speech(dir, "please open the garage door")
        let stuck = try Self.client(port: port, wav: wav, audioOut: dir.appendingPathComponent("unused.raw"), neverRead: true, holdS: 60)
        defer { stuck.signal(SIGTERM); _ = stuck.wait(timeout: 5) }
        // Drops begin once the stuck session's answer is being synthesized.
        var metrics = ""
        for _ in 0..<600 {
            metrics = try ServeTests.http(port, "/metrics").body
            if metrics.contains("voicepipe_answer_audio_dropped_total{route=\"assistant\"}") { break }
            usleep(100_000)
        }
        #expect(metrics.contains("voicepipe_answer_audio_dropped_total{route=\"assistant\"}"), "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_active{route=\"assistant\"} 1"), "\(metrics)")
        #expect(try ServeTests.http(port, "/healthz").status == 200)
        // Meanwhile another client gets its whole answer.
        let audioFile = dir.appendingPathComponent("answer.raw")
        let r = try Self.client(port: port, wav: wav, audioOut: audioFile).wait(timeout: 150)
        #expect(r.status == 0, "\(r.stderr)")
        let got = try Received(r, audio: audioFile)
        let ttsMs = got.events("tts_end").compactMap { $0["duration_ms"] as? Int }.reduce(0, +)
        let receivedMs = got.audio.count * 1000 / 16000
        #expect(ttsMs > 100_000, "\(r.stdout.suffix(2000))")
        #expect(abs(receivedMs - ttsMs) <= sentences * 40, "received \(receivedMs) ms, tts made \(ttsMs) ms")
        #expect(got.notes("audio_stats").first?["dropped_messages"] as? Int == 0, "\(r.stdout.suffix(2000))")
        #expect(r.stdout.hasSuffix("closed 1000\n"))
        // The stuck session ends too (after the stall limit); most of its answer was dropped.
        var ended = false
        for _ in 0..<300 {
            metrics = try ServeTests.http(port, "/metrics").body
            if metrics.contains("voicepipe_sessions_total{route=\"assistant\",outcome=\"completed\"} 2") { ended = true; break }
            usleep(100_000)
        }
        #expect(ended, "\(metrics)")
        let dropped = metrics.split(separator: "\n").first { $0.hasPrefix("voicepipe_answer_audio_dropped_seconds_total{route=\"assistant\"}") }
        let droppedS = dropped.flatMap { $0.split(separator: " ").last }.flatMap { Double($0) } ?? 0
        #expect(droppedS > 30, "\(metrics)")
        #expect(metrics.contains("voicepipe_sessions_active{route=\"assistant\"} 0"), "\(metrics)")
    }

    @Test("events reaching the sink's interrupt input (vad.events -> speaker.interrupt) tell the client to flush: audio_flush after speech over the answer")
    func interruptSendsFlush() throws {
        let dir = tempDir()
        let chatPort = ServeTests.freePort()
        let chat = try Self.chatServer(port: chatPort, answer: "The garage door is open now.", log: dir.appendingPathComponent("chat.log"))
        defer { chat.signal(SIGTERM); _ = chat.wait(timeout: 5) }
        let template = try writeGraph("""
            version: 1
            nodes:
              mic:     { type: app-source, rate: 16000, channels: 1, capacity: 500 }
              vad:     { type: vad, stop_ms: 350 }
              slicer:  { type: slicer, mode: utterance, slice_ms: 600, delivery: stream }
              asr:     { type: asr, engine: pocketsphinx }
              chat:    { type: chat, url: "${CHAT_URL}" }
              tts:     { type: tts }
              speaker: { type: app-sink, capacity: 200 }
            links:
              - mic -> vad -> slicer -> asr
              - asr.text -> chat
              - chat.text -> tts -> speaker
              - vad.events -> speaker.interrupt
            """, in: dir, name: "interruptible.yaml")
        let port = ServeTests.freePort()
        let config = dir.appendingPathComponent("serve.yaml")
        try """
            listen: { host: 127.0.0.1, port: \(port) }
            routes:
              - name: assistant
                path: /ws/assistant
                protocol: websocket
                graph: \(template)
            """.write(to: config, atomically: true, encoding: .utf8)
        // flite: these tests are about carrying the answer's audio, and need much of it made fast.
        let server = try Running(voicepipeBinary, ["serve", config.path], environment: ["CHAT_URL": "http://127.0.0.1:\(chatPort)", "TTS": "flite"])
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        var up = false
        for _ in 0..<100 where !up {
            up = (try? ServeTests.http(port, "/healthz").status) == 200
            if !up { usleep(100_000) }
        }
        try #require(up, "\(server.wait(timeout: 1).stderr)")
        let wav = try ServeTests.speech(dir, "please open the garage door")
        // Speaks, waits for the whole answer (audio_end), speaks again, ends.
        let r = try ServeTests.voicepipeLike("/usr/bin/python3", ["-c", """
            import asyncio, json, sys
            sys.path.insert(0, "\(Self.bench)")
            import serve_client as c
            async def main():
                ws = await c.WebSocket.connect("ws://127.0.0.1:\(port)/ws/assistant")
                audio, rate = c.pcm("\(wav)")
                answered = asyncio.Event()
                async def reader():
                    while True:
                        m = await ws.receive()
                        if m is None: break
                        if isinstance(m, str):
                            print(m, flush=True)
                            if '"audio_end"' in m: answered.set()
                        else:
                            print("BINARY", len(m), flush=True)
                task = asyncio.create_task(reader())
                await c.stream(ws, audio, rate, pace=0)
                await asyncio.wait_for(answered.wait(), 60)
                print("SECOND", flush=True)
                await c.stream(ws, audio, rate, pace=0)
                await ws.send_text(json.dumps({"type": "end"}))
                await asyncio.wait_for(task, 60)
                print("closed", ws.close_code, flush=True)
            asyncio.run(main())
            """], timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n")
        let second = try #require(lines.firstIndex(of: "SECOND"), "\(r.stdout)")
        // Nothing was flushed before the person spoke over the answer; after, a flush note follows the VAD's speech_start.
        #expect(!lines[..<second].contains { $0.contains("\"audio_flush\"") }, "\(r.stdout)")
        let speech = try #require(lines[second...].firstIndex { $0.contains("\"speech_start\"") }, "\(r.stdout)")
        let flush = try #require(lines[second...].firstIndex { $0.contains("\"audio_flush\"") }, "\(r.stdout)")
        #expect(speech < flush)
        #expect(r.stdout.hasSuffix("closed 1000\n"), "\(r.stdout)")
    }

    @Test("a template answering with audio is refused on a non-websocket route, and with two audio app-sinks; the shipped serve.yaml checks")
    func configurationChecks() throws {
        let dir = tempDir()
        let twoSinks = try writeGraph("""
            version: 1
            nodes:
              mic: { type: app-source, rate: 16000, channels: 1 }
              a: { type: app-sink }
              b: { type: app-sink }
            links: [ "mic -> a", "mic -> b" ]
            """, in: dir, name: "two.yaml")
        let config = dir.appendingPathComponent("serve.yaml")
        try """
            listen: { host: 127.0.0.1, port: 0 }
            routes:
              - name: asr
                path: /asr/v2/{appid}
                protocol: tencent-asr
                graph: \(Self.template)
                keys: { "1250000001": { secret_id: AKIDtest, secret_key: k } }
              - name: two
                path: /ws/two
                protocol: websocket
                graph: \(twoSinks)
              - name: fine
                path: /ws/fine
                protocol: websocket
                graph: \(Self.template)
                answer_buffer_ms: 50
            """.write(to: config, atomically: true, encoding: .utf8)
        let r = try voicepipe(["serve", config.path, "--check"])
        #expect(r.status == 2, "\(r.stderr)")
        #expect(r.stderr.contains("route 'asr'") && r.stderr.contains("only websocket, audiosocket, twilio and sip routes send back"), "\(r.stderr)")
        #expect(r.stderr.contains("route 'two'") && r.stderr.contains("2 app-sink nodes taking audio"), "\(r.stderr)")
        #expect(r.stderr.contains("answer_buffer_ms"), "\(r.stderr)")
        let shipped = try voicepipe(["serve", packageRoot.appendingPathComponent("pipelines/serve.yaml").path, "--check"])
        #expect(shipped.status == 0, "\(shipped.stderr)")
        let validate = try voicepipe(["validate", Self.template])
        #expect(validate.status == 0, "\(validate.stderr)")
    }
}
