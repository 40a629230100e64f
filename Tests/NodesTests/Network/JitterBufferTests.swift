import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// What the buffer played at one tick, in milliseconds.
enum Played: Equatable {
    case packet(ptsMs: Int64)
    case lost
    case stretch
}

/// Drives a jitter buffer through arrivals (ms) and ticks, as the node does with a real clock.
struct JitterSimulation {
    var buffer: JitterBuffer
    var played: [Played] = []
    var outputPts: [Int64] = []
    var outcomes: [JitterBuffer.InsertOutcome] = []
    var fecAvailable = 0

    init(minMs: Int = 20, maxMs: Int = 200) throws {
        buffer = JitterBuffer(configuration: try .init(minMs: minMs, maxMs: maxMs, frameMs: 20))
    }

    static func packet(_ ptsMs: Int64) -> Frame {
        Frame(payload: .encoded(EncodedBuffer(codec: "opus", payload: [0xFC, UInt8(ptsMs / 20 & 0xFF)], durationNanos: 20_000_000)),
              pts: ptsMs * 1_000_000)
    }

    /// Ticks due strictly before `timeMs`.
    mutating func advance(to timeMs: Int64) {
        while let due = buffer.nextTickTime, due < timeMs * 1_000_000 {
            switch buffer.tick() {
            case .play(let f, let out):
                played.append(.packet(ptsMs: f.pts / 1_000_000)); outputPts.append(out)
            case .conceal(_, let out, let next, let stretch):
                played.append(stretch ? .stretch : .lost); outputPts.append(out)
                if next != nil, !stretch { fecAvailable += 1 }
            }
        }
    }

    /// Inserts packets (pts, arrival) in arrival order, then plays out what is left (as the node
    /// does at end of input) — but not beyond `untilMs`.
    mutating func run(_ arrivals: [(pts: Int64, at: Int64)], untilMs: Int64) {
        for a in arrivals.sorted(by: { $0.at < $1.at }) {
            advance(to: a.at)
            outcomes.append(buffer.insert(Self.packet(a.pts), arrival: a.at * 1_000_000))
        }
        while !buffer.isEmpty, let due = buffer.nextTickTime, due < untilMs * 1_000_000 { advance(to: due / 1_000_000 + 1) }
    }

    var packets: [Int64] { played.compactMap { if case .packet(let p) = $0 { p } else { nil } } }
}

@Suite("JitterBuffer")
struct JitterBufferTests {
    @Test func inOrderStreamPlaysEveryPacketAfterMinimumDelay() throws {
        var sim = try JitterSimulation(minMs: 20)
        sim.run((0..<50).map { (pts: Int64($0) * 20, at: Int64($0) * 20 + 5) }, untilMs: 5000)
        #expect(sim.outcomes.first == .started)
        #expect(sim.packets == (0..<50).map { Int64($0) * 20 })
        #expect(sim.played.allSatisfy { if case .packet = $0 { true } else { false } })
        #expect(sim.outputPts == (0..<50).map { Int64($0) * 20_000_000 })
        #expect(sim.buffer.statistics.concealed == 0 && sim.buffer.statistics.late == 0)
    }

    @Test func firstTickComesMinimumDelayAfterFirstArrival() throws {
        var jb = JitterBuffer(configuration: try .init(minMs: 30, maxMs: 100))
        #expect(jb.nextTickTime == nil)
        _ = jb.insert(JitterSimulation.packet(1000), arrival: 7_000_000)
        #expect(jb.nextTickTime == 37_000_000)
    }

    @Test func reorderedPacketsComeOutInOrder() throws {
        var sim = try JitterSimulation(minMs: 40)
        // Pairs swapped: 20 arrives after 40, 60 after 80, ...
        var arrivals: [(pts: Int64, at: Int64)] = []
        for k in stride(from: 0, to: 40, by: 2) {
            arrivals.append((Int64(k + 1) * 20, Int64(k) * 20 + 1))
            arrivals.append((Int64(k) * 20, Int64(k) * 20 + 15))
        }
        sim.run(arrivals, untilMs: 5000)
        #expect(sim.packets == (0..<40).map { Int64($0) * 20 })
        #expect(sim.buffer.statistics.late == 0)
        #expect(sim.buffer.statistics.concealed == 0)
    }

    @Test func duplicatesAreDroppedBeforeAndAfterPlayout() throws {
        var jb = JitterBuffer(configuration: try .init(minMs: 20, maxMs: 100))
        #expect(jb.insert(JitterSimulation.packet(0), arrival: 0) == .started)
        #expect(jb.insert(JitterSimulation.packet(0), arrival: 1_000_000) == .duplicate)
        #expect(jb.insert(JitterSimulation.packet(20), arrival: 20_000_000) == .buffered)
        guard case .play(let f, _) = jb.tick() else { Issue.record("expected a packet"); return }
        #expect(f.pts == 0)
        // A copy of a packet already played is a duplicate, not a late packet.
        #expect(jb.insert(JitterSimulation.packet(0), arrival: 30_000_000) == .duplicate)
        #expect(jb.statistics.duplicates == 2)
        #expect(jb.statistics.late == 0)
        #expect(jb.count == 1)
    }

