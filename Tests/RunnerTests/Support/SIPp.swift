import Foundation

/// SIPp (Debian's sip-tester) as the far end of a call: a scenario (a file of Tests/Fixtures/sip, or one
/// of SIPp's built-in ones) listening on 127.0.0.1, started and waited for until its socket is up.
enum SIPp {
    static let scenarios = packageRoot.appendingPathComponent("Tests/Fixtures/sip")

    /// Starts SIPp listening on `port` (UDP, or TCP with `tcp`) for `calls` calls of `scenario` (a file
    /// name in Tests/Fixtures/sip, or `builtin:uas`); every message it sends and receives goes to
    /// `messages` when given. Returns once it listens. SIPp exits 0 when every call succeeded.
    static func listen(_ scenario: String, port: Int, tcp: Bool = false, calls: Int = 1, timeout: Int = 30, messages: URL? = nil) throws -> Running {
        let which = scenario.hasPrefix("builtin:") ? ["-sn", String(scenario.dropFirst(8))] : ["-sf", scenarios.appendingPathComponent(scenario).path]
        var args = which + ["-i", "127.0.0.1", "-p", "\(port)", "-mp", "\(ServeTests.freePort() & ~1)", "-m", "\(calls)",
                            "-nostdin", "-timeout", "\(timeout)", "-timeout_error"]
        if tcp { args += ["-t", "t1"] }
        if let messages { args += ["-trace_msg", "-message_file", messages.path] }
        let sipp = try Running("/usr/bin/sipp", args)
        try waitListening(port: port, tcp: tcp)
        return sipp
    }

    /// Waits (up to 10 s) until something listens on 127.0.0.1:`port`.
    static func waitListening(port: Int, tcp: Bool = false) throws {
        for _ in 0..<100 {
            if try ServeTests.voicepipeLike("/usr/bin/ss", [tcp ? "-tln" : "-uln"]).stdout.contains("127.0.0.1:\(port) ") { return }
            usleep(100_000)
        }
    }

    /// The messages SIPp logged (`-trace_msg`).
    static func messages(_ file: URL) -> String { (try? String(contentsOf: file, encoding: .utf8)) ?? "" }

    /// How many requests SIPp received whose request line starts with `start` (`INVITE sip:bob@`).
    static func received(_ file: URL, _ start: String) -> Int {
        messages(file).components(separatedBy: "\n").filter { $0.hasPrefix(start) }.count
    }
}
