import BoundedTransport
import Logging
import NIOSSL
import PipelineCore
import Synchronization
import WSClient

/// What the command channel reports to its owner.
package struct IVHChannelObserver: Sendable {
    /// A message pushed by the server, with its raw text (for the fields beyond its kind).
    package var push: @Sendable (IVHPush, _ raw: String) async -> Void
    /// The channel opened; `reconnects` counts the openings before this one.
    package var connected: @Sendable (_ reconnects: Int) async -> Void
    /// The channel closed unexpectedly (it will be reopened).
    package var disconnected: @Sendable (_ reason: String) async -> Void
    /// A command was written.
    package var sent: @Sendable (IVHCommand) -> Void

    package init(push: @escaping @Sendable (IVHPush, _ raw: String) async -> Void,
                 connected: @escaping @Sendable (_ reconnects: Int) async -> Void,
                 disconnected: @escaping @Sendable (_ reason: String) async -> Void,
                 sent: @escaping @Sendable (IVHCommand) -> Void) {
        self.push = push
        self.connected = connected
        self.disconnected = disconnected
        self.sent = sent
    }
}

/// The WebSocket command channel of one session
/// (`/v2/ws/ivh/streammanager/streamservice/commandchannel?...&requestid=<session id>`).
///
/// ``run()`` keeps the channel open until the queue is finished and drained, reopening it with a
/// growing delay (on the injected clock) when it drops; commands queued meanwhile are held (audio
/// bounded, see ``IVHOutboundQueue``). Audio packets are paced: each is written no sooner than its
/// predecessor's duration after it, so audio never goes faster than real time.
package final class IVHCommandChannel: Sendable {
    /// Codes that mean the session is gone: reopening the channel cannot help.
    package static let fatalCodes: Set<Int> = [110006, 110013, 110018, 110022, 100005]

    package let sessionID: String
    package let url: @Sendable () -> String
    package let tls: TLSConfiguration?
    package let clock: any Clock<Duration>
    package let queue: IVHOutboundQueue
    package let observer: IVHChannelObserver
    package let logger: Logger
    /// Consecutive failed openings before giving up.
    package let maxFailures: Int
    private let fatal = LockedValue<IVHError?>(nil)
    private let nextAudio = LockedValue<Duration?>(nil)
    private let openings = Atomic<Int>(0)

    package init(sessionID: String, url: @escaping @Sendable () -> String, tls: TLSConfiguration?, clock: any Clock<Duration>,
         heldPackets: Int, maxFailures: Int, logger: Logger, observer: IVHChannelObserver) {
        self.sessionID = sessionID
        self.url = url
        self.tls = tls
        self.clock = clock
        self.queue = IVHOutboundQueue(capacity: heldPackets)
        self.maxFailures = maxFailures
        self.logger = logger
        self.observer = observer
    }

    /// Queues a command (suspends while the channel is up and the queue full). Returns audio
    /// packets dropped to make room.
    @discardableResult
    package func send(_ command: IVHCommand, front: Bool = false) async -> Int {
        await queue.push(command, front: front)
    }

    /// No more commands: ``run()`` returns once the queue has been written.
    package func finish() { queue.finish() }

    /// Keeps the channel open until finished and drained (returns), the caller is cancelled
    /// (returns), the server reports the session gone or reopening keeps failing (throws ``IVHError``).
    package func run() async throws {
        let pacer = Pacer(clock: clock)
        var failures = 0
        var config = WebSocketClientConfiguration()
        config.closeTimeout = .seconds(1)
        while !Task.isCancelled, !queue.drained {
            let opened = Atomic<Bool>(false)
            var reason = "closed by the server"
            do {
                try await BoundedWebSocket.connect(url: url(), configuration: config, tlsConfiguration: tls,
                                                   handshakeTimeout: .seconds(10), logger: logger) { inbound, outbound, _ in
                    opened.store(true, ordering: .relaxed)
                    self.queue.setConnected(true)
                    await self.observer.connected(self.openings.wrappingAdd(1, ordering: .relaxed).oldValue)
                    try await withThrowingTaskGroup(of: Bool.self) { group in
                        group.addTask {
                            for try await message in inbound.messages(maxSize: 1 << 20) {
                                guard case .text(let text) = message, let push = IVHPush.decode(text) else { continue }
                                await self.observer.push(push, text)
                                if case .error(let code, let m) = push, Self.fatalCodes.contains(code) {
                                    self.fatal.withLock { $0 = IVHError(.api(code), m, operation: "commandchannel") }
                                    return false
                                }
                            }
                            return false
                        }
                        group.addTask {
                            while let command = await self.queue.next() {
                                do {
                                    if case .audio = command {
                                        let at = max(pacer.elapsed, self.nextAudio.withLock { $0 } ?? .zero)
                                        try await pacer.wait(until: at)
                                        try await outbound.writeTextMessage(command.json(sessionID: self.sessionID))
                                        self.nextAudio.withLock { $0 = at + command.audioDuration }
                                    } else {
                                        try await outbound.writeTextMessage(command.json(sessionID: self.sessionID))
                                    }
                                } catch {
                                    self.queue.unshift(command)
                                    throw error
                                }
                                self.observer.sent(command)
                            }
                            if Task.isCancelled { throw CancellationError() }
                            try? await outbound.close(.normalClosure, reason: nil)
                            return true
                        }
                        _ = try await group.next()
                        group.cancelAll()
                    }
                }
            } catch is CancellationError {
                queue.setConnected(false)
                return
            } catch {
                reason = "\(error)"
            }
            queue.setConnected(false)
            if let f = fatal.withLock({ $0 }) { throw f }
            if queue.drained || Task.isCancelled { return }
            if opened.load(ordering: .relaxed) { failures = 0 }
            failures += 1
            logger.warning("command channel lost (\(reason)); reopening")
            await observer.disconnected(reason)
            if failures > maxFailures {
                throw IVHError(.transport, "command channel could not be reopened after \(maxFailures) attempts: \(reason)", operation: "commandchannel")
            }
            let delay = Duration.milliseconds(min(5000, 100 << min(failures - 1, 6)))
            do { try await clock.sleep(for: delay) } catch { return }
        }
    }
}