    @Test func latePacketIsConcealedThenDropped() throws {
        var sim = try JitterSimulation(minMs: 20, maxMs: 20)
        var arrivals = (0..<10).map { (pts: Int64($0) * 20, at: Int64($0) * 20) }
        arrivals[5].at = 5 * 20 + 50   // 50 ms late: its slot (at 120 ms) has passed
        sim.run(arrivals, untilMs: 10 * 20 + 20)
        #expect(sim.played[5] == .lost)
        #expect(sim.outcomes.contains(.late))
        #expect(sim.buffer.statistics.late == 1)
        #expect(sim.packets == [0, 20, 40, 60, 80, 120, 140, 160, 180])
        // When the slot was concealed, the next packet (120) was already there: FEC would have been possible.
        #expect(sim.fecAvailable == 1)
    }

    @Test func eachLostPacketGetsOneConcealmentFrame() throws {
        var sim = try JitterSimulation(minMs: 20, maxMs: 20)
        let lost: Set<Int> = [5, 6, 20]
        sim.run((0..<30).filter { !lost.contains($0) }.map { (pts: Int64($0) * 20, at: Int64($0) * 20 + 3) }, untilMs: 5000)
        #expect(sim.played.count == 30)
        #expect(sim.played.indices.filter { sim.played[$0] == .lost } == [5, 6, 20])
        #expect(sim.buffer.statistics.concealed == 3)
        #expect(sim.outputPts == (0..<30).map { Int64($0) * 20_000_000 })
    }

    @Test func targetAdaptsToJitterWithinBounds() throws {
        var rng = RTPTestRandom(seed: 42)
        var sim = try JitterSimulation(minMs: 20, maxMs: 200)
        // ±40 ms of uniform jitter around a 40 ms mean for 20 s.
        let n = 1000
        var arrivals: [(pts: Int64, at: Int64)] = []
        for k in 0..<n {
            let delay = Int64(rng.next() % 81)
            arrivals.append((pts: Int64(k) * 20, at: Int64(k) * 20 + 10 + delay))
        }
        sim.run(arrivals, untilMs: Int64(n) * 20 + 300)
        let target = sim.buffer.targetDelayNanos / 1_000_000
        #expect(target > 60 && target <= 200, "target \(target) ms")
        // After the first two seconds of adaptation, few packets miss their slot.
        let lateAfterWarmup = sim.played.dropFirst(100).filter { $0 == .lost }.count
        #expect(lateAfterWarmup < n / 50, "\(lateAfterWarmup) concealed after warm-up")
        // One frame per interval, always.
        #expect(zip(sim.outputPts, sim.outputPts.dropFirst()).allSatisfy { $1 - $0 == 20_000_000 })

        var clamped = try JitterSimulation(minMs: 20, maxMs: 50)
        clamped.run(arrivals, untilMs: Int64(n) * 20 + 300)
        #expect(clamped.buffer.targetDelayNanos == 50_000_000)
    }

    @Test func delayShrinksBackWhenJitterStops() throws {
        var rng = RTPTestRandom(seed: 7)
        var sim = try JitterSimulation(minMs: 20, maxMs: 200)
        var arrivals: [(pts: Int64, at: Int64)] = []
        for k in 0..<500 { arrivals.append((Int64(k) * 20, Int64(k) * 20 + Int64(rng.next() % 81))) }
        for k in 500..<2000 { arrivals.append((Int64(k) * 20, Int64(k) * 20)) }
        sim.run(arrivals, untilMs: 2000 * 20 + 300)
        #expect(sim.buffer.statistics.stretched > 0)
        #expect(sim.buffer.statistics.skipped > 0)
        #expect(sim.buffer.targetDelayNanos == 20_000_000)
        #expect(sim.buffer.currentDelayNanos < 20_000_000 + sim.buffer.configuration.shrinkThreshold)
    }

    @Test func restartsOnANewTimeline() throws {
        var sim = try JitterSimulation(minMs: 20, maxMs: 100)
        var arrivals: [(pts: Int64, at: Int64)] = (0..<20).map { (pts: Int64($0) * 20, at: Int64($0) * 20) }
        // Timestamps jump 60 s ahead while time goes on: restart at once on the new timeline.
        for k in 0..<20 { arrivals.append((pts: 60_000 + Int64(k) * 20, at: 400 + Int64(k) * 20)) }
        sim.run(arrivals, untilMs: 900)
        #expect(sim.buffer.statistics.resyncs == 1)
        #expect(sim.packets.suffix(5) == [60_300, 60_320, 60_340, 60_360, 60_380])

        // Timestamps jump back: after `resyncAfterLate` late packets in a row, restart.
        var back = try JitterSimulation(minMs: 20, maxMs: 100)
        var a2: [(pts: Int64, at: Int64)] = []
        for k in 0..<20 { a2.append((pts: 10_000 + Int64(k) * 20, at: Int64(k) * 20)) }
        for k in 0..<30 { a2.append((pts: Int64(k) * 20, at: 400 + Int64(k) * 20)) }
        back.run(a2, untilMs: 1100)
        #expect(back.buffer.statistics.resyncs == 1)
        #expect(back.buffer.statistics.late == 9)   // the tenth restarts the buffer and is played
        #expect(back.packets.suffix(3) == [540, 560, 580])
    }

