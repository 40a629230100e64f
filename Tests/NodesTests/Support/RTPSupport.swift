import Foundation
#if canImport(Glibc)
import Glibc
#endif
import PipelineCore
import VoicepipeTesting
import Synchronization
@testable import CoreNodes
@testable import Nodes

/// A small deterministic generator (xorshift64*) for impairments and jittered schedules.
struct RTPTestRandom: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed == 0 ? 0x9E37_79B9_7F4A_7C15 : seed }
    mutating func next() -> UInt64 {
        state ^= state >> 12; state ^= state << 25; state ^= state >> 27
        return state &* 2_685_821_657_736_338_717
    }
    /// Uniform in 0..<1.
    mutating func unit() -> Double { Double(next() >> 11) / Double(1 << 53) }
}

/// What a ``UDPRelay`` does to the packets it forwards; every decision comes from a seeded generator,
/// per packet, in arrival order.
struct RTPImpairment: Sendable {
    /// Probability of dropping a packet.
    var loss = 0.0
    /// Extra delay, uniform in 0...2×jitterMs (so ±jitterMs around a mean of jitterMs).
    var jitterMs = 0
    /// Probability of holding a packet back by 30 ms (it then arrives after the next one).
    var reorder = 0.0
    /// Probability of sending a packet twice (the copy 1 ms later).
    var duplicate = 0.0
    var seed: UInt64 = 1
}

/// What the relay actually put on the wire, with the counters a receiver must arrive at.
struct RTPRelayReport: Sendable {
    var forwarded: [UInt16] = []     // sequence numbers in sending order, copies included
    var dropped: [UInt16] = []
    var received = 0
    var sendFailures = 0
    /// Longest time between two packets arriving from the sender, ms: a sender (or whole-process)
    /// stall on a loaded machine, which no receiver can hide beyond its own delay.
    var longestIngressGapMs = 0.0

    /// Statistics a receiver computes from exactly this output (loopback keeps the order).
    var expected: RTPReceptionStatistics {
        var s = RTPReceptionStatistics()
        for (i, seq) in forwarded.enumerated() { _ = s.record(sequenceNumber: seq, timestamp: 0, arrival: Int64(i)) }
        return s
    }

    /// Longest run of consecutive sequence numbers dropped.
    var longestDropRun: Int {
        let d = Set(dropped)
        var best = 0
        for s in d where !d.contains(s &- 1) {
            var n = 1
            while d.contains(s &+ UInt16(n)) { n += 1 }
            best = max(best, n)
        }
        return best
    }
}

/// A UDP relay for impairment tests: listens on 127.0.0.1 (port 0), forwards RTP datagrams to
/// `127.0.0.1:target` with seeded loss, jitter, reordering and duplication, on its own thread.
/// Packets that arrive before the target is known are held.
final class UDPRelay: Sendable {
    private struct State {
        var target: Int?
        var report = RTPRelayReport()
        var stop = false
    }
    private let state = Mutex(State())
    private let socket: UDPSocket
    private let done = Atomic<Bool>(false)
    /// The port to send to.
    let port: Int

    init(impairment: RTPImpairment) throws {
        socket = try UDPSocket(bindHost: "127.0.0.1", port: 0)
        port = socket.localPort
        let thread = Thread { [self] in loop(impairment) }
        thread.name = "udp-relay"
        thread.start()
    }

    /// Where to forward.
    func setTarget(_ port: Int) { state.withLock { $0.target = port } }

    /// Stops the relay and returns what it did.
    func stop() -> RTPRelayReport {
        state.withLock { $0.stop = true }
        while !done.load(ordering: .acquiring) { usleep(2000) }
        return state.withLock { $0.report }
    }

    private static func now() -> UInt64 { DispatchTime.now().uptimeNanoseconds }

