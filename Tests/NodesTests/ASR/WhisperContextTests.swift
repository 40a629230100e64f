import Foundation
import Testing
@testable import Nodes

/// The audio context sized to the utterance, the checks that send a decoding back to a larger context, and
/// the core budget that bounds decodings running at once: the pure parts, without a model.
@Suite("Whisper audio context")
struct WhisperContextTests {
    @Test("audio_ctx parses auto, full and a number of frames, and refuses anything else")
    func parses() {
        #expect(WhisperAudioContext(parameter: nil) == .auto)
        #expect(WhisperAudioContext(parameter: "auto") == .auto)
        #expect(WhisperAudioContext(parameter: "full") == .full)
        #expect(WhisperAudioContext(parameter: "0") == .full)
        #expect(WhisperAudioContext(parameter: "512") == .frames(512))
        #expect(WhisperAudioContext(parameter: "1500") == .frames(1500))
        #expect(WhisperAudioContext(parameter: "1501") == nil)
        #expect(WhisperAudioContext(parameter: "-3") == nil)
        #expect(WhisperAudioContext(parameter: "half") == nil)
    }

    @Test("auto: the utterance's frames plus a margin, then a larger context, then the whole window")
    func ladder() {
        // 2 s = 100 frames; + 64 of margin: 164, under the smallest context (192); then 192 + 256.
        #expect(WhisperAudioContext.auto.ladder(samples: 32_000) == [192, 448, 1500])
        #expect(WhisperAudioContext.auto.ladder(samples: 4_000) == [192, 448, 1500])
        // 3 s = 150 frames, + 75: 225 -> 256, then 512.
        #expect(WhisperAudioContext.auto.ladder(samples: 48_000) == [256, 512, 1500])
        // 8 s = 400 frames, + half of it: 600 -> 608, then 1216, then the window.
        #expect(WhisperAudioContext.auto.ladder(samples: 128_000) == [608, 1216, 1500])
        // 12 s = 600 frames -> 900 -> 928; the second step would pass the window.
        #expect(WhisperAudioContext.auto.ladder(samples: 192_000) == [928, 1500])
        // Longer than two thirds of the window: the whole window at once.
        #expect(WhisperAudioContext.auto.ladder(samples: 16_000 * 20) == [1500])
        #expect(WhisperAudioContext.auto.ladder(samples: 16_000 * 45) == [1500])
        #expect(WhisperAudioContext.full.ladder(samples: 16_000) == [1500])
        // A number is a floor: kept for short utterances, raised for long ones.
        #expect(WhisperAudioContext.frames(512).ladder(samples: 32_000) == [512, 1024, 1500])
        #expect(WhisperAudioContext.frames(256).ladder(samples: 16_000 * 10) == [544, 1088, 1500])
        // Every ladder ends with the whole window and grows.
        for seconds in stride(from: 0.1, through: 40, by: 0.7) {
            let ladder = WhisperAudioContext.auto.ladder(samples: Int(seconds * 16_000))
            #expect(ladder.last == 1500 && ladder == ladder.sorted() && Set(ladder).count == ladder.count, "\(seconds) s: \(ladder)")
            #expect(ladder[0] >= min(1500, WhisperAudioContext.framesNeeded(samples: Int(seconds * 16_000))), "\(seconds) s: \(ladder)")
        }
    }

    @Test("the checks pass ordinary sentences and catch loops, runaway length, compressible text and the token bound")
    func guards() {
        let ok = [("Please turn on the lights in the garage.", 2_500), ("The meeting starts at 10 o'clock.", 2_000),
                  ("No, no, no, I said the blue one.", 2_200), ("Thank you very much.", 1_200),
                  ("We need more information about the project before we can decide what to do next week.", 5_000)]
        for (text, ms) in ok {
            #expect(WhisperGuard.failure(text: text, tokensPerSegment: [12], durationMs: ms) == nil, "\(text)")
        }
        #expect(WhisperGuard.failure(text: "the the the the the the", tokensPerSegment: [8], durationMs: 3_000) == "repetition")
        #expect(WhisperGuard.failure(text: "I'm going to, I'm going to, I'm going to, I'm going to", tokensPerSegment: [20], durationMs: 6_000) == "repetition")
        // A sentence started over: the decoder said it twice.
        #expect(WhisperGuard.failure(text: "Users will join the conference. Users will join the conference.", tokensPerSegment: [14], durationMs: 1_950) == "repetition")
        let runaway = Array(repeating: "word", count: 3).joined(separator: " ") + " " + (1...30).map { "w\($0)" }.joined(separator: " ")
        #expect(WhisperGuard.failure(text: runaway, tokensPerSegment: [10], durationMs: 2_000) == "length")
        // Repeated with a word between: no run of words is said twice in a row, but the text compresses.
        let compressible = (1...6).map { "one two three four five six seven eight number \($0)" }.joined(separator: " ")
        #expect(WhisperGuard.failure(text: compressible, tokensPerSegment: [30], durationMs: 20_000) == "compression")
        #expect(WhisperGuard.failure(text: "Hello there.", tokensPerSegment: [WhisperGuard.maxTokens(durationMs: 1_000)], durationMs: 1_000) == "token_limit")
        #expect(WhisperGuard.maxTokens(durationMs: 2_000) == 32)
        // A decoder unsure of its words (the mean log-probability of its tokens): decoded again.
        #expect(WhisperGuard.failure(text: "Agent Log-In", tokensPerSegment: [6], durationMs: 1_600, meanLogProbability: -0.77) == "confidence")
        #expect(WhisperGuard.failure(text: "Agent login.", tokensPerSegment: [6], durationMs: 1_600, meanLogProbability: -0.37) == nil)
        // A second of speech that gave no word at all; a short blip that gave none is left alone.
        #expect(WhisperGuard.failure(text: " \\", tokensPerSegment: [3], durationMs: 1_500) == "no_words")
        #expect(WhisperGuard.failure(text: "", tokensPerSegment: [1], durationMs: 600) == nil)
    }

