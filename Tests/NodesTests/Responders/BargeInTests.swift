import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes

@Suite("barge-in")
struct BargeInTests {
    // MARK: - What a sink heard (pure)

    private func caption(_ text: String, turn: Int64 = 1, index: Int, offset: Int, total: Int? = nil) -> FrameMarks {
        FrameMarks(caption: Caption(text: text, turn: turn, index: index, offset: offset, total: total))
    }

    @Test func ledgerCutsAtTheWordPlayed() {
        var l = PlaybackLedger()
        // "one two three four." spoken over 1,000 samples, known whole; then a second sentence.
        for i in 0..<10 { l.queued(caption("one two three four.", index: 0, offset: i * 100, total: 1000), samples: 100) }
        for i in 0..<10 { l.queued(caption("five six.", index: 1, offset: i * 100, total: 1000), samples: 100) }
        l.played(through: 500)
        let heard = l.interrupt()
        #expect(heard?.text == "one two")
        #expect(heard?.samples == 500)
        #expect(heard?.discarded == 1500)
        // The rest of the cut answer, arriving late, is not played and not a new interruption.
        #expect(l.isCut(caption("five six.", index: 1, offset: 0)))
        l.queued(caption("five six.", index: 1, offset: 0), samples: 100)
        #expect(l.interrupt() == nil)
        #expect(!l.isCut(caption("a new answer.", turn: 2, index: 2, offset: 0)))
    }

    @Test func ledgerKeepsWholeSentencesAndEstimatesAnUnfinishedOne() {
        var l = PlaybackLedger()
        for i in 0..<8 { l.queued(caption("Hello there.", index: 0, offset: i * 100), samples: 100) }
        // The second sentence's end is not known yet: its length is estimated at the first one's pace.
        for i in 0..<4 { l.queued(caption("How are you today my friend?", index: 1, offset: i * 100), samples: 100) }
        l.played(through: 1000)
        let heard = l.interrupt()
        #expect(heard?.text.hasPrefix("Hello there.") == true)
        #expect(heard?.text != "Hello there. How are you today my friend?")
        #expect(heard?.samples == 1000)
        // Scripts written without spaces are cut at a character.
        var zh = PlaybackLedger()
        for i in 0..<10 { zh.queued(caption("今天天气很好。", index: 0, offset: i * 100, total: 1000), samples: 100) }
        zh.played(through: 600)
        #expect(zh.interrupt()?.text == "今天天气")
    }

    @Test func nothingWaitingIsNoInterruption() {
        var l = PlaybackLedger()
        l.queued(caption("Done.", index: 0, offset: 0, total: 100), samples: 100)
        l.played(through: 100)
        #expect(l.interrupt() == nil)
    }

    // MARK: - Loops through feedback inputs

