import Foundation
import PipelineCore
import Synchronization
import Testing
import VoicepipeTesting
@testable import CoreNodes
@testable import Nodes

/// The `tts` node with its embedded engines (flite, espeak-ng), on the testing kit's harness.
@Suite("TTS")
struct TTSTests {
    // MARK: Sentences

    @Test("sentences end at terminal punctuation, CJK marks and line breaks, not at abbreviations or decimals")
    func splitsSentences() {
        #expect(SentenceSplitter.sentences(in: "Hello there. How are you? I am fine!") == ["Hello there.", "How are you?", "I am fine!"])
        #expect(SentenceSplitter.sentences(in: "Dr. Smith met Mr. J. Jones in the U.S. last year. It costs 3.50 dollars, e.g. cheap.")
                == ["Dr. Smith met Mr. J. Jones in the U.S. last year.", "It costs 3.50 dollars, e.g. cheap."])
        #expect(SentenceSplitter.sentences(in: "\"Stop!\" he said. Well... maybe (not).") == ["\"Stop!\"", "he said.", "Well...", "maybe (not)."])
        #expect(SentenceSplitter.sentences(in: "你好，世界。今天天气很好！你呢？") == ["你好，世界。", "今天天气很好！", "你呢？"])
        #expect(SentenceSplitter.sentences(in: "First line\n\n- second item\nthird") == ["First line", "- second item", "third"])
        #expect(SentenceSplitter.sentences(in: "no terminal punctuation") == ["no terminal punctuation"])
        #expect(SentenceSplitter.sentences(in: "I said no. Then I left.") == ["I said no.", "Then I left."])
        #expect(SentenceSplitter.sentences(in: "It was 2024. Then 2025.") == ["It was 2024.", "Then 2025."])
        // Nothing to say.
        for empty in ["", "   ", "\n\t ", "...", " — ! "] { #expect(SentenceSplitter.sentences(in: empty).isEmpty, "\(empty)") }
    }

    // MARK: Helpers

    /// RMS of `samples` as a fraction of full scale.
    static func rms(_ samples: [Int16]) -> Double {
        guard !samples.isEmpty else { return 0 }
        var sum = 0.0
        for s in samples { sum += Double(s) * Double(s) }
        return (sum / Double(samples.count)).squareRoot() / 32768
    }

    /// Runs a `tts` node (`parameters`) on `texts` and returns the harness with what it sent.
    static func speak(_ texts: [String], _ parameters: [String: ParamValue] = [:]) async throws -> NodeHarness {
        let h = try NodeHarness(TTSNode.descriptor, parameters: parameters)
        h.send(texts.map { Frame.text($0) }, to: "text")
        try await h.run(timeout: .seconds(60))
        return h
    }

