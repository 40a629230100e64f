import Foundation
import PipelineCore
import Testing
import VoicepipeTesting
@testable import GainPlugin

@Suite("gain node")
struct GainNodeTests {
    let format = AudioFormat(sampleRate: 16000, channels: 1)

    @Test("+6 dB doubles the samples; the count of clipped samples is reported at the end")
    func amplifies() async throws {
        let h = try NodeHarness(GainNode.descriptor, parameters: ["db": 6.0206], inputFormat: format)
        h.send(ScriptedSource.audioFrames([100, -100, 20000, -20000], format: format, samplesPerFrame: 2))
        try await h.run()
        #expect(h.output().samples == [200, -200, 32767, -32768])
        let done = try #require(h.events(named: "gain_done").first)
        #expect(done["clipped"] == .int(2))
    }

    @Test("a value out of range is refused with the parameter's range")
    func rangeChecked() throws {
        #expect(throws: ConfigurationError.self) { try GainNode.Configuration.decode(["db": 100]) }
        #expect(try GainNode.Configuration.decode([:]).db == 0)
    }

    @Test("the entry point registers nothing for a host built against another version")
    func refusesOtherHosts() throws {
        let returned = "voicepipe-plugin/1 voicepipe=0.0.1 swift=5.9".withCString { host in
            String(cString: voicepipePluginEntry(host, UnsafeMutableRawPointer(bitPattern: 0x10)!))
        }
        #expect(returned == VoicepipePlugin.signature)
    }
}
