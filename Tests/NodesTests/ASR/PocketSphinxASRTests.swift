import Foundation
import Synchronization
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// The `asr` node with the embedded PocketSphinx engine, on speech spoken by flite at test time.
@Suite("PocketSphinx ASR")
struct PocketSphinxASRTests {
    static let sentences = [
        "the weather is nice today",
        "please turn on the lights in the kitchen",
        "i would like a cup of coffee",
        "we need more information about the project",
        "can you help me find my keys",
        "my phone number is one two three four",
    ]

    /// file-source -> vad -> asr, plus `extraNodes` and `extraLinks` (YAML lines).
    static func graph(_ path: String, asr: String = "{ type: asr }", extraNodes: [String] = [], extraLinks: [String] = []) -> String {
        let nodes = ["src: { type: file-source, path: \"\(path)\" }", "vad: { type: vad, stop_ms: 500 }", "asr: \(asr)"]
        let links = ["src -> vad -> asr"] + extraLinks
        return "version: 1\nname: asr-test\nnodes:\n"
            + (nodes + extraNodes).map { "  \($0)\n" }.joined()
            + "links:\n" + links.map { "  - \($0)\n" }.joined()
    }

    /// Word error rate measured on these sentences through the vad: 2/36 = 0.056 for slt
    /// ("number is" heard as "numbers"), 0 for rms; the bound leaves margin for model or flite updates.
    static let werBound = 0.15

    @Test("recognizes flite voices, one utterance per sentence, with a low word error rate",
          arguments: ["slt", "rms"])
    func recognizesFlite(voice: String) async throws {
        let wav = try Speech.wav(Self.sentences, voice: voice)
        let events = try await runGraph(Self.graph(wav))
        #expect(events.named("error").isEmpty)
        #expect(events.named("utterance_start").count == Self.sentences.count)
        #expect(events.named("utterance_end").count == Self.sentences.count)
        #expect(events.finalTexts.count == Self.sentences.count)
        let finished = try #require(events.named("finished").first?["text"]?.stringValue)
        let reference = Self.sentences.joined(separator: " ")
        let wer = Speech.wordErrorRate(reference: reference, hypothesis: finished)
        #expect(wer <= Self.werBound, "WER \(wer) for \(voice): \(finished)")
        // finished carries the whole session's final text.
        #expect(finished == events.finalTexts.joined(separator: " "))
    }

    @Test("a JSGF grammar gives exact results", arguments: ["slt", "rms"])
    func grammar(voice: String) async throws {
        let grammar = temporaryPath("commands.gram")
        try """
        #JSGF V1.0;
        grammar commands;
        public <command> = <action> the <thing> [in the <room>];
        <action> = turn on | turn off | open | close;
        <thing> = lights | door | window | radio;
        <room> = kitchen | bedroom | garage;
        """.write(toFile: grammar, atomically: true, encoding: .utf8)
        let commands = ["turn on the lights in the kitchen", "close the window", "open the door in the garage", "turn off the radio"]
        let wav = try Speech.wav(commands, voice: voice)
        let events = try await runGraph(Self.graph(wav, asr: "{ type: asr, jsgf: \"\(grammar)\" }"))
        #expect(events.finalTexts == commands)
    }

    @Test("keyphrase mode spots exactly the phrase", arguments: ["slt", "rms"])
    func keyphrase(voice: String) async throws {
        let wav = try Speech.wav(["good morning", "hello computer", "what is the weather like"], voice: voice)
        let events = try await runGraph(Self.graph(wav, asr: "{ type: asr, keyphrase: \"hello computer\" }"))
        #expect(events.finalTexts == ["", "hello computer", ""])
        #expect(events.named("finished").first?["text"]?.stringValue == "hello computer")
    }

