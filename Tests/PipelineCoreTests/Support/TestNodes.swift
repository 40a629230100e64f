import Foundation
import PipelineCore
import Synchronization
import VoicepipeTesting

/// Audio frame `i` of `samples` samples (value = frame index).
func indexedFrame(_ i: Int, samples: Int) -> Frame {
    .audio([Int16](repeating: Int16(truncatingIfNeeded: i), count: samples), format: AudioFormat(sampleRate: 16000, channels: 1),
           sampleIndex: Int64(i) * Int64(samples))
}

/// `count` audio frames of `samples` samples each (value = frame index).
func indexedFrames(count: Int, samples: Int) -> [Frame] { (0..<count).map { indexedFrame($0, samples: samples) } }

extension FrameRecorder {
    /// The first sample of each audio frame (the frame index for ``indexedFrames(count:samples:)``).
    var values: [Int16] { frames.compactMap { $0.audio?.samples.first } }
    /// Every frame so far.
    var all: [Frame] { frames }
}

/// Passes frames through.
actor PassThrough: FrameProcessor {
    func process(_ frame: Frame, context: NodeContext) async throws { try await context.send(frame) }
}

/// Fails after `after` frames, a given number of times (across restarts).
final class Flaky: Node {
    let failures: Mutex<Int>
    let after: Int
    init(failures: Int, after: Int) { self.failures = Mutex(failures); self.after = after }
    func run(_ context: NodeContext) async throws {
        var n = 0
        for await f in context.input() {
            n += 1
            if n > after, failures.withLock({ v -> Bool in if v > 0 { v -= 1; return true }; return false }) {
                throw NodeError("flaky", "simulated failure after \(after) frames")
            }
            try await context.send(f)
        }
    }
}

/// Shared state keyed by test, so factories can reach recorders.
final class TestBoard: Sendable {
    let recorders = FrameRecorders()
    let flaky = Mutex<[String: Flaky]>([:])
    func recorder(_ key: String) -> FrameRecorder { recorders[key] }
}

let board = TestBoard()

/// A registry of test node types.
func testRegistry() -> NodeRegistry {
    var r = NodeRegistry()
    r.register(NodeDescriptor(type: "hold", summary: "delays frames", parameters: [ParamSpec("hold_ms", .int, default: .int(0), doc: "")],
                              fusable: true, make: { c in HoldNode(hold: .milliseconds(c.int("hold_ms", default: 0))) }))
    r.register(NodeDescriptor(
        type: "scripted-source", summary: "test source", family: "sources", inputs: [],
        outputs: [PortSpec("out", [.audio])],
        parameters: [ParamSpec("count", .int, default: .int(10), doc: "frames"),
                     ParamSpec("samples", .int, default: .int(320), doc: "samples per frame"),
                     ParamSpec("delay_ms", .int, default: .int(0), doc: "delay before each frame"),
                     ParamSpec("rate", .int, default: .int(16000), doc: "rate")],
        format: .fromParameters(rate: 16000, channels: 1),
        make: { c in
            let samples = c.int("samples", default: 320)
            return ScriptedSource(count: c.int("count", default: 10), interval: .milliseconds(c.int("delay_ms", default: 0))) {
                indexedFrame($0, samples: samples)
            }
        }))
    // The kit's collecting sink, with `key` required as these tests' graphs expect.
    var collect = CollectingSink.descriptor(type: "collect", recorders: board.recorders)
    collect.parameters[0] = ParamSpec("key", .string, required: true, doc: "recorder key")
    r.register(collect)
    r.register(NodeDescriptor(type: "pass", summary: "pass-through", family: "DSP", fusable: true, make: { _ in PassThrough() }))
    r.register(NodeDescriptor(
        type: "flaky", summary: "fails", family: "DSP",
        parameters: [ParamSpec("failures", .int, default: .int(1), doc: "times to fail"), ParamSpec("after", .int, default: .int(3), doc: "frames before failing"),
                     ParamSpec("key", .string, default: .string(""), doc: "state key")],
        make: { c in
            let key = c.string("key", default: "")
            return board.flaky.withLock { f in
                if let x = f[key], !key.isEmpty { return x }
                let x = Flaky(failures: c.int("failures", default: 1), after: c.int("after", default: 3))
                if !key.isEmpty { f[key] = x }
                return x
            }
        }))
    r.register(NodeDescriptor(
        type: "stopper", summary: "asks the pipeline to stop after `after` frames, and keeps taking", family: "sinks",
        outputs: [], parameters: [ParamSpec("after", .int, default: .int(3), doc: "frames before asking")],
        make: { c in StopperNode(after: c.int("after", default: 3)) }))
    r.register(NodeDescriptor(
        type: "mono16k", summary: "accepts 16 kHz mono only", family: "DSP",
        format: FormatRule(output: { _, f in f }, accepts: { _, f in
            f.sampleRate == 16000 && f.channels == 1 ? nil : "needs 16000 Hz mono; add a resample node"
        }),
        fusable: true, make: { _ in PassThrough() }))
    r.register(NodeDescriptor(
        type: "texter", summary: "text only", family: "DSP", inputs: [PortSpec("in", [.text])], outputs: [PortSpec("out", [.text])],
        fusable: true, make: { _ in PassThrough() }))
    return r
}

func uniqueKey() -> String { UUID().uuidString }

/// Holds each frame `hold_ms` on the pipeline's clock before passing it on (a slow stage).
actor HoldNode: FrameProcessor {
    let hold: Duration
    init(hold: Duration) { self.hold = hold }
    func process(_ frame: Frame, context: NodeContext) async throws {
        try await context.clock.sleep(for: hold)
        try await context.send(frame)
    }
}

extension Handoff {
    /// Elements queued plus those held by senders waiting for room.
    var held: Int { depth + waitingSenders }
}

extension BoundedEdge {
    /// Frames queued plus those held by producers waiting for room.
    var held: Int { depth + waitingProducers }
}

/// Takes frames; after `after` of them asks the whole pipeline to stop, as a sink whose consumer went away does.
final class StopperNode: Node {
    let after: Int
    init(after: Int) { self.after = after }
    func run(_ context: NodeContext) async throws {
        var n = 0
        for await _ in context.input() {
            n += 1
            if n == after { context.requestPipelineStop() }
        }
    }
}

/// A test graph declared in code: `nodes` as (id, type, parameters), and `links` as chains
/// (`"a -> b.port -> c"`), the way a graph file writes them.
func graph(_ nodes: [(String, String, [String: ParamValue])], links: [String], file: String = #fileID, line: Int = #line) -> GraphBuilder {
    var g = GraphBuilder(name: "test", file: file)
    for (id, type, parameters) in nodes { g.node(id, type, parameters, file: file, line: line, column: 1) }
    for chain in links {
        let parts = chain.components(separatedBy: "->").map { $0.trimmingCharacters(in: .whitespaces) }
        for i in 0..<(parts.count - 1) { g.link(parts[i], to: parts[i + 1], file: file, line: line, column: 1) }
    }
    return g
}

extension Pipeline.Options {
    /// Options with `clock`.
    static func on(_ clock: any Clock<Duration>) -> Pipeline.Options {
        var o = Pipeline.Options()
        o.clock = clock
        return o
    }
}
