import Foundation
import NIOCore
import NIOHTTP1
#if canImport(Glibc)
import Glibc
#endif

/// Who may see the talk page and the console, and which browser pages may open a session WebSocket
/// (DESIGN.md, "Browser").
///
/// Pages (`/`, `/console`, `/console/stream`, `/console/sessions.json`, `/talk/routes.json`):
/// - With a token (`console: { token: "${VAR}" }`, or `VOICEPIPE_CONSOLE_TOKEN` for `voicepipe run
///   --console`), every request must carry it, once: as `?token=` or `Authorization: Bearer`. A request
///   with two (two `token=` parameters, two headers, or both) is refused with 400, so one request is one
///   guess.
/// - Without one, only a loopback client is answered, and only when the request names the server by a
///   loopback name (`Host: localhost`, `127.x.x.x`, `[::1]`, any port) and comes from no foreign page
///   (an `Origin` header, if any, is a loopback one or listed in `allowed_origins`). A page of another
///   site that has its name resolve to 127.0.0.1 (DNS rebinding) sends its own name as `Host`, and is
///   refused (403).
///
/// Session WebSockets (the routes' paths): clients that are not browsers send no `Origin`, or one that
/// no browser sends (`ws://host`, as some WebSocket client libraries do), and are let through as before
/// (routes check their own credentials, as Tencent's signature). A browser always sends the page's
/// origin (`http(s)://…`, or `null`); the upgrade is refused (403) unless that origin is a loopback one, is
/// listed in `allowed_origins`, or is this server itself (the talk page) — same host and port as `Host`
/// — with a `Host` that a rebinding page cannot send: an IP address, a loopback name, or any name when
/// the request carries the console token (which the talk page adds when it has one).
///
/// The page files under `/static/` hold no data and are served to anyone who reaches the port.
struct PageAccess: Sendable {
    enum Verdict: Equatable, Sendable {
        case allowed
        /// 400 (two tokens), 401 (a token is needed or wrong) or 403 (not a loopback request, a foreign
        /// page), with why.
        case refused(status: Int, reason: String)
    }

    var token: String?
    /// Origins (`scheme://host[:port]`, lower case, no default port) allowed besides loopback ones.
    var allowedOrigins: Set<String> = []

    init(token: String?, allowedOrigins: [String] = []) {
        self.token = token
        self.allowedOrigins = Set(allowedOrigins.compactMap(Self.normalizedOrigin))
    }

    /// The headers of a request that matter here.
    struct Request {
        var uri: String
        var authorization: [String] = []
        var host: String?
        var origin: String?
        var remoteIP: String?

        init(uri: String, authorization: [String] = [], host: String? = nil, origin: String? = nil, remoteIP: String?) {
            self.uri = uri
            self.authorization = authorization
            self.host = host
            self.origin = origin
            self.remoteIP = remoteIP
        }

        init(uri: String, headers: HTTPHeaders, remote: SocketAddress?) {
            let unix = remote.map { if case .unixDomainSocket = $0 { true } else { false } } ?? false
            self.init(uri: uri, authorization: headers["Authorization"], host: headers["Host"].first, origin: headers["Origin"].first,
                      remoteIP: unix ? "127.0.0.1" : remote?.ipAddress)
            if headers["Host"].count > 1 { host = "" }     // two Host headers: neither is trusted
            if headers["Origin"].count > 1 { origin = "null" }
        }
    }

    func check(uri: String, headers: HTTPHeaders, remote: SocketAddress?) -> Verdict {
        check(Request(uri: uri, headers: headers, remote: remote))
    }

    /// The rule for the pages, on the request's address alone (no Host, no Origin: a client that is not a browser).
    func check(uri: String, authorization: [String], remoteIP: String?) -> Verdict {
        check(Request(uri: uri, authorization: authorization, remoteIP: remoteIP))
    }

