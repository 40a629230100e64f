import Foundation
import PipelineCore
import Synchronization

/// A source that sends `count` audio frames of `samples` samples each (value = frame index).
final class ScriptedSource: Node {
    let count: Int
    let samples: Int
    let delayMs: Int
    init(count: Int, samples: Int, delayMs: Int) { self.count = count; self.samples = samples; self.delayMs = delayMs }
    func run(_ context: NodeContext) async throws {
        let format = AudioFormat(sampleRate: 16000, channels: 1)
        for i in 0..<count {
            if delayMs > 0 { try await context.clock.sleep(for: .milliseconds(delayMs)) }
            try await context.send(.audio([Int16](repeating: Int16(truncatingIfNeeded: i), count: samples), format: format, sampleIndex: Int64(i * samples)))
        }
    }
}

/// Records what a sink received, shared with the test.
final class Recorder: Sendable {
    private let frames = Mutex<[Frame]>([])
    func append(_ f: Frame) { frames.withLock { $0.append(f) } }
    var all: [Frame] { frames.withLock { $0 } }
    var values: [Int16] { all.compactMap { $0.audio?.samples.first } }
}

/// A sink that records frames, optionally slowly.
final class CollectingSink: Node {
    let recorder: Recorder
    let delayMs: Int
    init(recorder: Recorder, delayMs: Int) { self.recorder = recorder; self.delayMs = delayMs }
    func run(_ context: NodeContext) async throws {
        for await f in context.input() {
            if delayMs > 0 { try? await Task.sleep(for: .milliseconds(delayMs)) }
            recorder.append(f)
        }
    }
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
    let recorders = Mutex<[String: Recorder]>([:])
    let flaky = Mutex<[String: Flaky]>([:])
    func recorder(_ key: String) -> Recorder {
        recorders.withLock { r in
            if let x = r[key] { return x }
            let x = Recorder(); r[key] = x; return x
        }
    }
}

let board = TestBoard()

/// A registry of test node types.
func testRegistry() -> NodeRegistry {
    var r = NodeRegistry()
    r.register(NodeDescriptor(
        type: "scripted-source", summary: "test source", family: "sources", inputs: [],
        outputs: [PortSpec("out", [.audio])],
        parameters: [ParamSpec("count", .int, default: .int(10), doc: "frames"),
                     ParamSpec("samples", .int, default: .int(320), doc: "samples per frame"),
                     ParamSpec("delay_ms", .int, default: .int(0), doc: "delay before each frame"),
                     ParamSpec("rate", .int, default: .int(16000), doc: "rate")],
        format: .fromParameters(rate: 16000, channels: 1),
        make: { c in ScriptedSource(count: c.int("count", default: 10), samples: c.int("samples", default: 320), delayMs: c.int("delay_ms", default: 0)) }))
    r.register(NodeDescriptor(
        type: "collect", summary: "test sink", family: "sinks", inputs: [PortSpec("in", [.audio, .event, .text])], outputs: [],
        parameters: [ParamSpec("key", .string, required: true, doc: "recorder key"), ParamSpec("delay_ms", .int, default: .int(0), doc: "per-frame delay")],
        format: .none,
        make: { c in CollectingSink(recorder: board.recorder(c.string("key")!), delayMs: c.int("delay_ms", default: 0)) }))
    r.register(NodeDescriptor(type: "pass", summary: "pass-through", family: "DSP", make: { _ in PassThrough() }))
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
        type: "mono16k", summary: "accepts 16 kHz mono only", family: "DSP",
        format: FormatRule(output: { _, f in f }, accepts: { _, f in
            f.sampleRate == 16000 && f.channels == 1 ? nil : "needs 16000 Hz mono; add a resample node"
        }),
        make: { _ in PassThrough() }))
    r.register(NodeDescriptor(
        type: "texter", summary: "text only", family: "DSP", inputs: [PortSpec("in", [.text])], outputs: [PortSpec("out", [.text])],
        make: { _ in PassThrough() }))
    return r
}

func uniqueKey() -> String { UUID().uuidString }
