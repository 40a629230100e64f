import Foundation
import NIOCore
import PipelineCore
import NIOPosix

/// Where a Wyoming server listens: `tcp://host:port` (IPv6 as `tcp://[::1]:10300`) or `unix://PATH`.
public enum WyomingAddress: Sendable, Hashable, CustomStringConvertible {
    /// A TCP server.
    case tcp(host: String, port: Int)
    /// A Unix domain socket.
    case unix(path: String)

    /// Parses a URI; nil with a reason when it is not one of the two forms.
    public static func parse(_ uri: String) -> Result<WyomingAddress, WyomingProtocolError> {
        if uri.hasPrefix("unix://") {
            let path = String(uri.dropFirst(7))
            return path.isEmpty ? .failure(WyomingProtocolError("unix:// needs a socket path")) : .success(.unix(path: path))
        }
        guard uri.hasPrefix("tcp://") else {
            return .failure(WyomingProtocolError("uri must be tcp://HOST:PORT or unix://PATH, got '\(uri)'"))
        }
        let rest = String(uri.dropFirst(6)).split(separator: "/", maxSplits: 1).first.map(String.init) ?? ""
        let host: Substring, portText: Substring
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]"), rest[rest.index(after: close)...].hasPrefix(":") else {
                return .failure(WyomingProtocolError("uri '\(uri)': an IPv6 host is written [ADDRESS]:PORT"))
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            portText = rest[rest.index(close, offsetBy: 2)...]
        } else {
            guard let colon = rest.lastIndex(of: ":") else {
                return .failure(WyomingProtocolError("uri '\(uri)' has no port (Wyoming servers usually listen on 10300)"))
            }
            host = rest[..<colon]
            portText = rest[rest.index(after: colon)...]
        }
        guard !host.isEmpty else { return .failure(WyomingProtocolError("uri '\(uri)' has no host")) }
        guard let port = Int(portText), (1...65535).contains(port) else {
            return .failure(WyomingProtocolError("uri '\(uri)': port must be 1...65535"))
        }
        return .success(.tcp(host: String(host), port: port))
    }

    public var description: String {
        switch self {
        case .tcp(let host, let port): host.contains(":") ? "tcp://[\(host)]:\(port)" : "tcp://\(host):\(port)"
        case .unix(let path): "unix://\(path)"
        }
    }
}

/// What a connection delivers: events, then once its end.
package enum WyomingIncoming: Sendable {
    /// An event from the server.
    case event(WyomingEvent)
    /// The connection ended: `nil` when the server closed it, else why.
    case closed(String?)
}

/// Events received on one connection, taken without waiting (``poll()``) or with a deadline.
///
/// A ``Handoff`` without a bound (the socket's reads are the bound: NIO reads as the node takes).
package final class WyomingInbox: Sendable {
    private let queue = Handoff<WyomingIncoming>(capacity: Int.max, overflow: .suspend)

    package func push(_ item: WyomingIncoming) {
        queue.trySend(item)
    }

    /// The oldest item, if one is there.
    package func poll() -> WyomingIncoming? {
        queue.tryReceive()??.element
    }

    /// The next item, waiting at most `timeout`; nil when none came in time or the task was cancelled.
    package func next(within timeout: Duration) async -> WyomingIncoming? {
        if let item = poll() { return item }
        return await withTaskGroup(of: WyomingIncoming?.self) { group in
            group.addTask { await self.queue.receive()?.element }
            group.addTask { try? await Task.sleep(for: timeout); return nil }
            var first = await group.next() ?? nil
            group.cancelAll()
            // An item handed over just as the deadline passed is still returned, never lost.
            while first == nil, let rest = await group.next() { first = rest }
            return first
        }
    }
}

/// Decodes bytes from the socket into the inbox; a malformed event closes the connection.
private final class WyomingChannelHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    private var decoder = WyomingDecoder()
    private let inbox: WyomingInbox
    private var ended = false

    package init(inbox: WyomingInbox) { self.inbox = inbox }

    package func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let buffer = unwrapInboundIn(data)
        do {
            for event in try decoder.push(buffer.readableBytesView) { inbox.push(.event(event)) }
        } catch {
            end("malformed event from the server: \(error.message)")
            context.close(promise: nil)
        }
    }

    package func channelInactive(context: ChannelHandlerContext) {
        end(nil)
        context.fireChannelInactive()
    }

    package func errorCaught(context: ChannelHandlerContext, error: any Error) {
        end("\(error)")
        context.close(promise: nil)
    }

    private func end(_ reason: String?) {
        guard !ended else { return }
        ended = true
        inbox.push(.closed(reason))
    }
}

/// One client connection to a Wyoming server.
package final class WyomingConnection: Sendable {
    package let channel: any Channel
    package let inbox: WyomingInbox

    private init(channel: any Channel, inbox: WyomingInbox) {
        self.channel = channel
        self.inbox = inbox
    }

    /// Connects within `timeout`.
    package static func open(_ address: WyomingAddress, timeout: Duration) async throws -> WyomingConnection {
        let inbox = WyomingInbox()
        let ms = Int64(timeout.components.seconds * 1000 + timeout.components.attoseconds / 1_000_000_000_000_000)
        let bootstrap = ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connectTimeout(.milliseconds(max(1, ms)))
            .channelOption(.socketOption(.so_keepalive), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(WyomingChannelHandler(inbox: inbox))
                }
            }
        let channel: any Channel
        switch address {
        case .tcp(let host, let port): channel = try await bootstrap.connect(host: host, port: port).get()
        case .unix(let path): channel = try await bootstrap.connect(unixDomainSocketPath: path).get()
        }
        return WyomingConnection(channel: channel, inbox: inbox)
    }

    /// True until the connection ended.
    package var isActive: Bool { channel.isActive }

    /// Writes one event.
    package func send(_ event: WyomingEvent) async throws {
        try await channel.writeAndFlush(ByteBuffer(bytes: event.encoded()))
    }

    /// Closes the connection (idempotent).
    package func close() {
        channel.close(promise: nil)
    }
}