    /// The rule for the pages.
    func check(_ r: Request) -> Verdict {
        guard let token, !token.isEmpty else {
            guard Self.isLoopback(r.remoteIP) else {
                return .refused(status: 403, reason: "this page answers on loopback addresses only; set console.token in the serve configuration to open it to others")
            }
            if let host = r.host, !isTrustedHost(host) {
                return .refused(status: 403, reason: "this page answers to a loopback name only (Host: localhost or 127.0.0.1), not to '\(Self.shown(host))'; set console.token to open it to other names")
            }
            if let origin = r.origin, Self.isBrowserOrigin(origin), !isAllowedOrigin(origin) {
                return .refused(status: 403, reason: "requests from the page at '\(Self.shown(origin))' are refused; add it to console.allowed_origins to allow it")
            }
            return .allowed
        }
        switch offeredToken(r) {
        case .none: return .refused(status: 401, reason: "a token is needed: add ?token=… to the address, or send Authorization: Bearer …")
        case .several: return .refused(status: 400, reason: "a request carries one token (one ?token= or one Authorization header), not several")
        case .one(let offered): return Self.same(offered, token) ? .allowed : .refused(status: 401, reason: "wrong token")
        }
    }

    /// The rule for a session WebSocket upgrade.
    func checkUpgrade(_ r: Request) -> Verdict {
        var carriesToken = false
        if let token, !token.isEmpty {
            switch offeredToken(r) {
            case .several: return .refused(status: 400, reason: "a request carries one token (one ?token= or one Authorization header), not several")
            case .one(let offered): carriesToken = Self.same(offered, token)
            case .none: break
            }
        }
        guard let origin = r.origin, Self.isBrowserOrigin(origin) else { return .allowed }   // not a browser
        if isAllowedOrigin(origin) { return .allowed }
        if let o = Self.originHostPort(origin), let host = r.host, let h = Self.hostPort(host), o == h,
           carriesToken || Self.isIPLiteral(h.host) || Self.isLoopbackName(h.host) {
            return .allowed
        }
        return .refused(status: 403, reason: "a WebSocket from the page at '\(Self.shown(origin))' is refused; add it to console.allowed_origins to allow it")
    }

    enum Offered { case none, one(String), several }

    /// The tokens a request carries: `token` query parameters and `Authorization: Bearer` headers.
    func offeredToken(_ r: Request) -> Offered {
        var offered: [String] = []
        if let query = r.uri.split(separator: "?", maxSplits: 1).dropFirst().first {
            for item in query.split(separator: "&") where item == "token" || item.hasPrefix("token=") {
                offered.append(Self.percentDecoded(String(item.dropFirst(6))))
            }
        }
        for value in r.authorization where value.lowercased().hasPrefix("bearer ") {
            offered.append(String(value.dropFirst(7)).trimmingCharacters(in: .whitespaces))
        }
        switch offered.count {
        case 0: return .none
        case 1: return .one(offered[0])
        default: return .several
        }
    }

    /// `Host` names this server by a loopback name or address, or by the host of an allowed origin.
    func isTrustedHost(_ host: String) -> Bool {
        guard let h = Self.hostPort(host) else { return false }
        if Self.isLoopbackName(h.host) || Self.isLoopbackAddress(h.host) { return true }
        return allowedOrigins.contains { Self.originHostPort($0)?.host == h.host }
    }

    /// An `Origin` of a loopback page, or one listed.
    func isAllowedOrigin(_ origin: String) -> Bool {
        guard let o = Self.normalizedOrigin(origin) else { return false }
        if allowedOrigins.contains(o) { return true }
        guard let h = Self.originHostPort(o) else { return false }
        return Self.isLoopbackName(h.host) || Self.isLoopbackAddress(h.host)
    }

    /// An origin a browser sends: a page's `http(s)://…`, or `null` (a sandboxed or local page).
    /// WebSocket client libraries that send one send `ws://host`, which no browser does.
    static func isBrowserOrigin(_ origin: String) -> Bool {
        let o = origin.trimmingCharacters(in: .whitespaces).lowercased()
        return o.hasPrefix("http://") || o.hasPrefix("https://") || o == "null" || !o.contains("://")
    }

    /// `scheme://host[:port]` in lower case without a default port; nil for anything else (`null`, a path).
    static func normalizedOrigin(_ origin: String) -> String? {
        let o = origin.trimmingCharacters(in: .whitespaces).lowercased()
        guard let c = URLComponents(string: o), let scheme = c.scheme, ["http", "https"].contains(scheme),
              let host = c.host, !host.isEmpty, c.path.isEmpty || c.path == "/", c.query == nil, c.user == nil else { return nil }
        let shownHost = host.contains(":") && !host.hasPrefix("[") ? "[\(host)]" : host
        if let port = c.port, !(scheme == "http" && port == 80) && !(scheme == "https" && port == 443) {
            return "\(scheme)://\(shownHost):\(port)"
        }
        return "\(scheme)://\(shownHost)"
    }