    @Test("partials arrive before the final of each utterance; the text port carries the finals")
    func partialsAndTextPort() async throws {
        let wav = try Speech.wav(Array(Self.sentences.prefix(2)), voice: "slt")
        let out = temporaryPath("asr.jsonl")
        let events = try await runGraph(Self.graph(wav, asr: "{ type: asr, partial_interval_ms: 200 }",
                                                   extraNodes: ["out: { type: jsonl-sink, path: \"\(out)\" }"], extraLinks: ["asr.text -> out"]))
        var finalsSeen = Set<String>()
        var partials: [String: Int] = [:]
        var started = Set<String>()
        for e in events {
            let voice = e["voice_id"]?.stringValue ?? ""
            switch e.name {
            case "utterance_start": started.insert(voice)
            case "transcript":
                #expect(started.contains(voice), "transcript before utterance_start")
                if e["final"]?.boolValue == true {
                    finalsSeen.insert(voice)
                } else {
                    #expect(!finalsSeen.contains(voice), "partial after the final")
                    partials[voice, default: 0] += 1
                }
                let start = e["start_ms"]?.intValue ?? -1, end = e["end_ms"]?.intValue ?? -1
                #expect(start >= 0 && end > start)
            case "utterance_end": #expect(finalsSeen.contains(voice), "utterance_end before the final")
            default: break
            }
        }
        #expect(finalsSeen.count == 2)
        #expect(partials.count == 2 && partials.values.allSatisfy { $0 >= 2 })
        let texts = try readJSONLines(out).filter { $0["event"] as? String == "text" }.compactMap { $0["text"] as? String }
        #expect(texts == events.finalTexts)
        #expect(texts == Array(Self.sentences.prefix(2)))
    }

    /// The package's root directory.
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path

    @Test("the main job, pipelines/recognizer-file.yaml, falls back to PocketSphinx without a Whisper model and transcribes the bundled sample")
    func recognizerFile() async throws {
        var environment = ProcessInfo.processInfo.environment
        environment["INPUT"] = Self.root + "/samples/sentences.wav"
        environment["VOICEPIPE_WHISPER_MODEL"] = "/nonexistent/ggml-tiny.en.bin"
        let pipeline = try Pipeline(path: Self.root + "/pipelines/recognizer-file.yaml", registry: BuiltinNodes.registry(),
                                    overrides: [try Override(parsing: "out.path=" + temporaryPath("out.jsonl"))],
                                    environment: environment)
        let events = try await runPipeline(pipeline)
        #expect(events.finalTexts == Array(Self.sentences.prefix(4)))
        #expect(events.named("finished").first?["text"]?.stringValue == Self.sentences.prefix(4).joined(separator: " "))
    }

    @Test("with no vad upstream, the node's own endpointer splits the bundled sample")
    func ownEndpointer() async throws {
        let root = Self.root
        let events = try await runGraph("""
        version: 1
        name: endpointer
        nodes:
          src: { type: file-source, path: "\(root)/samples/sentences.wav" }
          asr: { type: asr }
        links:
          - src -> asr
        """)
        #expect(events.finalTexts == Array(Self.sentences.prefix(4)))
    }