    @Test("a sentence said over and over is cut to its first copy; anything else is not")
    func sentenceSaidOver() {
        let loop = " Close the window in the bedroom. Close the window in the bedroom. Close the window in t"
        let end = WhisperGuard.sentenceSaidOver(loop)
        #expect(end.map { String(decoding: Array(loop.utf8).prefix($0), as: UTF8.self) } == " Close the window in the bedroom.")
        #expect(WhisperGuard.sentenceSaidOver("Users will join the conference. Users will join the conference.") == 31)
        #expect(WhisperGuard.sentenceSaidOver("What is it? What is it? What") != nil)
        // Not a loop of the first sentence: two sentences, a different second one, a short first one, one sentence.
        #expect(WhisperGuard.sentenceSaidOver("Close the window. Open the door.") == nil)
        #expect(WhisperGuard.sentenceSaidOver("Close the window in the bedroom. Close the window in the kitchen.") == nil)
        #expect(WhisperGuard.sentenceSaidOver("Help me. Help me. Help me.") == nil)
        #expect(WhisperGuard.sentenceSaidOver("Close the window in the bedroom.") == nil)
        #expect(WhisperGuard.sentenceSaidOver("No, no, no, no, no, no.") == nil)

        // The decoding is cut with its tokens: the words of the first copy and their times stay.
        func token(_ text: String, _ t0: Int64) -> WhisperToken { WhisperToken(bytes: Array(text.utf8), probability: 0.9, t0: t0, t1: t0 + 20) }
        let words = [" Close", " the", " window", " in", " the", " bedroom", "."]
        let tokens = (words + words + [" Close", " the"]).enumerated().map { token($0.element, Int64($0.offset) * 20) }
        let decoding = WhisperDecoding(segments: [WhisperSegment(text: tokens.map { String(decoding: $0.bytes, as: UTF8.self) }.joined(), t0: 0, t1: 212,
                                                                 noSpeech: 0, tokens: tokens, rawTokenCount: 31)],
                                       language: "en", decodeMs: 0)
        #expect(WhisperGuard.failure(text: decoding.segments[0].text, tokensPerSegment: [31], durationMs: 2_120) == "token_limit")
        let cut = WhisperDecoderPool.firstSentence(of: decoding)
        #expect(cut?.segments.first?.text == " Close the window in the bedroom.")
        #expect(cut?.segments.first?.tokens.count == words.count)
        #expect(cut.map { WhisperGuard.failure(text: $0.segments[0].text, tokensPerSegment: [$0.segments[0].rawTokenCount], durationMs: 2_120) } == .some(nil))
        // The cut is kept only when the decoder was sure of it (mean log-probability at or above loopCutConfidence).
        #expect(cut.map { $0.meanLogProbability >= WhisperGuard.loopCutConfidence } == true)
        var unsure = decoding
        unsure.segments[0].tokens = unsure.segments[0].tokens.map { var t = $0; t.probability = 0.6; return t }
        #expect(WhisperDecoderPool.firstSentence(of: unsure).map { $0.meanLogProbability < WhisperGuard.loopCutConfidence } == true)
        // Two segments: left to the larger context.
        var two = decoding
        two.segments.append(decoding.segments[0])
        #expect(WhisperDecoderPool.firstSentence(of: two) == nil)
    }

    @Test("the core budget: decodings allowed follow the free cores, at least one")
    func budget() {
        #expect(CoreBudget(cores: 2, fixedFree: 2).decodersAllowed == 2)
        #expect(CoreBudget(cores: 2, fixedFree: 1.1).decodersAllowed == 1)
        #expect(CoreBudget(cores: 2, fixedFree: 1.8).decodersAllowed == 2)
        #expect(CoreBudget(cores: 2, fixedFree: 0).decodersAllowed == 1)
        #expect(CoreBudget(cores: 8, fixedFree: 5.5).decodersAllowed == 5)
    }

    @Test("the core budget sees another process keep a core busy, and not its own work")
    func budgetReadsLoad() async throws {
        let budget = CoreBudget(cores: ProcessInfo.processInfo.activeProcessorCount, interval: .milliseconds(200))
        _ = budget.freeCores
        // This process spinning does not count against the budget.
        let spinUntil = ContinuousClock.now + .milliseconds(400)
        var x = 0.0
        while ContinuousClock.now < spinUntil { x += 1 }
        let whileOwnWork = budget.freeCores
        #expect(x > 0)
        // Another process spinning at normal priority does.
        let spinner = Process()
        spinner.executableURL = URL(fileURLWithPath: "/bin/sh")
        spinner.arguments = ["-c", "while :; do :; done"]
        try spinner.run()
        // SIGKILL: the test process may block SIGTERM in its threads, and a child inherits that mask.
        defer { kill(spinner.processIdentifier, SIGKILL); spinner.waitUntilExit() }
        try await Task.sleep(for: .milliseconds(250))
        _ = budget.freeCores
        try await Task.sleep(for: .milliseconds(600))
        let whileOther = budget.freeCores
        #expect(whileOther <= Double(budget.cores) - 0.6, "free \(whileOther) of \(budget.cores) with a spinning process (own work alone: \(whileOwnWork))")
        #expect(whileOther >= 0 && whileOwnWork <= Double(budget.cores))
    }
}