    /// Checks the audio and events of one spoken text: frame size and format, a media timeline
    /// without gaps, marks, events, a duration within `seconds` and audible speech. Returns the samples.
    @discardableResult
    static func checkSpoken(_ h: NodeHarness, text: String, rate: Int = 16000, frameMs: Int = 20, seconds: ClosedRange<Double>,
                            events: [String] = ["tts_start", "tts_end"],
                            sourceLocation: Testing.SourceLocation = #_sourceLocation) throws -> [Int16] {
        let frames = h.output().audio
        let frameLength = rate * frameMs / 1000
        #expect(!frames.isEmpty, sourceLocation: sourceLocation)
        #expect(frames.allSatisfy { $0.audio?.format == AudioFormat(sampleRate: rate, channels: 1) && $0.audio?.frameCount == frameLength },
                sourceLocation: sourceLocation)
        #expect(frames.enumerated().allSatisfy { i, f in f.pts == MediaTime.nanos(samples: Int64(i * frameLength), rate: rate) },
                "pts leave a gap", sourceLocation: sourceLocation)
        #expect(frames.first?.marks.speechStart == true && frames.last?.marks.speechEnd == true, sourceLocation: sourceLocation)
        #expect(frames.dropFirst().allSatisfy { !$0.marks.speechStart } && frames.dropLast().allSatisfy { !$0.marks.speechEnd },
                sourceLocation: sourceLocation)
        let samples = h.output().samples
        let duration = Double(samples.count) / Double(rate)
        #expect(seconds.contains(duration), "\(duration) s for \"\(text)\"", sourceLocation: sourceLocation)
        #expect(rms(samples) > 0.02, "RMS \(rms(samples)): silent?", sourceLocation: sourceLocation)
        let starts = h.events(named: "tts_start"), ends = h.events(named: "tts_end")
        #expect(starts.count == 1 && ends.count == 1, sourceLocation: sourceLocation)
        #expect(starts.first?["text"]?.stringValue == text && ends.first?["text"]?.stringValue == text, sourceLocation: sourceLocation)
        #expect(ends.first?["duration_ms"]?.intValue == Int64(frames.count * frameMs), sourceLocation: sourceLocation)
        #expect(h.events(named: "error").isEmpty, "\(h.events(named: "error"))", sourceLocation: sourceLocation)
        // The events port carries the same events.
        #expect(h.output("events").events.map(\.name.rawValue) == events, sourceLocation: sourceLocation)
        return samples
    }

    // MARK: flite

    static let fox = "The quick brown fox jumps over the lazy dog."

    @Test("flite speaks a text as 16 kHz frames with tts_start and tts_end", arguments: ["slt", "kal", "rms", "awb"])
    func fliteVoices(voice: String) async throws {
        let h = try await Self.speak([Self.fox], ["voice": .string(voice)])
        try Self.checkSpoken(h, text: Self.fox, seconds: 1.5...5)
    }

    @Test("the output rate and frame length follow rate and frame_ms (kal is 8 kHz, slt 16 kHz)", arguments: [("kal", 48000, 10), ("slt", 8000, 30), ("slt", 22050, 20)])
    func rateAndFrames(case c: (String, Int, Int)) async throws {
        let (voice, rate, frameMs) = c
        let h = try await Self.speak([Self.fox], ["voice": .string(voice), "rate": .int(rate), "frame_ms": .int(frameMs)])
        try Self.checkSpoken(h, text: Self.fox, rate: rate, frameMs: frameMs, seconds: 1.5...5)
    }

    @Test("texts follow each other on one media timeline, each with its own events and marks")
    func severalTexts() async throws {
        let texts = ["Good morning.", "  The kitchen lights are on.  ", "", "   ", "...", "See you later."]
        let h = try await Self.speak(texts)
        let spoken = ["Good morning.", "The kitchen lights are on.", "See you later."]
        // Synthesis of a text may start before the previous one's last frame is out: starts and ends each keep their order.
        #expect(h.events(named: "tts_start").map { $0["text"]?.stringValue } == spoken)
        #expect(h.events(named: "tts_end").map { $0["text"]?.stringValue } == spoken)
        let frames = h.output().audio
        #expect(frames.enumerated().allSatisfy { i, f in f.pts == Int64(i) * 20_000_000 })
        #expect(frames.filter { $0.marks.speechStart }.count == 3 && frames.filter { $0.marks.speechEnd }.count == 3)
        let total = h.events(named: "tts_end").compactMap { $0["duration_ms"]?.intValue }.reduce(0, +)
        #expect(total == Int64(frames.count * 20))
    }

    @Test("an empty, white-space or punctuation-only text produces nothing")
    func nothingToSay() async throws {
        let h = try await Self.speak(["", "   ", "\n\t", "... !", " — "])
        #expect(h.output().audio.isEmpty)
        #expect(h.events.isEmpty, "\(h.events.map(\.name))")
    }

    @Test("speed scales the speaking rate", arguments: ["flite", "espeak-ng"])
    func speed(engine: String) async throws {
        let text = "We need more information about the project before the meeting."
        let normal = try await Self.speak([text], ["engine": .string(engine)]).output().samples.count
        let fast = try await Self.speak([text], ["engine": .string(engine), "speed": 2.0]).output().samples.count
        let ratio = Double(fast) / Double(normal)
        #expect(ratio > 0.4 && ratio < 0.75, "speed 2 gave \(ratio) of the normal duration")
    }

    // MARK: Streaming

    /// Wraps flite, holding back one sentence until the test opens a gate, and counting sentences done.
    final class GatedSynthesizer: SpeechSynthesizer {
        let inner = FliteSynthesizer(voice: .slt, speed: 1, name: "tts-gated")
        let held: Int
        let gate: AsyncStream<Void>
        let opener: AsyncStream<Void>.Continuation
        let done = Mutex(0)
        init(holding held: Int) {
            self.held = held
            (gate, opener) = AsyncStream<Void>.makeStream()
        }
        func start() async throws { try await inner.start() }
        func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws {
            if done.withLock({ $0 }) == held { for await _ in gate { break } }
            try await inner.synthesize(sentence, deliver: deliver)
            done.withLock { $0 += 1 }
        }
        func stop() { inner.stop() }
    }

    @Test("the first sentence is heard before the last one is synthesized")
    func firstSentenceFirst() async throws {
        let synthesizer = GatedSynthesizer(holding: 2)
        let d = TTSNode.descriptor
        let gated = NodeDescriptor(type: "tts", summary: d.summary, family: d.family, inputs: d.inputs, outputs: d.outputs,
                                   configuration: TTSNode.Configuration.self, format: d.format,
                                   make: { c, _ in TTSNode(configuration: c, makeSynthesizer: { _ in synthesizer }) })
        let h = try NodeHarness(gated)
        let text = "Hello there. This is the second sentence. And this third sentence is held back until the first audio is out."
        let started = ContinuousClock.now
        let (firstArrived, doneAtFirst) = try await h.run(timeout: .seconds(60)) { h in
            h.send(.text(text), to: "text")
            let arrived = await h.output().wait(for: 1, timeout: .seconds(20))
            let done = synthesizer.done.withLock { $0 }
            synthesizer.opener.yield()
            return (arrived, done)
        }
        #expect(firstArrived, "no audio came out before the whole text was synthesized")
        #expect(doneAtFirst < 3)
        #expect(synthesizer.done.withLock { $0 } == 3)
        let entries = h.output().entries
        let first = try #require(entries.first).arrival, last = try #require(entries.last).arrival
        #expect(first - started < last - started)
        let end = try #require(h.events(named: "tts_end").first)
        #expect(end["duration_ms"]?.intValue == Int64(entries.count * 20))
        #expect(Double(end["duration_ms"]?.intValue ?? 0) > 4000, "three sentences are longer than \(end)")
    }

    // MARK: espeak-ng

    @Test("espeak-ng speaks Mandarin (cmn), one tts_start/tts_end for the text")
    func espeakMandarin() async throws {
        let text = "你好，世界。今天天气很好。"
        let h = try await Self.speak([text], ["engine": "espeak-ng", "voice": "cmn"])
        try Self.checkSpoken(h, text: text, seconds: 1.0...8)
    }

    @Test("espeak-ng speaks English (default voice en-us) at 16 kHz from its 22050 Hz")
    func espeakEnglish() async throws {
        let h = try await Self.speak([Self.fox], ["engine": "espeak-ng"])
        try Self.checkSpoken(h, text: Self.fox, seconds: 1.5...5)
    }

    // MARK: Validation

    @Test("an unknown voice is a validation error naming the voices there are")
    func badVoice() throws {
        #expect {
            _ = try TTSNode.descriptor.configuration(["voice": "nobody"])
        } throws: { error in
            "\(error)".contains("flite has no voice 'nobody'") && "\(error)".contains("slt, kal, kal16, rms, awb")
        }
        #expect {
            _ = try TTSNode.descriptor.configuration(["engine": "espeak-ng", "voice": "elvish"])
        } throws: { error in
            let text = "\(error)"
            return text.contains("espeak-ng has no voice 'elvish'") && text.contains("cmn") && text.contains("en-us")
        }
        // Voices by their full flite name, espeak-ng voices by file and with a variant.
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["voice": "cmu_us_rms"]) }
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["engine": "espeak-ng", "voice": "en+f3"]) }
        #expect(throws: Never.self) { _ = try TTSNode.descriptor.configuration(["engine": "espeak-ng", "voice": "gmw/en-US"]) }
    }

    /// The built-in registry plus `texts`, a source of the given texts.
    static func registry(texts: [String]) -> NodeRegistry {
        var r = BuiltinNodes.registry()
        r.register(ScriptedSource.descriptor(type: "texts", kinds: [.text], steps: texts.map { .frame(.text($0)) }))
        return r
    }

    @Test("in a graph file, the bad voice is reported at its node, with the engines' voices")
    func badVoiceInGraph() throws {
        let yaml = """
        version: 1
        name: tts
        nodes:
          texts: { type: texts }
          tts: { type: tts, voice: bob }
          out: { type: null-sink }
        links:
          - texts -> tts -> out
        """
        #expect {
            _ = try Pipeline(yaml: yaml, registry: Self.registry(texts: []))
        } throws: { error in
            let text = "\(error)"
            return text.contains("node 'tts'") && text.contains("flite has no voice 'bob'") && text.contains(":5:")
        }
    }

    // MARK: Round trip

    @Test("what flite says, pocketsphinx recognizes: tts -> asr, one utterance per text")
    func roundTrip() async throws {
        let sentences = [
            "The weather is nice today.",
            "Please turn on the lights in the kitchen.",
            "I would like a cup of coffee.",
            "We need more information about the project.",
        ]
        let yaml = """
        version: 1
        name: tts-asr
        nodes:
          texts: { type: texts }
          tts: { type: tts, engine: flite, voice: slt }
          asr: { type: asr, engine: pocketsphinx }
        links:
          - texts -> tts -> asr
        """
        let events = try await runGraph(yaml, registry: Self.registry(texts: sentences))
        #expect(events.named("error").isEmpty, "\(events.named("error"))")
        #expect(events.named("tts_end").count == sentences.count)
        #expect(events.finalTexts.count == sentences.count, "\(events.finalTexts)")
        let heard = events.finalTexts.joined(separator: " ")
        let wer = Speech.wordErrorRate(reference: sentences.joined(separator: " "), hypothesis: heard)
        #expect(wer <= 0.15, "WER \(wer): \(heard)")
    }
}