    @Test func rejectsBadBounds() {
        #expect(throws: JitterBuffer.ConfigurationError.self) { try JitterBuffer.Configuration(minMs: 100, maxMs: 50) }
        #expect(throws: JitterBuffer.ConfigurationError.self) { try JitterBuffer.Configuration(minMs: 0, maxMs: 50, frameMs: 0) }
    }

    /// A sender whose clock runs `ppm` slow (positive) or fast against ours, with 0–10 ms of jitter,
    /// for `seconds`; ticks when due, as the node does. Returns the buffer afterwards.
    static func driftingCall(ppm: Double, seconds: Int, compensate: Bool) throws -> JitterBuffer {
        var c = try JitterBuffer.Configuration(minMs: 20, maxMs: 200, frameMs: 20)
        c.compensatesDrift = compensate
        var jb = JitterBuffer(configuration: c)
        var rng = RTPTestRandom(seed: 99)
        let frames = seconds * 50
        for k in 0..<frames {
            let pts = Int64(k) * 20_000_000
            let arrival = Int64((Double(pts) * (1 + ppm / 1e6)).rounded()) + 5_000_000 + Int64(rng.next() % 10_000_001)
            while let due = jb.nextTickTime, due < arrival { _ = jb.tick() }
            _ = jb.insert(JitterSimulation.packet(Int64(k) * 20), arrival: arrival)
        }
        return jb
    }

    @Test(arguments: [300.0, -300.0, 120.0])
    func followsTheSendersClockInsteadOfStretchingOrSkipping(ppm: Double) throws {
        // Ten minutes of a call: 300 ppm is 180 ms, nine frames of creep.
        let left = try Self.driftingCall(ppm: ppm, seconds: 600, compensate: false)
        let creep = ppm > 0 ? left.statistics.stretched : left.statistics.skipped
        #expect(creep >= Int(abs(ppm) * 600 / 1e6 / 0.02) - 2, "without compensation the drift shows as whole frames: \(left.statistics)")

        let followed = try Self.driftingCall(ppm: ppm, seconds: 600, compensate: true)
        let estimate = try #require(followed.driftPPM)
        #expect(abs(estimate - ppm) < 25, "drift estimate \(estimate) ppm for \(ppm)")
        // A stretch or a skip may happen while the estimate settles (the first seconds), none after.
        #expect(followed.statistics.stretched + followed.statistics.skipped <= 1, "\(followed.statistics)")
        #expect(followed.statistics.concealed <= left.statistics.concealed)
        #expect(followed.statistics.played >= 600 * 50 - 20)
    }

    @Test func reportsNoDriftWhenTheClocksAgree() throws {
        let jb = try Self.driftingCall(ppm: 0, seconds: 60, compensate: true)
        #expect(abs(try #require(jb.driftPPM)) < 25)
        #expect(jb.statistics.stretched + jb.statistics.skipped <= 1)
    }
}

@Suite("JitterBuffer with AAC frames")
struct JitterBufferAACTests {
    @Test("1,024-sample packets (21.33 ms at 48 kHz): a lost one is concealed for its own length, the output grid stays whole")
    func aacFrames() throws {
        var jb = JitterBuffer(configuration: try .init(minMs: 20, maxMs: 200, frameMs: 20))
        let d = MediaTime.nanos(samples: 1024, rate: 48000)
        var outputs: [(pts: Int64, duration: Int64, lost: Bool)] = []
        for k in 0..<200 where k != 50 {
            let pts = MediaTime.nanos(samples: Int64(k) * 1024, rate: 48000)
            let f = Frame(payload: .encoded(EncodedBuffer(codec: "aac", payload: [1, 2, 3], durationNanos: d)), pts: pts)
            let arrival = pts + 3_000_000
            while let due = jb.nextTickTime, due < arrival {
                switch jb.tick() {
                case .play(let frame, let out): outputs.append((out, frame.durationNanos, false))
                case .conceal(let duration, let out, _, _): outputs.append((out, duration, true))
                }
            }
            _ = jb.insert(f, arrival: arrival)
        }
        while !jb.isEmpty, jb.nextTickTime != nil {
            switch jb.tick() {
            case .play(let frame, let out): outputs.append((out, frame.durationNanos, false))
            case .conceal(let duration, let out, _, _): outputs.append((out, duration, true))
            }
        }
        #expect(jb.configuration.frameNanos == d)
        let lost = outputs.filter(\.lost)
        #expect(lost.count == 1)
        #expect(lost.first?.duration == d)
        #expect(outputs.count == 200)
        for (a, b) in zip(outputs, outputs.dropFirst()) { #expect(b.pts == a.pts + a.duration) }
        #expect(jb.statistics.stretched == 0 && jb.statistics.skipped == 0)
    }
}
