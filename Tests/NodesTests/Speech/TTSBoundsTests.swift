import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import Nodes

/// Texts without end: a sentence of a thousand words, a word of a thousand letters, a megabyte
/// without punctuation. Each is spoken in bounded pieces, its audio bounded by `max_text_ms`, and a
/// stop ends synthesis between pieces.
@Suite("tts bounds", .serialized)
struct TTSBoundsTests {
    @Test("pieces: a long sentence is cut at a clause, else at a word; a long word into pieces; nothing is lost")
    func pieces() {
        #expect(SpeechPieces.pieces("one, two three four", maxChars: 10, maxWord: 5) == ["one,", "two three", "four"])
        #expect(SpeechPieces.pieces("Short enough.", maxChars: 100, maxWord: 40) == ["Short enough."])
        #expect(SpeechPieces.pieces("abcdefghij", maxChars: 100, maxWord: 4) == ["abcd efgh ij"])
        #expect(SpeechPieces.pieces("abcdefghij", maxChars: 5, maxWord: 4) == ["abcd", "efgh", "ij"])
        let clause = "We went to the market, bought apples and pears; then we walked home slowly along the river"
        let cut = SpeechPieces.pieces(clause, maxChars: 40, maxWord: 20)
        #expect(cut == ["We went to the market,", "bought apples and pears;", "then we walked home slowly along the", "river"])
        // Any text: every piece within the bounds, the words all there, in order.
        var generator = SystemRandomNumberGenerator()
        for _ in 0..<200 {
            let words = (0..<Int.random(in: 0...300, using: &generator)).map { _ in
                String((0..<Int.random(in: 1...90, using: &generator)).map { _ in "abc,;: ".randomElement(using: &generator)! })
                    .trimmingCharacters(in: .whitespaces)
            }.filter { !$0.isEmpty }
            let text = words.joined(separator: " ")
            let maxChars = Int.random(in: 1...120, using: &generator), maxWord = Int.random(in: 1...50, using: &generator)
            let out = SpeechPieces.pieces(text, maxChars: maxChars, maxWord: maxWord)
            #expect(out.allSatisfy { $0.count <= maxChars && !$0.isEmpty })
            #expect(out.joined().filter { !$0.isWhitespace } == text.filter { !$0.isWhitespace })
            #expect(out.flatMap { $0.split(separator: " ") }.allSatisfy { $0.count <= min(maxWord, maxChars) })
        }
    }

    @Test("flite on one word of a thousand letters, and on a thousand digits, finishes: spoken in pieces", arguments: [
        String(repeating: "abcdefghij", count: 100), String(repeating: "1234567890", count: 100),
    ])
    func longWord(word: String) async throws {
        let h = try NodeHarness(TTSNode.descriptor, parameters: [:])
        h.send([.text(word), .text("Done.")], to: "text")
        try await h.run(timeout: .seconds(120))
        #expect(h.events(named: "tts_end").count == 2)
        #expect(h.pipeline.nodeStats.first { $0.id == NodeHarness.nodeID }?.counters["sentences"] == 5)
        // 25 pieces of 40 letters, seven to a piece of at most 300 characters, and "Done."
        #expect(h.events(named: "error").isEmpty)
    }

    @Test("max_text_ms bounds the audio of one text; tts_dropped names what was left out, and the next text is spoken")
    func maxTextMs() async throws {
        let text = "This is the first sentence of a long answer. " + (1...20).map { "Here is sentence number \($0) of it." }.joined(separator: " ")
        let h = try NodeHarness(TTSNode.descriptor, parameters: ["max_text_ms": 3000])
        h.send([.text(text), .text("Next one.")], to: "text")
        try await h.run(timeout: .seconds(120))
        let ends = h.events(named: "tts_end")
        try #require(ends.count == 2)
        let first = try #require(ends[0]["duration_ms"]?.intValue)
        #expect(first <= 3020 && first >= 2000, "\(first) ms")
        let dropped = try #require(h.events(named: "tts_dropped").first)
        #expect(dropped["limit"] == .string("max_text_ms"))
        #expect(dropped["dropped"]?.stringValue?.hasSuffix("…") == true || dropped["dropped"]?.stringValue?.hasSuffix("number 20 of it.") == true)
        #expect((dropped["dropped_chars"]?.intValue ?? 0) > 300)
        #expect(ends[1]["text"] == .string("Next one.") && (ends[1]["duration_ms"]?.intValue ?? 0) > 300)
        #expect(h.pipeline.nodeStats.first { $0.id == NodeHarness.nodeID }?.counters["texts_cut"] == 1)
    }

    @Test("a stop in the middle of a megabyte without punctuation ends synthesis between pieces")
    func stopMidMegabyte() async throws {
        let words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
        var text = ""
        text.reserveCapacity(1 << 20)
        var i = 0
        while text.utf8.count < 1 << 20 { text += words[i % words.count] + " "; i += 1 }
        let h = try NodeHarness(TTSNode.descriptor, parameters: [:])
        let stopped = LockedValue<ContinuousClock.Instant?>(nil)
        let megabyte = text
        try await h.run(timeout: .seconds(60)) { h in
            h.send(.text(megabyte), to: "text")
            // Speaking: audio is coming out.
            #expect(await h.output().wait(for: 50, timeout: .seconds(30)))
            h.stop()
            stopped.withLock { $0 = .now }
            // The drain timeout (1.5 s on the pipeline's clock) passes: the node is cancelled.
            #expect(await h.clock.advance(by: .seconds(2), waitingFor: 1))
        }
        let elapsed = ContinuousClock.now - (stopped.withLock { $0 } ?? .now)
        // Well within the 2 s a stop is promised on an idle machine; the bound here leaves room for a loaded one.
        #expect(elapsed < .seconds(5), "\(elapsed)")
        let spoken = h.output().samples.count
        #expect(spoken < 16000 * 300, "\(spoken) samples: synthesis went on after the stop")
    }
}
