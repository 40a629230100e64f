import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("DSPNodes")
struct DSPNodeTests {
    @Test func volumeReadsAToneAtItsLevelAndPassesAudioUntouched() async throws {
        let tone = Signal.sine(frequency: 440, rate: 16000, seconds: 1.0, level: -20)
        let path = try DSPFixtures.wav(tone, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: ["{ type: volume, interval_ms: 100 }"])
        let volumes = events.filter { $0.name == "volume" }
        #expect(volumes.count == 10)
        for v in volumes {
            let db = try #require(v["db"]?.doubleValue)
            #expect(abs(db + 20) < 0.5, "read \(db) dBFS")
            #expect(v["level"]?.doubleValue == db)
            #expect(abs((v["peak"]?.doubleValue ?? 0) - 0.1) < 0.01)
        }
        #expect(volumes.map { $0["media_ms"]?.intValue } == (1...10).map { Int64($0 * 100) })
        #expect(log.samples == tone)
    }

    @Test func volumeOfToneSourceAndClampedLevel() async throws {
        let log = DSPFrameLog()
        let yaml = """
        version: 1
        nodes:
          tone: { type: tone-source, level_db: -20, frequency: 1000, duration_ms: 500, realtime: false }
          quiet: { type: tone-source, level_db: -60, frequency: 1000, duration_ms: 500, realtime: false }
          v1: { type: volume }
          v2: { type: volume }
          sink: { type: dsp-collect }
          sink2: { type: dsp-collect }
        links:
          - tone -> v1 -> sink
          - quiet -> v2 -> sink2
        """
        let events = try await runGraph(yaml, registry: DSPFixtures.registry(log))
        let loud = events.filter { $0.name == "volume" && $0.node == "v1" }
        let quiet = events.filter { $0.name == "volume" && $0.node == "v2" }
        #expect(loud.count == 5 && quiet.count == 5)
        #expect(loud.allSatisfy { abs(($0["db"]?.doubleValue ?? 0) + 20) < 0.5 })
        #expect(quiet.allSatisfy { abs(($0["db"]?.doubleValue ?? 0) + 60) < 0.5 && $0["level"]?.doubleValue == -40 })
    }

    @Test(arguments: [(48000, 16000), (16000, 48000), (44100, 16000), (8000, 24000)])
    func resampleKeepsFrequencyAndLevel(rates: (Int, Int)) async throws {
        let (inRate, outRate) = rates
        let frequency = 997.0
        let tone = Signal.sine(frequency: frequency, rate: inRate, seconds: 2.0, level: -12)
        let path = try DSPFixtures.wav(tone, format: AudioFormat(sampleRate: inRate, channels: 1))
        let (_, log) = try await DSPFixtures.run(input: path, frameMs: 10, chain: ["{ type: resample, rate: \(outRate), channels: 1 }"])
        let out = log.samples
        #expect(log.audio.allSatisfy { $0.audio!.format == AudioFormat(sampleRate: outRate, channels: 1) })
        #expect(abs(out.count - tone.count * outRate / inRate) <= 4, "\(out.count) samples")
        let middle = out[(outRate / 4)..<(out.count - outRate / 4)]
        let f = DSPFixtures.zeroCrossingFrequency(middle, rate: outRate)
        #expect(abs(f - frequency) < 0.5, "measured \(f) Hz")
        let level = Signal.dbfs(Array(middle))
        #expect(abs(level + 12) < 0.2, "level \(level)")
        // No clicks at frame joins: the output matches a clean sine almost perfectly.
        let ideal = Signal.sine(frequency: frequency, rate: outRate, seconds: 2.0, level: -12)
        let c = Signal.bestCorrelation(Array(middle.prefix(4000)), ideal, maxLag: outRate / Int(frequency) + 2)
        #expect(c.coefficient > 0.999, "correlation \(c.coefficient)")
    }

    @Test func resampleMixesChannels() async throws {
        let tone = Signal.sine(frequency: 500, rate: 16000, seconds: 0.5, level: -20)
        let stereo = tone.flatMap { [$0, $0] }
        let path = try DSPFixtures.wav(stereo, format: AudioFormat(sampleRate: 16000, channels: 2))
        let (_, log) = try await DSPFixtures.run(input: path, chain: ["{ type: resample, rate: 16000, channels: 1 }"])
        #expect(log.samples == tone)
    }

    @Test func slicerFixedBytesGivesExactSlices() async throws {
        let samples = (0..<(16000 * 3 + 1234)).map { Int16(truncatingIfNeeded: $0 * 7) }
        let path = try DSPFixtures.wav(samples, format: AudioFormat(sampleRate: 16000, channels: 1))
        let (events, log) = try await DSPFixtures.run(input: path, chain: ["{ type: slicer, mode: fixed, slice_bytes: 6400, voice_id_prefix: flow }"])
        let slices = log.audio
        #expect(slices.count == 16)
        #expect(slices.dropLast().allSatisfy { $0.audio!.samples.count == 3200 })
        #expect(slices.last!.audio!.samples.count == (16000 * 3 + 1234) % 3200)
        #expect(slices.map { $0.marks.slice!.seq } == Array(0..<16))
        #expect(slices.map { $0.marks.slice!.isLast } == Array(repeating: false, count: 15) + [true])
        #expect(slices.allSatisfy { $0.marks.slice!.voiceID == "flow-1" })
        #expect(slices.map(\.pts) == (0..<16).map { Int64($0) * 200_000_000 })
        #expect(log.samples == samples)
        #expect(events.filter { $0.name == "utterance_start" }.count == 1)
        #expect(events.first { $0.name == "utterance_end" }?["seq"]?.intValue == 15)
    }

    @Test func slicerRejectsBothSizes() throws {
        let yaml = """
        version: 1
        nodes:
          t: { type: tone-source }
          s: { type: slicer, slice_ms: 100, slice_bytes: 3200 }
          o: { type: null-sink }
        links:
          - t -> s -> o
        """
        #expect(throws: (any Error).self) { try Pipeline(yaml: yaml, registry: BuiltinNodes.registry()) }
    }
}
