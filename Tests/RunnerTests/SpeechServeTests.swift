import Foundation
import Testing

/// Text in from standard input (`text-source`, pipelines/say.yaml) and voicepipe as a Wyoming speech
/// synthesis server (pipelines/serve-tts.yaml), with the real Piper voice (scripts/install-piper.sh),
/// checked by the `wyoming` package's own client and by faster-whisper.
@Suite("Speech out: say.yaml and the Wyoming TTS route", .serialized)
struct SpeechServeTests {
    static let voice = packageRoot.appendingPathComponent(".deps/piper/voices/en_US-joe-medium.onnx").path
    static let python = packageRoot.appendingPathComponent(".deps/venv/bin/python3").path

    static func requireVoice(sourceLocation: Testing.SourceLocation = #_sourceLocation) throws {
        try #require(FileManager.default.fileExists(atPath: voice), "the Piper voice is missing: run scripts/install-piper.sh",
                     sourceLocation: sourceLocation)
    }

    /// Duration in seconds of a 16-bit WAV file (from its size: a 44-byte header).
    static func seconds(_ wav: String, rate: Int) throws -> Double {
        let size = try FileManager.default.attributesOfItem(atPath: wav)[.size] as? Int ?? 0
        return Double(size - 44) / Double(2 * rate)
    }

    /// faster-whisper's text for each file (Tests/Fixtures/transcribe.py).
    static func transcribe(_ files: [String]) throws -> [String] {
        let r = try ServeTests.voicepipeLike(python, [packageRoot.appendingPathComponent("Tests/Fixtures/transcribe.py").path] + files, timeout: 180)
        #expect(r.status == 0, "\(r.stderr)")
        return r.stdout.split(separator: "\n").map(String.init)
    }

    @Test("echo text | voicepipe run pipelines/say.yaml speaks each line, with piper, into a WAV file")
    func sayFromStandardInput() throws {
        try Self.requireVoice()
        let dir = tempDir()
        let wav = dir.appendingPathComponent("said.wav").path
        let command = "printf 'Good morning.\\n\\nThe kitchen lights are on.\\n' | '\(voicepipeBinary)' run pipelines/say.yaml "
            + "--set speaker.type=wav-sink --set speaker.path='\(wav)'"
        let r = try ServeTests.voicepipeLike("/bin/sh", ["-c", command], timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        let ends = r.stdout.split(separator: "\n").filter { $0.contains("\"tts_end\"") }
        #expect(ends.count == 2, "\(r.stdout)")
        #expect(!r.stdout.contains("tts_fallback") && !r.stdout.contains("\"error\""), "\(r.stdout)")
        let seconds = try Self.seconds(wav, rate: 22050)
        #expect(seconds > 1.5 && seconds < 8, "\(seconds) s")
        let heard = try Self.transcribe([wav]).joined(separator: " ").lowercased()
        // Both lines were said; under load the recognizer has missed "kitchen lights" as a pair: one word of each line is enough.
        #expect(heard.contains("good morning") && heard.contains("kitchen"), "\(heard)")
    }

    @Test("text-source with a missing file fails naming it; an empty input ends at once with nothing said")
    func textSourceEdges() throws {
        let dir = tempDir()
        let missing = try voicepipe(["run", "pipelines/say.yaml", "--set", "text.path=/nowhere/text.txt", "--set", "speaker.type=null-sink"], timeout: 60)
        #expect(missing.status == 1 && missing.stderr.contains("/nowhere/text.txt"), "\(missing.stderr)")
        let wav = dir.appendingPathComponent("empty.wav").path
        let empty = try ServeTests.voicepipeLike("/bin/sh", ["-c", "printf '\\n  \\n' | '\(voicepipeBinary)' run pipelines/say.yaml --set speaker.type=wav-sink --set speaker.path='\(wav)'"],
                                                 timeout: 60)
        #expect(empty.status == 0, "\(empty.stderr)")
        #expect(!empty.stdout.contains("tts_start"), "\(empty.stdout)")
    }

    @Test("Wyoming TTS route: describe lists the piper voice; synthesize and streamed synthesis answer with audio Whisper hears")
    func wyomingSynthesis() throws {
        try Self.requireVoice()
        let dir = tempDir()
        let ttsPort = ServeTests.freePort()
        let template = packageRoot.appendingPathComponent("pipelines/serve-tts.yaml").path
        let (server, port) = try ServeTests.start(extra: """
              - name: tts
                protocol: wyoming
                port: \(ttsPort)
                graph: \(template)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let client = packageRoot.appendingPathComponent("Tests/Fixtures/wyoming_tts_client.py").path
        let texts = ["Please turn on the lights in the kitchen.", "The weather is nice today. We are going to the beach."]
        let r = try ServeTests.voicepipeLike(Self.python, [client, "127.0.0.1", "\(ttsPort)", dir.path] + texts, timeout: 120)
        #expect(r.status == 0, "\(r.stderr)")
        let lines = r.stdout.split(separator: "\n").map(String.init)
        #expect(lines.first?.hasPrefix("info") == true && lines.first?.contains("\"voices\": [\"en_US-joe-medium\"]") == true
                && lines.first?.contains("\"asr\": []") == true && lines.first?.contains("\"streaming\": [true]") == true, "\(r.stdout)")
        let audio = lines.filter { $0.hasPrefix("audio ") }.map { $0.split(separator: " ") }
        #expect(audio.count == 2 && audio.allSatisfy { $0[1] == "22050" && $0[2] == "2" && $0[3] == "1" && Int($0[4]) ?? 0 > 5 }, "\(r.stdout)")
        let durations = audio.compactMap { Double($0[5]) }
        #expect(durations.count == 2 && durations[0] > 1.5 && durations[1] > durations[0], "\(durations)")
        // Streamed: a text in chunks of seven characters, then synthesize-stop.
        let streamed = dir.appendingPathComponent("stream")
        try FileManager.default.createDirectory(at: streamed, withIntermediateDirectories: true)
        let s = try ServeTests.voicepipeLike(Self.python, [client, "127.0.0.1", "\(ttsPort)", streamed.path, "--stream",
                                                          "Can you call Michael at seven thirty? I will be home late tonight."], timeout: 120)
        #expect(s.status == 0, "\(s.stderr)")
        let slines = s.stdout.split(separator: "\n").map(String.init)
        #expect(slines.filter { $0.hasPrefix("audio ") }.count == 1 && slines.last == "stopped", "\(s.stdout)")
        let heard = try Self.transcribe([dir.appendingPathComponent("0.wav").path, dir.appendingPathComponent("1.wav").path,
                                         streamed.appendingPathComponent("0.wav").path]).map { $0.lowercased() }
        #expect(heard.count == 3, "\(heard)")
        #expect(heard.first?.contains("lights in the kitchen") == true, "\(heard)")
        #expect(heard.dropFirst().first?.contains("beach") == true, "\(heard)")
        #expect(heard.last?.contains("michael") == true && heard.last?.contains("late tonight") == true, "\(heard)")
        let metrics = try ServeTests.http(port, "/metrics").body
        #expect(metrics.contains("voicepipe_sessions_total{route=\"tts\",outcome=\"completed\"} 3"), "\(metrics)")
    }

    @Test("Wyoming TTS route under bad requests: a synthesize without text is an error, empty text is empty audio; the connection stays usable")
    func wyomingBadRequests() throws {
        try Self.requireVoice()
        let dir = tempDir()
        let ttsPort = ServeTests.freePort()
        let template = packageRoot.appendingPathComponent("pipelines/serve-tts.yaml").path
        let (server, _) = try ServeTests.start(extra: """
              - name: tts
                protocol: wyoming
                port: \(ttsPort)
                graph: \(template)
            """, in: dir)
        defer { server.signal(SIGTERM); _ = server.wait(timeout: 30) }
        let script = """
            import asyncio, sys
            from wyoming.client import AsyncTcpClient
            from wyoming.event import Event
            from wyoming.tts import Synthesize
            async def main():
                async with AsyncTcpClient("127.0.0.1", int(sys.argv[1])) as c:
                    await c.write_event(Event(type="synthesize", data={"voice": {"name": "x"}}))
                    for t in ["", "?!", "\\x00\\x1b\\x07", "Hi there."]:
                        await c.write_event(Synthesize(text=t).event())
                    stops = 0
                    while stops < 4:
                        e = await asyncio.wait_for(c.read_event(), 60)
                        if e is None: print("closed"); return
                        print(e.type, e.data.get("code", ""), len(e.payload or b""), flush=True)
                        if e.type == "audio-stop": stops += 1
            asyncio.run(main())
            """
        let r = try ServeTests.voicepipeLike(Self.python, ["-c", script, "\(ttsPort)"], timeout: 90)
        #expect(r.status == 0, "\(r.stderr)")
        let text = r.stdout
        #expect(text.contains("error") && text.contains("bad_message"), "\(text)")
        // One answer per text, only the last with audio.
        var chunks: [Int] = []
        for line in text.split(separator: "\n") {
            if line.hasPrefix("audio-start") { chunks.append(0) }
            if line.hasPrefix("audio-chunk"), !chunks.isEmpty { chunks[chunks.count - 1] += 1 }
        }
        #expect(chunks.count == 4 && chunks.prefix(3).allSatisfy { $0 == 0 } && (chunks.last ?? 0) >= 5, "\(chunks): \(text)")
    }
}