    @Test func loopsCloseOnlyThroughFeedbackInputs() throws {
        let registry = BuiltinNodes.registry()
        func validate(_ links: String) throws -> ValidatedGraph {
            let yaml = """
                version: 1
                name: loop
                nodes:
                  mic: { type: tone-source, duration_ms: 100 }
                  aec: { type: aec }
                  tts: { type: tts }
                  chat: { type: chat, url: "http://127.0.0.1:9" }
                  asr: { type: asr }
                  speaker: { type: wav-sink, path: /tmp/x.wav }
                  turns: { type: barge-in }
                links:
                  - mic -> aec.in
                  - aec -> asr
                  - asr.text -> chat
                  - chat.text -> tts.text
                  - tts -> speaker
                  - asr.events -> turns
                  - speaker.events -> turns
                  - turns.interrupt -> chat.interrupt
                  - turns.interrupt -> speaker.interrupt
                \(links)
                """
            return try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:]), registry: registry)
        }
        let g = try validate("  - speaker.out -> aec.ref")
        let back = try #require(g.links.first { $0.toNode == "aec" && $0.toPort == "ref" })
        #expect(back.overflow == .dropOldest)
        #expect(back.closesLoop)
        #expect(g.links.first { $0.fromNode == "turns" && $0.toNode == "chat" }?.closesLoop == true)
        // A reference from an independent stream (the intercom's peer) closes no loop: it is read to its end.
        let intercom = try GraphValidator.load(path: IVHTest.packageRoot.appendingPathComponent("pipelines/intercom.yaml").path,
                                               registry: registry, environment: ["PEER": "127.0.0.1"])
        let ref = try #require(intercom.links.first { $0.toNode == "aec" && $0.toPort == "ref" })
        #expect(!ref.closesLoop)
        // Written as blocking, the loop could wait on itself: refused, with the link named.
        #expect(throws: GraphError.self) { try validate("  - { from: speaker.out, to: aec.ref, overflow: block }") }
        do {
            _ = try validate("  - { from: speaker.out, to: aec.ref, overflow: block }")
        } catch let e as GraphError {
            #expect("\(e)".contains("speaker.out -> aec.ref closes a loop"))
        }
        // A loop through an ordinary input is still a cycle.
        #expect(throws: GraphError.self) { try validate("  - tts -> aec.in") }
    }

    // MARK: - The loop, end to end

    /// A question, then (while the answer plays) the person speaking over it.
    private func conversation() throws -> (path: String, interruptAt: Double) {
        let dir = temporaryPath("talk")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let q = dir + "/q.wav", b = dir + "/b.wav", out = dir + "/talk.wav"
        try #require(try shell("flite", ["-voice", "slt", "-t", "What is the weather like today?", "-o", q]).status == 0)
        try #require(try shell("flite", ["-voice", "rms", "-t", "Stop. Tell me about tomorrow instead.", "-o", b]).status == 0)
        // 1 s silence, the question (about 2 s), 5 s for the answer to start playing, the interruption, 6 s.
        let qLength = Double(try readWAV(q).samples.count) / 16000
        let interruptAt = 1 + qLength + 6.0
        try #require(try shell("sox", [q, "-r", "16000", dir + "/q16.wav"]).status == 0)
        try #require(try shell("sox", [b, "-r", "16000", dir + "/b16.wav"]).status == 0)
        // Built step by step so the interruption starts exactly at interruptAt.
        try #require(try shell("sox", ["-n", "-r", "16000", "-c", "1", dir + "/s1.wav", "trim", "0", "1"]).status == 0)
        try #require(try shell("sox", ["-n", "-r", "16000", "-c", "1", dir + "/s6.wav", "trim", "0", "6"]).status == 0)
        try #require(try shell("sox", [dir + "/s1.wav", dir + "/q16.wav", dir + "/s6.wav", dir + "/b16.wav", dir + "/s6.wav", out]).status == 0)
        return (out, interruptAt)
    }

    @Test func speakingOverTheAnswerStopsItAndOnlyWhatWasHeardIsKept() async throws {
        guard haveTool("flite"), haveTool("sox") else { Issue.record("flite and sox are needed (scripts/install-deps.sh)"); return }
        let answer = "The weather today is sunny with a light breeze from the west. Later this evening some clouds will come in from the sea, and tomorrow it may rain a little."
        let server = try await ChatTestServer.start { _ in .stream(answer.split(separator: " ", omittingEmptySubsequences: false).enumerated().map { $0.offset == 0 ? String($0.element) : " " + $0.element }) }
        defer { Task { await server.shutdown() } }
        let (talk, interruptAt) = try conversation()
        let events = temporaryPath("events.jsonl")
        let heardPath = temporaryPath("heard.wav")
        let yaml = """
            version: 1
            name: talk
            nodes:
              mic: { type: file-source, path: "\(talk)", realtime: true }
              aec: { type: aec, reference: arrival }
              vad: { type: vad, stop_ms: 500, start_ms: 100 }
              slicer: { type: slicer, mode: utterance, slice_ms: 600, delivery: stream }
              asr: { type: asr, engine: pocketsphinx }
              chat: { type: chat, url: "\(server.baseURL)" }
              tts: { type: tts }
              speaker: { type: wav-sink, path: "\(heardPath)", realtime: true }
              turns: { type: barge-in }
              out: { type: jsonl-sink, path: "\(events)" }
            links:
              - mic -> aec.in
              - aec -> vad -> slicer -> asr
              - asr.text -> chat
              - chat.text -> tts.text
              - tts -> speaker
              - speaker.out -> aec.ref
              - vad.events -> turns
              - asr.events -> turns
              - chat.events -> turns
              - tts.events -> turns
              - speaker.events -> turns
              - turns.interrupt -> speaker.interrupt
              - turns.interrupt -> tts.interrupt
              - turns.interrupt -> chat.interrupt
              - vad.events -> out
              - chat.events -> out
              - tts.events -> out
              - speaker.events -> out
              - turns.events -> out
            """
        let graph = try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:]), registry: BuiltinNodes.registry())
        let pipeline = try Pipeline(graph: graph)
        _ = try await runPipeline(pipeline, timeout: .seconds(60))
        let lines = try String(contentsOfFile: events, encoding: .utf8).split(separator: "\n")
        let all = lines.compactMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
        func named(_ n: String) -> [[String: Any]] { all.filter { $0["event"] as? String == n } }

        // One interruption, soon after the person started speaking over the answer.
        let interrupted = named("interrupted")
        try #require(interrupted.count == 1, "events: \(lines.joined(separator: "\n"))")
        let cut = try #require(interrupted.first)
        let stopAt = try #require(cut["ts"] as? Double)
        #expect(stopAt > interruptAt && stopAt < interruptAt + 0.5, "stopped at \(stopAt) s, speech over it from \(interruptAt) s")
        #expect(named("barge_in").count == 1)
        // What was heard is the start of the answer, cut at a word, and as long as the audio written.
        let heard = try #require(cut["text"] as? String)
        let heardMs = try #require(cut["heard_ms"] as? Int)
        #expect(!heard.isEmpty && answer.hasPrefix(heard) && heard.count < answer.count, "heard: \(heard)")
        #expect(heardMs > 500 && heardMs < 8000)
        let written = try readWAV(heardPath).samples.count
        // The file holds the interrupted answer (what was heard) and then the whole second answer.
        let secondAnswer = named("tts_end").filter { ($0["ts"] as? Double ?? 0) > stopAt && $0["interrupted"] as? Bool != true }
            .compactMap { $0["duration_ms"] as? Int }.reduce(0, +)
        #expect(secondAnswer > 5000)
        #expect(abs(written * 1000 / 16000 - (heardMs + secondAnswer)) < 300, "written \(written) samples, heard \(heardMs) ms + \(secondAnswer) ms")
        #expect(named("tts_end").contains { $0["interrupted"] as? Bool == true })
        // The next request's history keeps only what was heard of the first answer.
        try #require(server.requests.count == 2)
        let second = server.requests[1].messages
        #expect(second.contains(["assistant", heard]), "history: \(second)")
        #expect(!second.contains { $0[0] == "assistant" && $0[1] == answer })
        // A latency event per answer, its stages adding up to the total.
        let latency = named("latency")
        #expect(latency.count == 2)
        for l in latency {
            let parts = ["endpoint_ms", "asr_ms", "respond_ms", "tts_ms", "playback_ms"].compactMap { l[$0] as? Int }
            #expect(parts.count == 5)
            let total = try #require(l["total_ms"] as? Int)
            #expect(abs(parts.reduce(0, +) - total) <= 2)
        }
    }

    @Test("an interrupt stops pulse-sink and alsa-sink at once, the device's buffer included; interrupted says what was heard",
          .enabled(if: AudioTestEnv.enabled), arguments: ["pulse-sink", "alsa-sink"])
    func interruptStopsTheDevice(type: String) async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let answer = "The weather today is sunny with a light breeze from the west. Later this evening some clouds will come in from the sea."
        var registry = BuiltinNodes.registry()
        registry.register(ScriptedSource.descriptor(type: "texts", kinds: [.text], steps: [.frame(.text(answer, pts: 7_000_000))]))
        // The interruption: one event, 1.5 s after the start.
        registry.register(ScriptedSource.descriptor(type: "barge", kinds: [.event],
                                                    steps: [.wait(.milliseconds(1500)), .frame(.event(Event("barge_in")))]))
        let device = type == "pulse-sink" ? sink.name : "pulse:DEVICE=\(sink.name)"
        let yaml = """
            version: 1
            name: stop
            nodes:
              src: { type: texts }
              barge: { type: barge }
              tts: { type: tts }
              spk: { type: \(type), device: "\(device)", rate: 16000, latency_ms: 200 }
            links:
              - src -> tts.text
              - tts -> spk
              - barge -> spk.interrupt
            """
        async let recording = recordMonitor(device: sink.monitor, seconds: 6)
        try await Task.sleep(for: .milliseconds(500))   // pacat (a child process) starts recording the monitor first
        let graph = try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:]), registry: registry)
        let events = try await runPipeline(try Pipeline(graph: graph), timeout: .seconds(20))
        let recorded = try await recording
        let cut = try #require(events.first { $0.name == "interrupted" }, "\(events.map(\.name))")
        let heardMs = try #require(cut["heard_ms"]?.intValue)
        let text = try #require(cut["text"]?.stringValue)
        // Playback began at once and was cut about 1.5 s in (the sink's buffer of 200 ms was not played out).
        #expect(heardMs > 1000 && heardMs < 1900, "heard \(heardMs) ms")
        #expect(!text.isEmpty && answer.hasPrefix(text) && text.count < answer.count / 2, "heard: \(text)")
        // What the monitor recorded: sound for about heard_ms, then silence — nothing of the rest of the answer.
        let blocks = stride(from: 0, to: recorded.count - 160, by: 160).map { i in
            recorded[i..<i + 160].reduce(0.0) { $0 + Double($1) * Double($1) } / 160
        }
        let loud = blocks.enumerated().filter { $0.element > 1e4 }.map(\.offset)   // above about -50 dBFS
        let first = try #require(loud.first), last = try #require(loud.last)
        let soundedMs = (last - first) * 10
        print("\(type): sound for \(soundedMs) ms, heard_ms \(heardMs)")
        #expect(soundedMs < 2000, "the answer went on after the interrupt: sound for \(soundedMs) ms")
        // heard_ms never says less than was audible; it may say a little more (the sound server holds more than
        // it reports as latency, ALSA's pulse plugin more so, and quiet word edges are not "loud" here).
        #expect(Int(heardMs) >= soundedMs - 150 && Int(heardMs) <= soundedMs + 500, "sound for \(soundedMs) ms, heard_ms \(heardMs)")
        #expect(events.contains { $0.name == "playback_start" })
    }

    @Test func aCoughDoesNotCutTheAnswerOff() async throws {
        // Events only: a VAD burst of 60 ms while the answer plays is ignored; 300 ms of speech is not.
        let h = try NodeHarness(BargeInNode.descriptor, parameters: ["min_speech_ms": 200])
        try await h.run { h in
            h.send(.event(Event("response_start", ts: 1.0)))
            h.send(.event(Event("tts_start", ts: 1.1)))
            h.send(.event(Event("speech_start", ts: 1.5, fields: [("media_ms", 1400), ("speech_ms", 100)])))
            h.send(.event(Event("speech_end", ts: 1.56, fields: [("media_ms", 1460), ("silence_ms", 0)])))
            h.send(.event(Event("speech_start", ts: 2.0, fields: [("media_ms", 1900), ("speech_ms", 300)])))
            #expect(await h.output("interrupt").wait(for: 1))
        }
        let out = h.output("interrupt").events
        #expect(out.map(\.name) == ["barge_in"])
        #expect(out.first?["media_ms"] == .int(1900))
    }
}
