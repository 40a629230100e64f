import Foundation
import PipelineCore
import VoicepipeTesting
import Testing
@testable import CoreNodes
@testable import Nodes

/// A consumer that stops reading for 1.5 s behind a lossless (`block`) edge of capacity 2: the
/// capture node must keep reading the device, drop and count what does not fit (an overrun),
/// report it, and go on capturing with timestamps that skip the lost audio.
@Suite("AudioOverrun", .enabled(if: AudioTestEnv.enabled), .timeLimit(.minutes(1)))
struct AudioOverrunTests {
    @Test("a stalled consumer causes a counted, reported overrun and capture continues",
          arguments: ["pulse-source", "alsa-source"])
    func stalledConsumer(type: String) async throws {
        let sink = try await PrivateSink.make()
        defer { sink.close() }
        let device = type == "alsa-source" ? "pulse:DEVICE=\(sink.monitor)" : sink.monitor
        var registry = BuiltinNodes.registry()
        let box = FrameBox()
        registry.register(FrameCollector.descriptor(box))
        let yaml = """
        version: 1
        nodes:
          mic: { type: \(type), device: "\(device)", rate: 16000, channels: 1, frame_ms: 20 }
          col: { type: frame-collector, stall_ms: 1500 }
        links:
          - { from: mic, to: col, capacity: 2, overflow: block }
        """
        let pipeline = try Pipeline(yaml: yaml, registry: registry)
        let run = startPipeline(pipeline)
        try await Task.sleep(for: .milliseconds(2600))
        pipeline.stop()
        let events = try await run.value

        let overruns = pipeline.nodeStats.first { $0.id == "mic" }?.counters["overruns"] ?? 0
        #expect(overruns >= 1)
        let reported = events.filter { $0.name == "overrun" && $0.node == "mic" }
        #expect(!reported.isEmpty)
        #expect(reported.first?["cause"]?.stringValue == "graph")
        #expect((reported.first?["lost_ms"]?.intValue ?? 0) >= 200)
        #expect(reported.first?["backend"]?.stringValue == (type == "alsa-source" ? "alsa" : "pulse"))

        // Capture went on after the stall: frames kept coming, the first after the gap is marked,
        // and timestamps follow real time (the lost audio is skipped, not squeezed out).
        let frames = box.frames
        let gapIndex = try #require(frames.firstIndex { $0.marks.discontinuity })
        #expect(frames.count - gapIndex >= 10, "only \(frames.count - gapIndex) frames after the gap")
        let last = try #require(frames.last)
        #expect(last.pts >= 1_800_000_000, "last pts \(last.pts)")
        for i in 1..<frames.count { #expect(frames[i].pts > frames[i - 1].pts) }
    }
}
