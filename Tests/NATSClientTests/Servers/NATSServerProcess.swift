import Foundation
import NATSClient

/// A real `nats-server` (Debian's package) with JetStream, on a free loopback port with its own store
/// directory; can be killed with SIGKILL and started again on the same port and store.
final class NATSServerProcess: @unchecked Sendable {
    let port: Int
    let storeDir: String
    let extraArguments: [String]
    private var process: Process?
    private let log: String

    static var binary: String {
        for p in ["/usr/bin/nats-server", "/usr/local/bin/nats-server", "/usr/sbin/nats-server"] where FileManager.default.isExecutableFile(atPath: p) { return p }
        return "nats-server"
    }

    init(port: Int? = nil, arguments: [String] = []) throws {
        self.port = try port ?? Self.freePort()
        storeDir = NSTemporaryDirectory() + "vp-nats-\(UUID().uuidString.prefix(8))"
        log = storeDir + ".log"
        extraArguments = arguments
        try FileManager.default.createDirectory(atPath: storeDir, withIntermediateDirectories: true)
    }

    var url: String { "nats://127.0.0.1:\(port)" }

    /// Starts the server and waits until it accepts connections.
    func start() async throws {
        guard FileManager.default.isExecutableFile(atPath: Self.binary) else {
            throw NATSError.connectFailed(NATSServerAddress(host: "127.0.0.1", port: port), "nats-server is not installed (scripts/install-deps.sh installs it)")
        }
        let p = Process()
        p.executableURL = URL(fileURLWithPath: Self.binary)
        p.arguments = ["-a", "127.0.0.1", "-p", "\(port)", "-js", "-sd", storeDir] + extraArguments
        _ = FileManager.default.createFile(atPath: log, contents: nil)
        let handle = FileHandle(forWritingAtPath: log)
        handle?.seekToEndOfFile()
        p.standardOutput = handle
        p.standardError = handle
        try p.run()
        process = p
        let deadline = Date().addingTimeInterval(10)
        while Date() < deadline {
            if Self.accepts(port: port) { return }
            try await Task.sleep(for: .milliseconds(50))
        }
        throw NATSError.connectFailed(NATSServerAddress(host: "127.0.0.1", port: port), "nats-server did not start: \(logText)")
    }

    var logText: String { (try? String(contentsOfFile: log, encoding: .utf8)) ?? "" }

    /// SIGKILL: no goodbye to clients, as a crash.
    func kill() {
        guard let p = process else { return }
        Foundation.kill(p.processIdentifier, SIGKILL)
        p.waitUntilExit()
        process = nil
    }

    func stop() {
        guard let p = process else { return }
        p.terminate()
        p.waitUntilExit()
        process = nil
    }

    deinit {
        if let p = process { Foundation.kill(p.processIdentifier, SIGKILL); p.waitUntilExit() }
        try? FileManager.default.removeItem(atPath: storeDir)
        try? FileManager.default.removeItem(atPath: log)
    }

    static func freePort() throws -> Int {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = 0
        var len = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, len) } }
        _ = withUnsafeMutablePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &len) } }
        return Int(UInt16(bigEndian: addr.sin_port))
    }

    static func accepts(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        addr.sin_port = UInt16(port).bigEndian
        return withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
    }
}

/// Reads a stream back through the JetStream API (`STREAM.INFO`, `STREAM.MSG.GET`).
struct StreamReader {
    let connection: NATSConnection
    let stream: String

    func messageCount() async throws -> Int {
        let answer = try await connection.request("$JS.API.STREAM.INFO.\(stream)", payload: [], timeout: .seconds(3))
        let object = try JSONSerialization.jsonObject(with: Data(answer.payload)) as? [String: Any]
        return (object?["state"] as? [String: Any])?["messages"] as? Int ?? -1
    }

    /// Every message's subject and payload, in stream order.
    func all() async throws -> [(subject: String, payload: String)] {
        let answer = try await connection.request("$JS.API.STREAM.INFO.\(stream)", payload: [], timeout: .seconds(3))
        let state = (try JSONSerialization.jsonObject(with: Data(answer.payload)) as? [String: Any])?["state"] as? [String: Any]
        let first = state?["first_seq"] as? Int ?? 1, last = state?["last_seq"] as? Int ?? 0
        var out: [(String, String)] = []
        guard last >= first else { return [] }
        for seq in first...last {
            let m = try await connection.request("$JS.API.STREAM.MSG.GET.\(stream)", payload: Array("{\"seq\":\(seq)}".utf8), timeout: .seconds(3))
            let o = try JSONSerialization.jsonObject(with: Data(m.payload)) as? [String: Any]
            guard let msg = o?["message"] as? [String: Any], let subject = msg["subject"] as? String else { continue }
            let data = (msg["data"] as? String).flatMap { Data(base64Encoded: $0) } ?? Data()
            out.append((subject, String(decoding: data, as: UTF8.self)))
        }
        return out
    }
}