    /// Host and port of an origin (the scheme's default port when none is written).
    static func originHostPort(_ origin: String) -> (host: String, port: Int)? {
        guard let o = normalizedOrigin(origin), let c = URLComponents(string: o), let host = c.host else { return nil }
        return (bare(host), c.port ?? (c.scheme == "https" ? 443 : 80))
    }

    /// Host and port of a `Host` header (`name`, `name:port`, `1.2.3.4:port`, `[::1]:port`); port 80 when none.
    static func hostPort(_ header: String) -> (host: String, port: Int)? {
        let h = header.trimmingCharacters(in: .whitespaces).lowercased()
        guard !h.isEmpty, !h.contains(where: { $0 == "/" || $0 == "@" || $0 == " " || $0 == "?" || $0 == "#" }) else { return nil }
        if h.hasPrefix("[") {
            guard let close = h.firstIndex(of: "]") else { return nil }
            let host = String(h[h.index(after: h.startIndex)..<close])
            let rest = h[h.index(after: close)...]
            if rest.isEmpty { return (host, 80) }
            guard rest.hasPrefix(":"), let port = Int(rest.dropFirst()), (0...65535).contains(port) else { return nil }
            return (host, port)
        }
        let parts = h.split(separator: ":", omittingEmptySubsequences: false)
        switch parts.count {
        case 1: return (bare(String(parts[0])), 80)
        case 2:
            guard let port = Int(parts[1]), (0...65535).contains(port) else { return nil }
            return (bare(String(parts[0])), port)
        default: return nil
        }
    }

    /// A host without brackets or a trailing dot.
    static func bare(_ host: String) -> String {
        var h = host
        if h.hasPrefix("[") && h.hasSuffix("]") { h = String(h.dropFirst().dropLast()) }
        while h.hasSuffix(".") { h.removeLast() }
        return h
    }

    static func isLoopbackName(_ host: String) -> Bool { host == "localhost" }

    /// A literal IPv4 address in 127.0.0.0/8, `::1`, or an IPv4-mapped loopback address.
    static func isLoopbackAddress(_ host: String) -> Bool {
        var v4 = in_addr()
        if inet_pton(AF_INET, host, &v4) == 1 { return UInt32(bigEndian: v4.s_addr) >> 24 == 127 }
        var v6 = in6_addr()
        guard inet_pton(AF_INET6, host, &v6) == 1 else { return false }
        let bytes = withUnsafeBytes(of: v6) { Array($0) }
        if bytes == Array(repeating: 0, count: 15) + [1] { return true }
        return bytes[0..<10].allSatisfy { $0 == 0 } && bytes[10] == 0xFF && bytes[11] == 0xFF && bytes[12] == 127
    }

    static func isIPLiteral(_ host: String) -> Bool {
        var v4 = in_addr(), v6 = in6_addr()
        return inet_pton(AF_INET, host, &v4) == 1 || inet_pton(AF_INET6, host, &v6) == 1
    }

    /// A header value fit for a message: printable, at most 100 characters.
    static func shown(_ s: String) -> String {
        let clean = String(s.unicodeScalars.filter { $0.value >= 0x20 && $0.value < 0x7F }.map(Character.init))
        return clean.count > 100 ? String(clean.prefix(100)) + "…" : clean
    }

    /// Compares in time that depends on the lengths only.
    static func same(_ a: String, _ b: String) -> Bool {
        let x = Array(a.utf8), y = Array(b.utf8)
        var diff = UInt8(x.count == y.count ? 0 : 1)
        for i in 0..<max(x.count, y.count) { diff |= (i < x.count ? x[i] : 0) ^ (i < y.count ? y[i] : 0) }
        return diff == 0
    }

    /// A client's socket address is a loopback one.
    static func isLoopback(_ ip: String?) -> Bool {
        guard let ip else { return false }
        return ip.hasPrefix("127.") || ip == "::1" || ip.hasPrefix("::ffff:127.")
    }

    static func percentDecoded(_ s: String) -> String {
        s.replacingOccurrences(of: "+", with: " ").removingPercentEncoding ?? s
    }
}
