import Foundation
import Logging
import NATSClient
import Testing

/// Three `nats-server`s routed into one JetStream cluster on loopback, as a production NATS is run: the
/// publisher is given one server, learns the others from it (`connect_urls`), creates its stream with
/// three replicas, and loses the server it is connected to (SIGKILL) in the middle of a steady stream.
@Suite("NATS client against a three-server JetStream cluster", .serialized)
struct NATSClusterTests {
    /// Starts the cluster and waits until JetStream has a meta leader (streams can be created).
    static func startCluster() async throws -> [NATSServerProcess] {
        let clusterPorts = try (0..<3).map { _ in try NATSServerProcess.freePort() }
        let servers = try (0..<3).map { i in
            let routes = clusterPorts.enumerated().filter { $0.offset != i }.map { "nats://127.0.0.1:\($0.element)" }
            return try NATSServerProcess(arguments: ["-n", "vp-\(i)", "--cluster_name", "VPCLUSTER",
                                                     "--cluster", "nats://127.0.0.1:\(clusterPorts[i])", "--routes", routes.joined(separator: ",")])
        }
        for s in servers { try await s.start() }
        let c = try await NATSConnection.connect(options: try NATSOptions(url: servers[0].url))
        defer { c.close() }
        let deadline = ContinuousClock.now + .seconds(30)
        while ContinuousClock.now < deadline {
            if let answer = try? await c.request("$JS.API.INFO", payload: [], timeout: .seconds(2)),
               let o = try? JSONSerialization.jsonObject(with: Data(answer.payload)) as? [String: Any], o["error"] == nil,
               c.currentInfo.connectURLs.count >= 3 {
                return servers
            }
            try await Task.sleep(for: .milliseconds(200))
        }
        throw NATSError.timeout("the three servers did not form a JetStream cluster: \(servers[0].logText.suffix(1500))")
    }

    @Test func aReplicatedStreamLosesNothingWhenTheConnectedServerDies() async throws {
        let servers = try await Self.startCluster()
        // Only the first server is configured: the others come from the cluster.
        var c = JetStreamPublisher.Configuration(options: try NATSOptions(url: servers[0].url), stream: "VPCLUSTER", streamSubjects: ["vp.>"])
        c.replicas = 3
        c.ackTimeout = .seconds(1)
        let p = JetStreamPublisher(configuration: c, logger: Logger(label: "test.nats.cluster"))
        let loop = Task { await p.run() }
        p.publish(subject: "vp.c.first", payload: Array("first".utf8))
        #expect(await p.flush(timeout: .seconds(20)), "the replicated stream was not created: \(p.lastError ?? "")")
        let total = 2000
        let producer = Task {
            for i in 0..<total {
                p.publish(subject: "vp.c.live", payload: Array("\(i)".utf8))
                if i % 20 == 0 { try? await Task.sleep(for: .milliseconds(5)) }
            }
        }
        try await Task.sleep(for: .milliseconds(200))
        servers[0].kill()
        await producer.value
        let stats = await p.close(timeout: .seconds(30))
        await loop.value
        #expect(stats.held == 0 && stats.dropped == 0 && stats.rejected == 0, "\(stats) \(p.lastError ?? "")")
        #expect(stats.disconnects >= 1 && stats.connects >= 2, "\(stats)")

        // Read back from a surviving server: the stream kept its three replicas' worth of history.
        let reader = try await NATSConnection.connect(options: try NATSOptions(url: servers[1].url))
        defer { reader.close() }
        let info = try await reader.request("$JS.API.STREAM.INFO.VPCLUSTER", payload: [], timeout: .seconds(3))
        let object = try #require(try JSONSerialization.jsonObject(with: Data(info.payload)) as? [String: Any])
        #expect((object["config"] as? [String: Any])?["num_replicas"] as? Int == 3, "\(object)")
        let all = try await StreamReader(connection: reader, stream: "VPCLUSTER").all().filter { $0.subject == "vp.c.live" }
        let values = all.map { Int($0.payload) ?? -1 }
        // Each exactly once: what was resent after the failover was recognised by Nats-Msg-Id.
        #expect(values.count == total, "stored \(values.count), resent \(stats.resent)")
        let missing = Set(0..<total).subtracting(values)
        #expect(missing.isEmpty, "\(missing.count) missing, e.g. \(missing.sorted().prefix(10))")
    }
}
