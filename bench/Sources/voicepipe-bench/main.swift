import Foundation
import Logging
import NATSClient
import Nodes
import PipelineCore
import Synchronization

// Micro-benchmarks of the runtime: throughput of pass-through chains, per-hop latency, start-up.
// Prints one JSON object per measurement on stdout; bench/run turns them into BENCHMARKS.md.

/// A source that sends `frames` frames of `samples` samples as fast as the edges allow, or at
/// `intervalMicros` spacing, stamping each frame's pts with the wall-clock send time.
final class BenchSource: Node {
    let frames: Int, samples: Int, intervalMicros: Int
    init(frames: Int, samples: Int, intervalMicros: Int) { self.frames = frames; self.samples = samples; self.intervalMicros = intervalMicros }
    func run(_ context: NodeContext) async throws {
        let buffer = AudioBuffer(format: AudioFormat(sampleRate: 16000, channels: 1), samples: [Int16](repeating: 1, count: samples))
        let out = context.output()
        for i in 0..<frames {
            if intervalMicros > 0 { try await Task.sleep(for: .microseconds(intervalMicros)) }
            try await out.send(Frame(payload: .audio(buffer), pts: intervalMicros > 0 ? Clock.nanos() : Int64(i)))
        }
    }
}

/// Passes frames on unchanged.
actor BenchPass: FrameProcessor {
    func process(_ frame: Frame, context: NodeContext) async throws { try await context.send(frame) }
}

/// Counts frames; records send-to-arrival latency when the source stamped wall-clock times.
final class BenchSink: Node {
    let latencies = Mutex<[Int64]>([])
    let count = Atomic<Int>(0)
    let firstFrameAt = Mutex<Int64?>(nil)
    let measureLatency: Bool
    init(measureLatency: Bool) { self.measureLatency = measureLatency }
    func run(_ context: NodeContext) async throws {
        var local: [Int64] = []
        var n = 0
        for await f in context.input() {
            if n == 0 { let t = Clock.nanos(); firstFrameAt.withLock { $0 = t } }
            n += 1
            if measureLatency { local.append(Clock.nanos() - f.pts) }
        }
        count.store(n, ordering: .relaxed)
        latencies.withLock { $0 = local }
    }
}

enum Clock {
    static let origin = ContinuousClock.now
    static func nanos() -> Int64 {
        let d = ContinuousClock.now - origin
        return d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }
}

nonisolated(unsafe) var currentSink: BenchSink?

func registry(frames: Int, samples: Int, interval: Int, sink: BenchSink) -> NodeRegistry {
    var r = BuiltinNodes.registry()
    r.register(NodeDescriptor(type: "bench-source", summary: "bench", family: "bench", inputs: [], outputs: [PortSpec("out", [.audio])],
                              format: .none, make: { _ in BenchSource(frames: frames, samples: samples, intervalMicros: interval) }))
    r.register(NodeDescriptor(type: "bench-pass", summary: "bench", family: "bench", fusable: true, make: { _ in BenchPass() }))
    r.register(NodeDescriptor(type: "bench-sink", summary: "bench", family: "bench", inputs: [PortSpec("in", [.audio])], outputs: [],
                              format: .none, make: { _ in sink }))
    return r
}

func chainYAML(stages: Int, capacity: Int) -> String {
    var y = "nodes:\n  src: { type: bench-source }\n"
    for i in 0..<stages { y += "  p\(i): { type: bench-pass }\n" }
    y += "  sink: { type: bench-sink }\nlinks:\n"
    let ids = ["src"] + (0..<stages).map { "p\($0)" } + ["sink"]
    for i in 0..<(ids.count - 1) { y += "  - { from: \(ids[i]), to: \(ids[i + 1]), capacity: \(capacity) }\n" }
    return y
}

func percentile(_ xs: [Int64], _ p: Double) -> Double {
    guard !xs.isEmpty else { return 0 }
    let s = xs.sorted()
    return Double(s[min(s.count - 1, Int(Double(s.count - 1) * p))]) / 1000
}

