import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("DSPRealAudio", .enabled(if: haveTool("espeak-ng")))
struct DSPRealAudioTests {
    static let texts = [
        "The quick brown fox jumps over the lazy dog.",
        "Please call me back when you get this message.",
        "Voice pipelines should be simple to build.",
    ]

    @Test(arguments: [nil, 20.0])
    func threeSentencesGiveThreeUtterances(snr: Double?) async throws {
        let (clean, truth, speechRMS) = try DSPFixtures.sentences(Self.texts)
        let samples = snr.map { DSPFixtures.addNoise(clean, speechRMS: speechRMS, snrDB: $0) } ?? clean
        let path = try DSPFixtures.wav(samples, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: [
            "{ type: vad, start_ms: 100, stop_ms: 500, pre_roll_ms: 200 }",
            "{ type: slicer, mode: utterance, slice_ms: 200, voice_id_prefix: utt }",
        ])
        let starts = events.filter { $0.name == "speech_start" }.compactMap { $0["media_ms"]?.intValue }
        let ends = events.filter { $0.name == "speech_end" }.compactMap { $0["media_ms"]?.intValue }
        print("vad snr=\(snr.map { "\($0) dB" } ?? "clean"): starts \(starts) ends \(ends), truth \(truth)")
        #expect(starts.count == 3 && ends.count == 3, "starts \(starts) ends \(ends), truth \(truth)")
        for (i, t) in truth.enumerated() where i < starts.count && i < ends.count {
            #expect(abs(Int(starts[i]) - t.startMs) <= 150, "start \(starts[i]) vs \(t.startMs)")
            #expect(abs(Int(ends[i]) - t.endMs) <= 150, "end \(ends[i]) vs \(t.endMs)")
        }
        // Slices: three flows, exact sizes, contiguous seq, first/last flags.
        let slices = log.audio
        let ids = slices.map { $0.marks.slice!.voiceID }
        #expect(Set(ids) == ["utt-1", "utt-2", "utt-3"])
        for id in ["utt-1", "utt-2", "utt-3"] {
            let flow = slices.filter { $0.marks.slice!.voiceID == id }
            #expect(flow.map { $0.marks.slice!.seq } == Array(0..<flow.count))
            #expect(flow.dropLast().allSatisfy { $0.audio!.samples.count == 3200 })
            #expect((1...3200).contains(flow.last?.audio?.samples.count ?? 0))
            #expect(flow.first?.marks.slice?.isFirst == true && flow.filter { $0.marks.slice!.isFirst }.count == 1)
            #expect(flow.last?.marks.slice?.isLast == true && flow.filter { $0.marks.slice!.isLast }.count == 1)
        }
        #expect(events.filter { $0.name == "utterance_start" }.count == 3)
    }

    @Test func gateAndEndOnSilence() async throws {
        let (clean, truth, speechRMS) = try DSPFixtures.sentences(Array(Self.texts.prefix(2)), gapS: 2.0)
        let noisy = DSPFixtures.addNoise(clean, speechRMS: speechRMS, snrDB: 20)
        let path = try DSPFixtures.wav(noisy, format: AudioFormat(sampleRate: 16000, channels: 1))
        // Gated: only the two utterances (pre-roll + speech + stop_ms) pass.
        let (_, gated) = try await DSPFixtures.run(input: path, chain: ["{ type: vad, gate: true, stop_ms: 400, pre_roll_ms: 200 }"])
        let passed = gated.samples.count * 1000 / 16000
        let speech = truth.reduce(0) { $0 + $1.endMs - $1.startMs }
        #expect(passed > speech && passed < speech + 2 * (400 + 200 + 300), "passed \(passed) ms, speech \(speech) ms")
        #expect(gated.audio.filter { $0.marks.speechStart }.count == 2 && gated.audio.filter { $0.marks.speechEnd }.count == 2)
        // end_on_silence: the stream ends within the 2 s gap after the first sentence.
        let (events, ended) = try await DSPFixtures.run(input: path, chain: ["{ type: vad, stop_ms: 300, end_on_silence_ms: 800 }"])
        let endMs = ended.samples.count * 1000 / 16000
        #expect(endMs >= truth[0].endMs + 800 - 150 && endMs < truth[1].startMs, "ended at \(endMs) ms, truth \(truth)")
        #expect(events.filter { $0.name == "speech_end" }.count == 1)
    }

    @Test func steadyNoiseAloneIsNotSpeech() async throws {
        let noise = DSPFixtures.gaussianNoise(count: 16000 * 4, rms: 800).map { Int16($0.rounded()) }
        let path = try DSPFixtures.wav(noise, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: ["{ type: vad }"])
        #expect(events.filter { $0.name == "speech_start" }.isEmpty)
        #expect(log.samples == noise)  // not gated: everything passes, untouched
    }

    @Test func vadWorksAt48kStereo() async throws {
        let (clean, truth, _) = try DSPFixtures.sentences(Array(Self.texts.prefix(1)))
        let conv = try AudioConverter(from: AudioFormat(sampleRate: 16000, channels: 1), to: AudioFormat(sampleRate: 48000, channels: 2))
        let path = try DSPFixtures.wav(conv.convert(clean) + conv.flush(), format: AudioFormat(sampleRate: 48000, channels: 2))
        let (events, _) = try await DSPFixtures.run(input: path, chain: ["{ type: vad }"])
        let starts = events.filter { $0.name == "speech_start" }.compactMap { $0["media_ms"]?.intValue }
        #expect(starts.count == 1 && abs(Int(starts.first ?? 0) - truth[0].startMs) <= 150, "\(starts) vs \(truth)")
    }
}
