import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

/// The parameters that came with the scaled turn policy and the wake hop are checked before a node exists.
@Suite("Turn policy and wake hop parameters")
struct TurnConfigurationTests {
    @Test("turn_policy scaled: min_pause_ms longer than max_pause_ms is refused, naming both")
    func scaledPauses() throws {
        let env = ProcessInfo.processInfo.environment
        func values(min: Int, max: Int) -> [String: ParamValue] {
            ["turn_model": .string("smart-turn"), "turn_policy": .string("scaled"), "min_pause_ms": .int(min), "max_pause_ms": .int(max)]
        }
        #expect {
            _ = try VADNode.descriptor.configuration(values(min: 2000, max: 1000), variables: env)
        } throws: { error in
            "\(error)".contains("min_pause_ms (2000)") && "\(error)".contains("max_pause_ms (1000)")
        }
        #expect(throws: Never.self) { _ = try VADNode.descriptor.configuration(values(min: 100, max: 1000), variables: env) }
    }

    @Test("wake hop_ms must divide openWakeWord's 80 ms step in whole 10 ms frames")
    func wakeHop() throws {
        let env = ProcessInfo.processInfo.environment
        for bad in [30, 50, 70] {
            #expect(throws: ConfigurationError.self, "hop_ms \(bad)") {
                _ = try WakeNode.descriptor.configuration(["hop_ms": .int(bad)], variables: env)
            }
        }
        for good in [10, 20, 40, 80] {
            _ = try WakeNode.descriptor.configuration(["hop_ms": .int(good)], variables: env)
        }
    }
}
