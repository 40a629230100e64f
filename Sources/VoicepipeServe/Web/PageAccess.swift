import Foundation
import NIOCore
import NIOHTTP1

/// Who may see the talk page and the console (DESIGN.md, "Browser"). With a token (`console: { token:
/// "${VAR}" }`, or `VOICEPIPE_CONSOLE_TOKEN` for `voicepipe run --console`), every request must carry it,
/// as `?token=` or `Authorization: Bearer`; without one, only clients on a loopback address are answered.
/// The page files under `/static/` hold no data and are served to anyone who reaches the port.
struct PageAccess: Sendable {
    enum Verdict: Equatable, Sendable {
        case allowed
        /// 401 (a token is needed or wrong) or 403 (no token configured, client not on loopback), with why.
        case refused(status: Int, reason: String)
    }

    var token: String?

    func check(uri: String, headers: HTTPHeaders, remote: SocketAddress?) -> Verdict {
        let unix = remote.map { if case .unixDomainSocket = $0 { true } else { false } } ?? false
        return check(uri: uri, authorization: headers["Authorization"], remoteIP: unix ? "127.0.0.1" : remote?.ipAddress)
    }

    /// The rule itself: `authorization` are the request's `Authorization` headers, `remoteIP` the client's address.
    func check(uri: String, authorization: [String], remoteIP: String?) -> Verdict {
        guard let token, !token.isEmpty else {
            return Self.isLoopback(remoteIP) ? .allowed
                : .refused(status: 403, reason: "this page answers on loopback addresses only; set console.token in the serve configuration to open it to others")
        }
        var offered: [String] = []
        if let query = uri.split(separator: "?", maxSplits: 1).dropFirst().first {
            for item in query.split(separator: "&") where item.hasPrefix("token=") {
                offered.append(Self.percentDecoded(String(item.dropFirst(6))))
            }
        }
        for value in authorization where value.lowercased().hasPrefix("bearer ") {
            offered.append(String(value.dropFirst(7)).trimmingCharacters(in: .whitespaces))
        }
        if offered.isEmpty { return .refused(status: 401, reason: "a token is needed: add ?token=… to the address, or send Authorization: Bearer …") }
        return offered.contains { Self.same($0, token) } ? .allowed : .refused(status: 401, reason: "wrong token")
    }

    /// Compares in time that depends on the lengths only.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var diff = UInt8(x.count == y.count ? 0 : 1)
        for i in 0..<max(x.count, y.count) { diff |= (i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0) }
        return diff == 0
    }

    static func isLoopback(_ ip: String?) -> Bool {
        guard let ip else { return false }
        return ip.hasPrefix("127.") || ip == "::1" || ip.hasPrefix("::ffff:127.")
    }

    static func percentDecoded(_ s: String) -> String {
        s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? s
    }
}
