import Foundation
import Testing
import PipelineCore

/// A playback queue between a producer whose clock runs `driftPPM` fast and a consumer that plays
/// exactly 1x, with the compensator resampling what goes in. Times in microseconds, one update per
/// produced frame; the depth is what is queued minus what has been played (a device's delay).
struct PlaybackQueueSimulation {
    var compensator = DriftCompensator()
    var depthUs: Double = 60_000       // audio queued, in microseconds of output
    var minDepthAfterWarmUp = Double.infinity
    var maxDepthAfterWarmUp = 0.0

    /// Runs `seconds` of media in 20 ms frames; returns the depth's distance from target at the end.
    mutating func run(seconds: Double, driftPPM: Double) -> Double {
        let frameUs = 20_000.0
        var producerClock = 0.0           // real time of the next frame's arrival
        var consumed = 0.0                // real time up to which the consumer has played
        var t = 0.0
        var correction = 0.0
        while t < seconds * 1e6 {
            producerClock += frameUs / (1 + driftPPM / 1e6)   // a fast producer sends frames a little early
            t = producerClock
            // The consumer has played up to now.
            depthUs -= t - consumed
            consumed = t
            depthUs += frameUs * (1 + correction / 1e6)
            correction = compensator.update(depth: .microseconds(Int64(depthUs)), at: .microseconds(Int64(t)))
            if t > 20e6 {
                minDepthAfterWarmUp = min(minDepthAfterWarmUp, depthUs)
                maxDepthAfterWarmUp = max(maxDepthAfterWarmUp, depthUs)
            }
        }
        let target = Double(compensator.target?.components.attoseconds ?? 0) / 1e12 + Double(compensator.target?.components.seconds ?? 0) * 1e6
        return depthUs - target
    }
}

@Suite("Clock drift")
struct DriftCompensatorTests {
    @Test("a producer 0.05 % fast: for a minute of media the queue stays within one frame of its target, drift estimated")
    func holdsTheQueue() throws {
        var sim = PlaybackQueueSimulation()
        _ = sim.run(seconds: 60, driftPPM: 500)
        let target = try #require(sim.compensator.target)
        let targetUs = Double(target.components.seconds) * 1e6 + Double(target.components.attoseconds) / 1e12
        // Within one 20 ms frame of the target, after the first 20 s.
        #expect(sim.maxDepthAfterWarmUp - targetUs < 20_000, "max \(sim.maxDepthAfterWarmUp) target \(targetUs)")
        #expect(targetUs - sim.minDepthAfterWarmUp < 20_000, "min \(sim.minDepthAfterWarmUp) target \(targetUs)")
        #expect(abs(sim.compensator.driftPPM - 500) < 50, "drift \(sim.compensator.driftPPM)")
    }

    @Test("without compensation the same queue creeps by 30 ms a minute (what the compensator prevents)")
    func creepsWithout() {
        var sim = PlaybackQueueSimulation()
        sim.compensator.maxPPM = 0
        let off = sim.run(seconds: 120, driftPPM: 500)
        #expect(off > 40_000)
    }

    @Test("slow and fast producers both settle; corrections never exceed the limit")
    func bothDirections() {
        for drift in [-800.0, -100, 100, 800] {
            var sim = PlaybackQueueSimulation()
            let off = sim.run(seconds: 120, driftPPM: drift)
            #expect(abs(off) < 20_000, "drift \(drift): \(off) µs off target")
            #expect(abs(sim.compensator.correctionPPM) <= 1000)
            #expect(abs(sim.compensator.driftPPM - drift) < 50, "drift \(drift): estimated \(sim.compensator.driftPPM)")
        }
    }

    @Test("no drift, no correction beyond noise")
    func steady() {
        var sim = PlaybackQueueSimulation()
        _ = sim.run(seconds: 60, driftPPM: 0)
        #expect(abs(sim.compensator.driftPPM) < 50)
    }
}