    @Test("validation rejects audio that is not 16 kHz mono and names the fix")
    func rejectsOtherFormats() throws {
        let yaml = """
        version: 1
        name: bad
        nodes:
          src: { type: tone-source, rate: 44100, channels: 2, duration_ms: 100 }
          asr: { type: asr }
        links:
          - src -> asr
        """
        #expect {
            _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
        } throws: { error in
            "\(error)".contains("resample") && "\(error)".contains("16000 Hz mono")
        }
    }

    @Test("validation reports conflicting searches and missing files")
    func checksParameters() throws {
        let yaml = """
        version: 1
        name: bad
        nodes:
          src: { type: tone-source, duration_ms: 100 }
          asr: { type: asr, jsgf: /nonexistent/g.gram, keyphrase: "hello", model_dir: /nonexistent/model }
        links:
          - src -> asr
        """
        #expect {
            _ = try Pipeline(yaml: yaml, registry: BuiltinNodes.registry())
        } throws: { error in
            let text = "\(error)"
            return text.contains("only one of jsgf, keyphrase") && text.contains("/nonexistent/g.gram not found")
                && text.contains("/nonexistent/model not found")
        }
    }

    @Test("alternatives: N gives up to N distinct readings with confidences, best first")
    func alternatives() async throws {
        let wav = try Speech.wav(Array(Self.sentences.prefix(3)), voice: "slt")
        let events = try await runGraph(Self.graph(wav, asr: "{ type: asr, alternatives: 4 }"))
        let finals = events.named("transcript").filter { $0["final"]?.boolValue == true }
        #expect(finals.count == 3)
        var several = 0
        for f in finals {
            let list = try #require(f["alternatives"]?.arrayValue, "\(f)")
            let texts = list.compactMap { $0.objectValue?["text"]?.stringValue }
            let confidences = list.compactMap { $0.objectValue?["confidence"]?.doubleValue }
            #expect(!texts.isEmpty && texts.count <= 4 && Set(texts).count == texts.count, "\(texts)")
            #expect(confidences.count == texts.count && confidences.allSatisfy { (0...1).contains($0) })
            #expect(confidences == confidences.sorted(by: >))
            #expect(confidences.reduce(0, +) <= 1.01)
            // The final text is among the readings.
            #expect(texts.contains(f["text"]?.stringValue ?? "-"), "\(f)")
            if texts.count > 1 { several += 1 }
        }
        #expect(several >= 1, "n-best gave one reading for every utterance")
        // Without the parameter, no alternatives.
        let plain = try await runGraph(Self.graph(wav))
        #expect(plain.named("transcript").allSatisfy { $0["alternatives"] == nil })
    }

    /// `voicepipe serve` runs a decoder per session, created, used and freed on the session's own thread
    /// with no lock around the library. The heap corruption once seen with concurrent sessions came from
    /// `-logfn`, with which every ps_init replaced and fclosed the process-wide log FILE that other
    /// decoders were writing to: a decoder must leave that stream alone (nil, silenced).
    @Test("six decoders made, used and freed on six threads at once each hear their sentence; none replaces the library's log stream")
    func concurrentDecoders() async throws {
        let sentences = ["please turn on the lights in the kitchen", "can you help me find my keys", "i would like a cup of coffee"]
        var spoken: [[Int16]] = []
        for s in sentences { spoken.append(try readWAV(try Speech.wav([s], voice: "slt", leadS: 0.2, gapS: 0.3)).samples) }
        let audio = spoken
        let settings = PocketSphinxSettings(configuration: PocketSphinxEngine.Configuration())
        let heard = Mutex<[Int: [String]]>([:])
        let failures = Mutex<[String]>([])
        let threads = 6, rounds = 2
        let group = DispatchGroup()
        for t in 0..<threads {
            group.enter()
            let thread = Thread {
                defer { group.leave() }
                for _ in 0..<rounds {
                    do {
                        let decoder = try PocketSphinxDecoder(settings)
                        if PocketSphinxDecoder.libraryLogStream != nil { failures.withLock { $0.append("thread \(t): the library's log stream was set") } }
                        try decoder.start()
                        let samples = audio[t % audio.count]
                        var at = 0
                        while at < samples.count { try decoder.process(Array(samples[at..<min(samples.count, at + 1600)])); at += 1600 }
                        let text = decoder.end()
                        heard.withLock { $0[t, default: []].append(text) }
                    } catch {
                        failures.withLock { $0.append("thread \(t): \(error)") }
                    }
                }
            }
            thread.start()
        }
        await withCheckedContinuation { (done: CheckedContinuation<Void, Never>) in group.notify(queue: .global()) { done.resume() } }
        #expect(failures.withLock { $0 }.isEmpty, "\(failures.withLock { $0 })")
        #expect(PocketSphinxDecoder.libraryLogStream == nil)
        let results = heard.withLock { $0 }
        for t in 0..<threads {
            let texts = results[t] ?? []
            #expect(texts.count == rounds, "thread \(t): \(texts)")
            for text in texts {
                let wer = Speech.wordErrorRate(reference: sentences[t % sentences.count], hypothesis: text)
                #expect(wer <= 0.2, "thread \(t) heard '\(text)' for '\(sentences[t % sentences.count])'")
            }
        }
    }
}
