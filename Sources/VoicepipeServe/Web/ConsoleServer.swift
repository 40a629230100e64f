import Foundation
import NIOCore
import NIOHTTP1
import NIOPosix

/// The console of `voicepipe run --console HOST:PORT`: the same pages as `voicepipe serve`'s, for the
/// run's pipelines (`/` leads to `/console`). Without `VOICEPIPE_CONSOLE_TOKEN` it answers loopback
/// clients only, and refuses to listen on any other address.
package final class ConsoleServer: Sendable {
    let site: WebSite
    private let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    private let channel: any Channel

    /// Parses `HOST:PORT` (`[v6]:PORT`, or `PORT` alone for 127.0.0.1).
    package static func address(_ text: String) -> (host: String, port: Int)? {
        if let port = Int(text), (0...65535).contains(port) { return ("127.0.0.1", port) }
        guard let colon = text.lastIndex(of: ":"), let port = Int(text[text.index(after: colon)...]), (0...65535).contains(port) else { return nil }
        var host = String(text[..<colon])
        if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return host.isEmpty ? nil : (host, port)
    }

    package static func isLoopbackHost(_ host: String) -> Bool {
        host == "localhost" || PageAccess.isLoopback(host)
    }

    package init(host: String, port: Int, token: String?, sessions: @escaping @Sendable () -> [LiveSession]) async throws {
        let site = WebSite(access: PageAccess(token: token), talkRoutes: [], consoleOnly: true, sessions: sessions)
        self.site = site
        channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.configureHTTPServerPipeline()
                    try channel.pipeline.syncOperations.addHandler(ConsoleHTTPHandler(site: site))
                }
            }
            .bind(host: host, port: port).get()
    }

    /// The port listened on (useful with port 0).
    package var port: Int { channel.localAddress?.port ?? 0 }

    package func close() async {
        try? await channel.close()
        try? await group.shutdownGracefully()
    }
}

/// Requests to the run console: the site's pages, 404 for anything else.
private final class ConsoleHTTPHandler: ChannelInboundHandler {
    typealias InboundIn = HTTPServerRequestPart
    let site: WebSite
    private var head: HTTPRequestHead?

    init(site: WebSite) { self.site = site }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch unwrapInboundIn(data) {
        case .head(let h): head = h
        case .body: break
        case .end:
            guard let head else { return }
            self.head = nil
            let path = String(head.uri.split(separator: "?", maxSplits: 1).first ?? "")
            if WebSite.serves(path) && path != "/talk/routes.json" {
                site.respond(to: head, on: context.channel)
            } else {
                var headers = HTTPHeaders()
                headers.add(name: "Content-Length", value: "10")
                headers.add(name: "Connection", value: "close")
                let channel = context.channel
                channel.write(HTTPServerResponsePart.head(HTTPResponseHead(version: head.version, status: .notFound, headers: headers)), promise: nil)
                channel.write(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(string: "not found\n"))), promise: nil)
                channel.writeAndFlush(HTTPServerResponsePart.end(nil)).whenComplete { _ in channel.close(promise: nil) }
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}