let args = CommandLine.arguments
func arg(_ name: String, _ d: Int) -> Int {
    if let i = args.firstIndex(of: "--" + name), i + 1 < args.count, let v = Int(args[i + 1]) { return v }
    return d
}
let mode = args.count > 1 ? args[1] : "chain"
let stages = arg("stages", 16), frames = arg("frames", 200_000), samples = arg("samples", 320), capacity = arg("capacity", 32)
var options = Pipeline.Options()
options.fusion = !args.contains("--no-fuse")

switch mode {
case "chain":
    let sink = BenchSink(measureLatency: false)
    let p = try Pipeline(yaml: chainYAML(stages: stages, capacity: capacity), registry: registry(frames: frames, samples: samples, interval: 0, sink: sink), environment: [:], options: options)
    let t0 = Clock.nanos()
    try await p.run()
    let secs = Double(Clock.nanos() - t0) / 1e9
    let n = sink.count.load(ordering: .relaxed)
    precondition(n == frames, "lost frames: \(n) of \(frames)")
    print("{\"bench\":\"chain\",\"stages\":\(stages),\"fused\":\(options.fusion),\"frames\":\(n),\"seconds\":\(secs),\"frames_per_s\":\(Int(Double(n) / secs))}")
case "latency":
    let interval = arg("interval-us", 1000)
    let sink = BenchSink(measureLatency: true)
    let p = try Pipeline(yaml: chainYAML(stages: stages, capacity: capacity), registry: registry(frames: frames, samples: samples, interval: interval, sink: sink), environment: [:], options: options)
    try await p.run()
    let l = sink.latencies.withLock { $0 }
    let hops = Double(stages + 1)
    print("{\"bench\":\"latency\",\"stages\":\(stages),\"fused\":\(options.fusion),\"frames\":\(l.count),\"p50_us\":\(percentile(l, 0.5)),\"p99_us\":\(percentile(l, 0.99)),\"per_hop_p50_us\":\(percentile(l, 0.5) / hops),\"per_hop_p99_us\":\(percentile(l, 0.99) / hops)}")
case "nats":
    // JetStream publishing as serve does it: N events of the size of a transcript event, each with a
    // Nats-Msg-Id and its own acknowledgement; timed from the first publish to the last acknowledgement.
    let url = args.firstIndex(of: "--url").map { args[$0 + 1] } ?? "nats://127.0.0.1:4222"
    let events = arg("events", 100_000), bytes = arg("bytes", 300), window = arg("window", 256), replicas = arg("replicas", 1)
    var logger = Logger(label: "bench.nats")
    logger.logLevel = .warning
    var c = JetStreamPublisher.Configuration(options: try NATSOptions(url: url), stream: "BENCH", streamSubjects: ["bench.>"])
    c.capacity = events + 1
    c.window = window
    c.replicas = replicas
    c.spoolDirectory = args.firstIndex(of: "--spool").map { args[$0 + 1] }
    let publisher = JetStreamPublisher(configuration: c, logger: logger)
    let loop = Task { await publisher.run() }
    // Connected (and the stream made) before timing.
    _ = await publisher.publishAndWait(subject: "bench.warmup", payload: [1], timeout: .seconds(10))
    while !publisher.statistics.connected { try await Task.sleep(for: .milliseconds(10)) }
    _ = await publisher.flush(timeout: .seconds(10))
    let payload = [UInt8](repeating: UInt8(ascii: "x"), count: bytes)
    let t0 = Clock.nanos()
    for i in 0..<events { publisher.publish(subject: "bench.s\(i % 64).transcript", payload: payload) }
    let done = await publisher.flush(timeout: .seconds(300))
    let secs = Double(Clock.nanos() - t0) / 1e9
    let stats = await publisher.close(timeout: .seconds(1))
    await loop.value
    precondition(done && stats.held == 0 && stats.dropped == 0, "not all acknowledged: \(stats)")
    print("{\"bench\":\"nats\",\"client\":\"voicepipe\",\"events\":\(events),\"bytes\":\(bytes),\"window\":\(window),\"replicas\":\(replicas),\"spool\":\(c.spoolDirectory != nil),\"seconds\":\(secs),\"events_per_s\":\(Int(Double(events) / secs)),\"resent\":\(stats.resent)}")
default:
    FileHandle.standardError.write(Data("usage: voicepipe-bench chain|latency|nats [--stages N] [--frames N] [--samples N] [--capacity N] [--interval-us N] [--no-fuse]\n".utf8))
    exit(2)
}
