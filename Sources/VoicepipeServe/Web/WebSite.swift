import Foundation
import PipelineCore
import NIOCore
import NIOHTTP1
import Synchronization

/// The browser side of a `voicepipe serve` worker or a `voicepipe run --console`: the talk page (`/`), the
/// console (`/console`), their files (`/static/…`), the routes the talk page offers (`/talk/routes.json`),
/// the session list (`/console/sessions.json`) and the console's event stream (`/console/stream`).
final class WebSite: Sendable {
    /// A route the talk page can talk to: a `websocket` route with a fixed path.
    struct TalkRoute: Sendable {
        var name: String
        var path: String
        /// The route answers with audio.
        var answers: Bool
    }

    let access: PageAccess
    let talkRoutes: [TalkRoute]
    /// `voicepipe run --console`: no talk page (`/` leads to the console).
    let consoleOnly: Bool
    private let provider: LockedValue<@Sendable () -> [LiveSession]>
    /// Console viewers connected now, and updates skipped because a viewer did not keep up.
    let viewers = Atomic<Int>(0)
    let skippedUpdates = Atomic<Int>(0)

    init(access: PageAccess, talkRoutes: [TalkRoute], consoleOnly: Bool, sessions: @escaping @Sendable () -> [LiveSession] = { [] }) {
        self.access = access
        self.talkRoutes = talkRoutes
        self.consoleOnly = consoleOnly
        provider = LockedValue(sessions)
    }

    /// The running pipelines the console lists.
    func sessions() -> [LiveSession] { provider.withLock { $0 }() }

    /// Sets where the session list comes from (for an owner that exists only after its site).
    func listSessions(_ sessions: @escaping @Sendable () -> [LiveSession]) { provider.withLock { $0 = sessions } }

    /// True for the paths this site answers.
    static func serves(_ path: String) -> Bool {
        path.hasPrefix("/static/") || ["/", "/index.html", "/console", "/console/", "/talk/routes.json", "/console/sessions.json", "/console/stream"].contains(path)
    }

    /// Answers one request on `channel` (whose HTTP encoder is in place). Plain pages close the
    /// connection after the answer; the event stream stays open.
    func respond(to head: HTTPRequestHead, on channel: any Channel) {
        let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
        guard head.method == .GET || head.method == .HEAD else {
            return reply(head, on: channel, status: .methodNotAllowed, type: "text/plain", body: Array("GET only\n".utf8))
        }
        if path.hasPrefix("/static/") {
            guard let asset = WebAssets.asset(at: path) else { return reply(head, on: channel, status: .notFound, type: "text/plain", body: Array("not found\n".utf8)) }
            return reply(head, on: channel, status: .ok, type: asset.contentType, body: asset.bytes, cache: true)
        }
        if case .refused(let status, let reason) = access.check(uri: head.uri, headers: head.headers, remote: channel.remoteAddress) {
            return reply(head, on: channel, status: HTTPResponseStatus(statusCode: status), type: "text/plain; charset=utf-8", body: Array((reason + "\n").utf8),
                         extra: status == 401 ? [("WWW-Authenticate", "Bearer")] : [])
        }
        let query = URLComponents(string: head.uri)?.queryItems ?? []
        switch path {
        case "/", "/index.html":
            if consoleOnly {
                let token = query.first { $0.name == "token" }?.value
                var location = URLComponents(string: "/console")!
                if let token { location.queryItems = [URLQueryItem(name: "token", value: token)] }
                return reply(head, on: channel, status: .found, type: "text/plain", body: Array("see /console\n".utf8), extra: [("Location", location.string ?? "/console")])
            }
            fallthrough
        case "/console", "/console/":
            let asset = WebAssets.asset(at: path)!
            reply(head, on: channel, status: .ok, type: asset.contentType, body: asset.bytes)
        case "/talk/routes.json":
            let list = talkRoutes.map { ["name": $0.name, "path": $0.path, "answers": $0.answers] as [String: Any] }
            reply(head, on: channel, status: .ok, type: "application/json", body: Array(ConsoleSnapshot.json(list).utf8))
        case "/console/sessions.json":
            reply(head, on: channel, status: .ok, type: "application/json", body: Array(ConsoleSnapshot.sessions(sessions()).utf8))
        default: // "/console/stream"
            let session = query.first { $0.name == "session" }?.value.flatMap { $0.isEmpty ? nil : $0 }
            let rate = query.first { $0.name == "rate" }?.value.flatMap(Int.init) ?? 4
            ConsoleFeed(site: self, channel: channel, session: session, rate: rate).start(version: head.version)
        }
    }

    private func reply(_ head: HTTPRequestHead, on channel: any Channel, status: HTTPResponseStatus, type: String, body: [UInt8],
                       cache: Bool = false, extra: [(String, String)] = []) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: type)
        headers.add(name: "Content-Length", value: "\(body.count)")
        headers.add(name: "Connection", value: "close")
        headers.add(name: "Cache-Control", value: cache ? "max-age=60" : "no-store")
        headers.add(name: "X-Content-Type-Options", value: "nosniff")
        for (k, v) in extra { headers.add(name: k, value: v) }
        channel.write(HTTPServerResponsePart.head(HTTPResponseHead(version: head.version, status: status, headers: headers)), promise: nil)
        if head.method != .HEAD { channel.write(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(bytes: body))), promise: nil) }
        channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
    }
}
