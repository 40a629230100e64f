import Foundation
import Testing
import PipelineCore
@testable import CoreNodes
@testable import Nodes

private let packageRoot = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
    .deletingLastPathComponent().deletingLastPathComponent()
private let binary = packageRoot.appendingPathComponent(".build/debug/voicepipe").path

/// Two `voicepipe run pipelines/intercom.yaml` processes talk to each other over loopback, files
/// standing in for microphone and speaker; each must hear what the other said.
@Suite("Intercom", .enabled(if: FileManager.default.isExecutableFile(atPath: binary)))
struct IntercomTests {
    @Test("two processes hear each other", arguments: ["opus", "aac"])
    func twoProcessesHearEachOther(codec: String) async throws {
        let graph = packageRoot.appendingPathComponent("pipelines/intercom.yaml").path
        let saysA = RTPTest.chirp(seconds: 3, from: 200, to: 1800)
        let saysB = RTPTest.chirp(seconds: 3, from: 1700, to: 250)
        let inA = try RTPTest.wav(saysA, name: "a-\(codec).wav"), inB = try RTPTest.wav(saysB, name: "b-\(codec).wav")
        let hearsA = temporaryPath("a-hears-\(codec).wav"), hearsB = temporaryPath("b-hears-\(codec).wav")
        let portA = try RTPTest.freePort(), portB = try RTPTest.freePort()
        func start(local: Int, peer: Int, input: String, output: String) throws -> RTPTestProcess {
            try RTPTestProcess.start(binary, [
                "run", graph, "--quiet",
                "--set", "mic.type=file-source", "--set", "mic.path=\(input)", "--set", "mic.realtime=true",
                "--set", "spk.type=wav-sink", "--set", "spk.path=\(output)",
            ], environment: ["LOCAL_PORT": "\(local)", "PEER_PORT": "\(peer)", "PEER": "127.0.0.1", "BIND": "127.0.0.1",
                                          "CODEC": codec])
        }
        let a = try start(local: portA, peer: portB, input: inA, output: hearsA)
        let b = try start(local: portB, peer: portA, input: inB, output: hearsB)
        // Each file lasts 3 s (paced at 1x); then hang up both ends (SIGINT: drain and finalize).
        try await Task.sleep(for: .milliseconds(4000))
        a.interrupt(); b.interrupt()
        let ra = await a.wait(), rb = await b.wait()
        #expect(ra.status == 0, "A: \(ra.error)")
        #expect(rb.status == 0, "B: \(rb.error)")
        let (fa, heardByA) = try readWAV(hearsA)
        let (_, heardByB) = try readWAV(hearsB)
        #expect(fa.sampleRate == 48000)
        let ab = RTPTest.match(sent: saysA, received: heardByB)
        let ba = RTPTest.match(sent: saysB, received: heardByA)
        #expect(ab.coefficient > 0.8, "B hears A: \(ab.coefficient)")
        #expect(ba.coefficient > 0.8, "A hears B: \(ba.coefficient)")
        // And not itself.
        #expect(RTPTest.match(sent: saysA, received: heardByA).coefficient < 0.5)
    }
}
