import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

@Suite("Drift resampler")
struct DriftResamplerTests {
    let sine = (0..<48000).map { Int16((8000 * sin(2 * .pi * 1000 * Double($0) / 48000)).rounded()) }

    func run(_ ppm: Double, chunk: Int = 480, channels: Int = 1, input: [Int16]? = nil) -> [Int16] {
        var r = DriftResampler(channels: channels)
        let x = input ?? sine
        var out: [Int16] = []
        for start in stride(from: 0, to: x.count, by: chunk * channels) {
            out += r.process(Array(x[start..<min(x.count, start + chunk * channels)]), ppm: ppm)
        }
        return out
    }

    @Test("at 0 ppm it passes audio through unchanged, across buffer boundaries")
    func identity() { #expect(run(0) == sine) }

    @Test("±1000 ppm stretches or squeezes one second by 48 samples, without a step at buffer boundaries")
    func stretches() {
        for ppm in [1000.0, -1000] {
            let out = run(ppm)
            #expect(abs(out.count - 48000 - Int(ppm * 0.048)) <= 1, "\(ppm): \(out.count)")
            // A 1 kHz sine at 8000 peak moves at most about 1050 per sample; a dropout or a jump would show.
            let steps = zip(out, out.dropFirst()).map { abs(Int($1) - Int($0)) }
            #expect(steps.max() ?? 0 <= 1100)
        }
    }

    @Test("stereo frames stay together")
    func stereo() {
        let interleaved = sine.flatMap { [$0, $0 / 2] }
        let out = run(500, channels: 2, input: interleaved)
        #expect(out.count % 2 == 0)
        for i in stride(from: 0, to: out.count, by: 2) where abs(Int(out[i]) / 2 - Int(out[i + 1])) > 1 {
            Issue.record("frame \(i / 2) split: \(out[i]) \(out[i + 1])")
            break
        }
    }
}
