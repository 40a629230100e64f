import Foundation
import Logging
import PipelineCore
import Testing
@testable import Nodes

/// A Tencent ASR server that quotes the request's SecretId in its refusal: the id, taken from the
/// environment, reaches no event and no log line.
@Suite("Tencent ASR: secrets in echoes")
struct TencentSecretEchoTests {
    @Test func aRefusalQuotingTheSecretIDPutsItNowhere() async throws {
        let server = try await TencentASRServer.start(.init(secretKey: TencentTestKeys.secretKey, echoSecretID: true))
        defer { Task { await server.shutdown() } }
        let logs = ResponderLogLines()
        var logger = Logger(label: "voicepipe-test") { _ in ResponderLogHandler(lines: logs) }
        logger.logLevel = .trace
        var options = Pipeline.Options()
        options.logger = logger
        let pipeline = try Pipeline(yaml: """
            version: 1
            name: tencent-echo
            nodes:
              tone: { type: tone-source, duration_ms: 600, realtime: false }
              asr: { type: asr, engine: tencent, endpoint: "ws://127.0.0.1:\(server.port)", reconnect_attempts: 1 }
            links:
              - tone -> asr
            """, registry: BuiltinNodes.registry(), environment: [
                "TENCENTCLOUD_APPID": "1259228442", "TENCENTCLOUD_SECRET_ID": TencentTestKeys.secretID,
                "TENCENTCLOUD_SECRET_KEY": "wrong-secret-key-0000",
            ], options: options)
        let stream = pipeline.events(buffer: 10_000)
        let collector = Task { var all: [Event] = []; for await e in stream { all.append(e) }; return all }
        var failure = ""
        do { try await pipeline.run() } catch { failure = "\(error)" }
        let events = await collector.value.map { $0.jsonLine() }.joined(separator: "\n")
        // The server did quote it.
        #expect(server.connections.first?.query["secretid"] == TencentTestKeys.secretID)
        #expect(events.contains("4002"), "\(events)")
        #expect(events.contains(SecretScrubber.replacement), "\(events)")
        #expect(!events.contains(TencentTestKeys.secretID), "\(events)")
        #expect(!failure.contains(TencentTestKeys.secretID), "\(failure)")
        #expect(!logs.all.joined().contains(TencentTestKeys.secretID), "\(logs.all)")
    }
}
