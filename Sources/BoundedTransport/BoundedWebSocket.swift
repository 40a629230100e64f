import Logging
import NIOCore
import NIOPosix
import NIOSSL
import PipelineCore
import WSClient

/// `WebSocketClient.connect` with a deadline on the opening handshake (TCP connect, TLS and the
/// HTTP upgrade) and prompt cancellation.
///
/// The client library awaits the upgrade on a future that neither a timeout nor task
/// cancellation can interrupt: a listener that accepts the TCP connection and never answers (or
/// sends half a `101`) would hold the caller forever. Each connection here runs on an event loop
/// group of its own, which is shut down — closing the half-open channel and failing the upgrade —
/// when the deadline passes or the caller is cancelled before the upgrade completed.
package enum BoundedWebSocket {
    /// Thrown when the handshake did not complete within the deadline.
    package struct HandshakeTimeout: Error, CustomStringConvertible {
        package var timeout: Duration
        package var description: String { "no WebSocket handshake answer within \(timeout)" }
    }

    /// One connection attempt: its event loop group and how far the handshake got.
    final class Attempt: Sendable {
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        private let state = LockedValue<(upgraded: Bool, shut: Bool, timedOut: Bool)>((false, false, false))

        var timedOut: Bool { state.withLock { $0.timedOut } }
        func upgraded() { state.withLock { $0.upgraded = true } }

        /// Shuts the group down if the upgrade has not completed (a half-open channel is closed).
        func abandon(timedOut: Bool) {
            let go = state.withLock { s -> Bool in
                guard !s.upgraded, !s.shut else { return false }
                s.shut = true
                s.timedOut = timedOut
                return true
            }
            if go { group.shutdownGracefully { _ in } }
        }

        /// Shuts the group down once the connection is over.
        func finish() {
            let go = state.withLock { s -> Bool in defer { s.shut = true }; return !s.shut }
            if go { group.shutdownGracefully { _ in } }
        }
    }

    private enum Finished: Sendable { case connection, watchdog }

    package static func connect(
        url: String, configuration: WebSocketClientConfiguration, tlsConfiguration: TLSConfiguration?,
        handshakeTimeout: Duration, logger: Logger,
        handler: @escaping WebSocketDataHandler<WebSocketClient.Context>
    ) async throws {
        let attempt = Attempt()
        defer { attempt.finish() }
        do {
            try await withThrowingTaskGroup(of: Finished.self) { tasks in
                tasks.addTask {
                    try await WebSocketClient.connect(url: url, configuration: configuration, tlsConfiguration: tlsConfiguration,
                                                      eventLoopGroup: attempt.group, logger: logger) { inbound, outbound, context in
                        attempt.upgraded()
                        try await handler(inbound, outbound, context)
                    }
                    return .connection
                }
                tasks.addTask {
                    do {
                        try await Task.sleep(for: handshakeTimeout)
                        attempt.abandon(timedOut: true)
                    } catch {
                        attempt.abandon(timedOut: false)   // cancelled before the upgrade: unblock the connection
                    }
                    return .watchdog
                }
                while let finished = try await tasks.next() {
                    if finished == .connection { tasks.cancelAll() }
                }
            }
        } catch {
            if attempt.timedOut { throw HandshakeTimeout(timeout: handshakeTimeout) }
            throw error
        }
        if attempt.timedOut { throw HandshakeTimeout(timeout: handshakeTimeout) }
    }
}