    private func loop(_ imp: RTPImpairment) {
        var rng = RTPTestRandom(seed: imp.seed)
        var pending: [(at: UInt64, bytes: [UInt8])] = []
        var address: UDPAddress?
        var lastIngress: UInt64?
        while true {
            let (stop, target) = state.withLock { ($0.stop, $0.target) }
            if stop { break }
            if address == nil, let target { address = try? UDPAddress.resolve(host: "127.0.0.1", port: target) }
            let t = Self.now()
            if let address {
                pending.sort { $0.at < $1.at }
                while let first = pending.first, first.at <= t {
                    pending.removeFirst()
                    let seq = UInt16(first.bytes[2]) << 8 | UInt16(first.bytes[3])
                    if socket.send(first.bytes, to: address) == 0 {
                        state.withLock { $0.report.forwarded.append(seq) }
                    } else {
                        state.withLock { $0.report.sendFailures += 1 }
                    }
                }
            }
            let wait = pending.first.map { $0.at > t ? Int32(min(($0.at - t) / 1_000_000 + 1, 5)) : 0 } ?? 5
            guard let d = try? socket.receive(timeoutMs: wait), d.bytes.count >= 12 else { continue }
            let seq = UInt16(d.bytes[2]) << 8 | UInt16(d.bytes[3])
            let arrived = Self.now()
            if let lastIngress {
                let gap = Double(arrived - lastIngress) / 1e6
                state.withLock { $0.report.longestIngressGapMs = max($0.report.longestIngressGapMs, gap) }
            }
            lastIngress = arrived
            // Draw every decision for every packet so one setting does not shift the others.
            let lose = rng.unit() < imp.loss
            let delayMs = imp.jitterMs > 0 ? Double(rng.next() % UInt64(2 * imp.jitterMs + 1)) : 0
            let hold = rng.unit() < imp.reorder
            let copy = rng.unit() < imp.duplicate
            state.withLock { $0.report.received += 1 }
            if lose {
                state.withLock { $0.report.dropped.append(seq) }
                continue
            }
            let at = Self.now() + UInt64((delayMs + (hold ? 30 : 0)) * 1_000_000)
            pending.append((at, d.bytes))
            if copy { pending.append((at + 1_000_000, d.bytes)) }
        }
        socket.close()
        done.store(true, ordering: .releasing)
    }
}

/// Frames seen at one point of a graph, with their arrival times (the testing kit's recorder).
typealias RTPFrameLog = FrameRecorder

/// `rtp-test-tap`: the testing kit's collecting sink under the name the RTP graphs use.
enum RTPTapNode {
    static func descriptor(type: String = "rtp-test-tap", _ log: RTPFrameLog) -> NodeDescriptor {
        CollectingSink.descriptor(type: type, recorder: log)
    }

    static func registry(_ log: RTPFrameLog) -> NodeRegistry {
        var r = BuiltinNodes.registry()
        r.register(descriptor(log))
        return r
    }
}

/// Test signals and measurements for RTP tests.
enum RTPTest {
    /// A chirp with a slow amplitude envelope: correlates at one lag only.
    static func chirp(rate: Int = 48000, seconds: Double, from f0: Double = 200, to f1: Double = 1800, level: Double = -12) -> [Int16] {
        let n = Int(Double(rate) * seconds)
        let a = 32767 * pow(10, level / 20)
        let k = (f1 - f0) / seconds
        return (0..<n).map { i in
            let t = Double(i) / Double(rate)
            let env = 0.6 + 0.4 * sin(2 * .pi * 1.3 * t)
            return Int16((a * env * sin(2 * .pi * (f0 * t + k * t * t / 2))).rounded())
        }
    }

    /// Writes samples to a mono WAV.
    static func wav(_ samples: [Int16], rate: Int = 48000, name: String = "in.wav") throws -> String {
        let path = temporaryPath(name)
        let w = try WAVWriter(path: path, format: AudioFormat(sampleRate: rate, channels: 1))
        try w.write(samples)
        try w.close()
        return path
    }

    /// Block-averages by `factor` (a crude low-pass + decimation, to keep correlation searches fast).
    static func decimate(_ x: [Int16], by factor: Int) -> [Int16] {
        stride(from: 0, to: x.count - factor + 1, by: factor).map { i in
            var s = 0
            for j in 0..<factor { s += Int(x[i + j]) }
            return Int16(s / factor)
        }
    }

    /// Which parts of the sent signal the received audio carries, whatever the delay: every half-second
    /// window of the received audio that has sound in it (decimated to 8 kHz) is searched for in the whole
    /// sent signal (every 8th lag, then each lag around the best). For calls whose start depends on the
    /// network (discovery, a peer restarting), where a fixed delay cannot be assumed. Returns each sounding
    /// window's best coefficient, in order.
    static func heard(sent: [Int16], received: [Int16], rate: Int = 48000) -> [Double] {
        let f = rate / 8000
        let a = decimate(sent, by: f).map(Float.init), b = decimate(received, by: f).map(Float.init)
        let w = 4000
        guard a.count >= w else { return [] }
        var scores: [Double] = []
        a.withUnsafeBufferPointer { a in
            b.withUnsafeBufferPointer { b in
                func coefficient(_ x: Int, _ lag: Int) -> Double {
                    var sab: Float = 0, saa: Float = 0, sbb: Float = 0
                    for i in 0..<w { let u = b[x + i], v = a[lag + i]; sab += u * v; saa += u * u; sbb += v * v }
                    return saa > 0 && sbb > 0 ? Double(sab) / (Double(saa) * Double(sbb)).squareRoot() : 0
                }
                var start = 0
                while start + w <= b.count {
                    var energy: Float = 0
                    for i in start..<start + w { energy += b[i] * b[i] }
                    // About -40 dBFS: a window with the peer's voice in it, not silence or noise.
                    if (energy / Float(w)).squareRoot() > 300 {
                        var best = (lag: 0, c: -2.0)
                        var lag = 0
                        while lag + w <= a.count { let c = coefficient(start, lag); if c > best.c { best = (lag, c) }; lag += 8 }
                        for l in max(0, best.lag - 8)...min(a.count - w, best.lag + 8) {
                            let c = coefficient(start, l); if c > best.c { best = (l, c) }
                        }
                        scores.append(best.c)
                    }
                    start += w
                }
            }
        }
        return scores
    }

