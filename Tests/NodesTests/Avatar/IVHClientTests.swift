import Foundation
import Logging
import PipelineCore
import Testing
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes

@Suite("IVH client against a local stream-service server")
struct IVHClientTests {
    static func client(_ server: IVHServer, token: String? = nil, caFile: String? = nil, timeout: Duration = .seconds(5)) throws -> IVHClient {
        try IVHClient(IVHConfiguration(baseURL: server.baseURL, appkey: server.options.appkey,
                                       accessToken: token ?? server.options.accessToken, caFile: caFile, timeout: timeout))
    }

    @Test func sessionLifecycle() async throws {
        let server = IVHServer()
        try await server.start()
        let client = try Self.client(server)
        let s = try await client.newSession(.init(userID: "u1", protocolName: "rtmp", driverType: .text, protocolOptions: ["RtmpPushAddr": .string("rtmp://x/y"), "TrtcRoomId": .int(1234), "TrtcUseExternalApp": .bool(true)]))
        #expect(s.status == 1)
        #expect(s.playURL.contains(s.id))
        let body = try #require(server.calls.first { $0.operation == "newsession" }?.body)
        let payload = try #require((try JSONSerialization.jsonObject(with: Data(body.utf8)) as? [String: Any])?["Payload"] as? [String: Any])
        #expect(payload["UserId"] as? String == "u1")
        #expect(payload["Protocol"] as? String == "rtmp")
        #expect(payload["DriverType"] as? Int == 1)
        let options = payload["ProtocolOption"] as? [String: Any]
        #expect(options?["RtmpPushAddr"] as? String == "rtmp://x/y")
        #expect(options?["TrtcRoomId"] as? Int == 1234, "numbers stay JSON numbers")
        #expect(options?["TrtcUseExternalApp"] as? Bool == true, "booleans stay JSON booleans")
        try await client.startSession(s.id)
        try await client.sendText(sessionID: s.id, text: "hello", interrupt: true)
        let listed = try await client.listSessions()
        #expect(listed.map(\.id) == [s.id])
        #expect(listed.first?.userID == "u1")
        let status = try await client.status(s.id)
        #expect(status.status == 1 && status.isStarted == true)
        #expect(try await client.queryConfiguration().contains("webrtc"))
        try await client.closeSession(s.id)
        #expect(server.closes(s.id) == 1)
        #expect(try await client.listSessions().isEmpty)
        try await client.shutdown()
        await server.stop()
    }

    @Test func wrongSignatureIsRejectedWithTheDocumentedCode() async throws {
        let server = IVHServer()
        try await server.start()
        let client = try Self.client(server, token: "not-the-token")
        let error = await #expect(throws: IVHError.self) { _ = try await client.newSession(.init(userID: "u", driverType: .text)) }
        #expect(error?.code == 100005)
        #expect(error?.description.contains("no permission") == true)
        #expect(error?.description.contains("signature verification failed") == true, "the server's own message is kept")
        #expect(server.calls.count == 1 && server.calls[0].accepted == false)
        #expect(server.created.isEmpty)
        try await client.shutdown()
        await server.stop()
    }

    @Test func closingAnUnknownSessionSaysSo() async throws {
        let server = IVHServer()
        try await server.start()
        let client = try Self.client(server)
        let error = await #expect(throws: IVHError.self) { try await client.closeSession("m404") }
        #expect(error?.code == 110006)
        #expect(error?.description.contains("no such session") == true)
        try await client.shutdown()
        await server.stop()
    }

    @Test func commandChannelRejectsABadSignature() async throws {
        let server = IVHServer()
        try await server.start()
        let good = try Self.client(server)
        let s = try await good.newSession(.init(userID: "u", driverType: .voice))
        try await good.startSession(s.id)
        let bad = try Self.client(server, token: "wrong")
        let observer = IVHChannelObserver(push: { _, _ in }, connected: { _ in }, disconnected: { _ in }, sent: { _ in })
        let channel = IVHCommandChannel(sessionID: s.id, url: { bad.commandChannelURL(sessionID: s.id) }, tls: nil, clock: ContinuousClock(),
                                        heldPackets: 4, maxFailures: 0, logger: Logger(label: "test"), observer: observer)
        await #expect(throws: IVHError.self) { try await channel.run() }
        #expect(server.rejectedChannels >= 1)
        #expect(server.connections == 0)
        try await good.closeSession(s.id)
        try await good.shutdown()
        try await bad.shutdown()
        await server.stop()
    }

    @Test func httpsWithAPrivateCA() async throws {
        let ca = try TestCA.make()
        var options = IVHServer.Options()
        options.tls = try TestCA.serverContext(ca)
        let server = IVHServer(options)
        try await server.start()
        #expect(server.baseURL.hasPrefix("https://"))

        // Without the CA the system store does not trust the server.
        let untrusting = try Self.client(server, timeout: .seconds(1))
        let error = await #expect(throws: IVHError.self) { _ = try await untrusting.listSessions() }
        #expect(error?.kind == .transport)
        try await untrusting.shutdown()

        // With ca_file it does, over HTTPS and WSS.
        let client = try Self.client(server, caFile: ca.caPath)
        let s = try await client.newSession(.init(userID: "tls", driverType: .text))
        try await client.startSession(s.id)
        let connected = TestFlag()
        let observer = IVHChannelObserver(push: { _, _ in }, connected: { _ in connected.set() }, disconnected: { _ in }, sent: { _ in })
        let channel = IVHCommandChannel(sessionID: s.id, url: { client.commandChannelURL(sessionID: s.id) },
                                        tls: try client.configuration.tlsConfiguration(), clock: ContinuousClock(),
                                        heldPackets: 4, maxFailures: 0, logger: Logger(label: "test"), observer: observer)
        await channel.send(.text("over tls", interrupt: false))
        channel.finish()
        try await channel.run()
        #expect(connected.isSet)
        #expect(server.commands.map(\.text) == ["over tls"])
        try await client.closeSession(s.id)
        try await client.shutdown()
        await server.stop()
    }

    @Test func unreadableCAFileIsAConfigurationError() {
        #expect(throws: IVHError.self) {
            _ = try IVHClient(IVHConfiguration(appkey: "k", accessToken: "t", caFile: "/nonexistent/ca.pem"))
        }
    }
}