    /// How well the received audio matches what was sent: half-second windows of the sent signal
    /// (from 1 s in, every 0.5 s) are each searched for in the received audio within -0.1...+0.4 s of
    /// the same position (both decimated to 8 kHz); returns the median coefficient and its lag in seconds.
    static func match(sent: [Int16], received: [Int16], rate: Int = 48000) -> (lagS: Double, coefficient: Double) {
        let f = rate / 8000
        let a = decimate(sent, by: f), b = decimate(received, by: f)
        var results: [(lagS: Double, coefficient: Double)] = []
        var start = 8000
        while start + 4000 <= a.count {
            let from = max(0, start - 800)
            let to = min(b.count, start + 4000 + 3200)
            if to - from > 4000 {
                let r = Signal.bestCorrelation(Array(a[start..<start + 4000]), Array(b[from..<to]), maxLag: to - from - 4000 + 1)
                results.append((Double(from + r.lag - start) / 8000, r.coefficient))
            } else {
                results.append((0, 0))
            }
            start += 4000
        }
        guard !results.isEmpty else { return (0, 0) }
        return results.sorted { $0.coefficient < $1.coefficient }[results.count / 2]
    }

    /// Runs a pipeline, calling `onEvent` for each event as it comes; stops it after `seconds`.
    static func run(_ pipeline: Pipeline, seconds: Double, onEvent: @escaping @Sendable (Event) -> Void = { _ in }) async throws -> [Event] {
        let events = pipeline.events(buffer: 100_000)
        let collector = Task { var all: [Event] = []; for await e in events { onEvent(e); all.append(e) }; return all }
        let watchdog = Task { try await Task.sleep(for: .milliseconds(Int(seconds * 1000))); pipeline.stop() }
        defer { watchdog.cancel() }
        try await pipeline.run()
        return await collector.value
    }

    /// The last event named `name` from node `node`.
    static func last(_ events: [Event], _ name: String, node: String) -> Event? {
        events.last { $0.name == name && $0.node == node }
    }
}

extension Event {
    /// An integer field (0 when absent).
    func rtpInt(_ key: String) -> Int64 {
        switch fields.first(where: { $0.0 == key })?.1 {
        case .int(let i)?: i
        case .double(let d)?: Int64(d)
        default: 0
        }
    }
}

/// A value set once by one task and awaited by another.
final class RTPTestBox<T: Sendable>: Sendable {
    private let value = Mutex<T?>(nil)
    func set(_ v: T) { value.withLock { $0 = v } }
    var current: T? { value.withLock { $0 } }
    /// Polls until set (or `timeout` passes: then `nil`).
    func wait(timeout: Duration = .seconds(10)) async -> T? {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let v = current { return v }
            try? await Task.sleep(for: .milliseconds(10))
        }
        return current
    }
}

/// A child process watched without blocking the cooperative pool.
struct RTPTestProcess {
    let process: Process
    let stderr: PipeReader

    /// Starts `tool` with `arguments` (stdout discarded).
    static func start(_ tool: String, _ arguments: [String], environment: [String: String] = [:]) throws -> RTPTestProcess {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool.hasPrefix("/") ? tool : "/usr/bin/env")
        p.arguments = tool.hasPrefix("/") ? arguments : [tool] + arguments
        if !environment.isEmpty { p.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        p.standardOutput = FileHandle.nullDevice
        let err = Pipe()
        p.standardError = err
        try p.run()
        return RTPTestProcess(process: p, stderr: PipeReader(err.fileHandleForReading))
    }

    /// Waits for the process to exit (killing it after `timeout`); returns its status and stderr.
    func wait(timeout: Duration = .seconds(30)) async -> (status: Int32, error: String) {
        let deadline = ContinuousClock.now + timeout
        while process.isRunning {
            if ContinuousClock.now > deadline { kill() }
            try? await Task.sleep(for: .milliseconds(20))
        }
        return (process.terminationStatus, String(decoding: stderr.wait(), as: UTF8.self))
    }

    /// SIGINT (voicepipe drains and finalizes its files).
    func interrupt() { if process.isRunning { process.interrupt() } }

    /// SIGKILL (cannot be blocked or ignored).
    func kill() { if process.isRunning { _ = Glibc.kill(process.processIdentifier, SIGKILL) } }
}

extension RTPTest {
    /// A UDP port that was free a moment ago (for tools that cannot report the port they bound).
    static func freePort() throws -> Int {
        let s = try UDPSocket(bindHost: "127.0.0.1", port: 0)
        defer { s.close() }
        return s.localPort
    }
}
