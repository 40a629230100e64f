import Foundation
import NIOCore
import NIOHTTP1
import PipelineCore

/// One viewer's server-sent event stream (`/console/stream`): the session list every second, and for
/// the chosen session its graph once, then its figures at most `rate` times a second.
///
/// Everything runs on the connection's event loop, reading counters the pipeline keeps anyway: the
/// pipeline never waits for a viewer. An update finding the connection unwritable (a slow or stalled
/// browser) is skipped and counted (`skipped` in the next update), like a frame on a dropping edge.
/// With no viewer there is no feed at all: nothing is sampled, and edges do not look at audio levels.
final class ConsoleFeed {
    private let site: WebSite
    private let channel: any Channel
    private let chosen: String?
    private let interval: TimeAmount
    private var task: RepeatedTask?
    private var watching: LiveSession?
    private var tail: EventTail?
    private var tailTask: Task<Void, Never>?
    private var rates = ConsoleSnapshot.Rates()
    private var ticks = 0
    private var skipped = 0
    private var gone = false

    init(site: WebSite, channel: any Channel, session: String?, rate: Int) {
        self.site = site
        self.channel = channel
        self.chosen = session
        interval = .milliseconds(Int64(1000 / max(1, min(rate, 10))))
    }

    /// Writes the response head and starts the updates; they end when the connection closes.
    func start(version: HTTPVersion) {
        var headers = HTTPHeaders()
        headers.add(name: "Content-Type", value: "text/event-stream")
        headers.add(name: "Cache-Control", value: "no-store")
        headers.add(name: "X-Accel-Buffering", value: "no")
        channel.write(HTTPServerResponsePart.head(HTTPResponseHead(version: version, status: .ok, headers: headers)), promise: nil)
        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(string: "retry: 1000\n\n"))), promise: nil)
        site.viewers.add(1, ordering: .relaxed)
        let bound = NIOLoopBound(self, eventLoop: channel.eventLoop)
        task = channel.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: interval) { _ in bound.value.tick() }
        channel.closeFuture.whenComplete { _ in bound.value.stop() }
    }

    private func stop() {
        task?.cancel()
        task = nil
        tailTask?.cancel()
        watching?.pipeline.watchLevels(false)
        watching = nil
        site.viewers.add(-1, ordering: .relaxed)
    }

    private func tick() {
        guard channel.isActive else { return }
        guard channel.isWritable else {
            skipped += 1
            site.skippedUpdates.add(1, ordering: .relaxed)
            return
        }
        let everySecond = max(1, Int(1_000_000_000 / interval.nanoseconds))
        var out = ""
        let sessions = site.sessions()
        if ticks % everySecond == 0 { out += Self.message("sessions", ConsoleSnapshot.sessions(sessions)) }
        ticks += 1
        if let chosen {
            if let current = watching {
                if sessions.contains(where: { $0.id == current.id && $0.pipeline === current.pipeline }) {
                    out += Self.message("stats", ConsoleSnapshot.stats(current, rates: &rates, events: tail?.take() ?? [], skipped: skipped))
                } else {
                    // The session ended: its last figures, then say so.
                    out += Self.message("stats", ConsoleSnapshot.stats(current, rates: &rates, events: tail?.take() ?? [], skipped: skipped))
                    out += Self.message("gone", ConsoleSnapshot.json(["session": current.id]))
                    current.pipeline.watchLevels(false)
                    tailTask?.cancel()
                    watching = nil
                    gone = true
                }
            } else if !gone, let s = sessions.first(where: { $0.id == chosen }) {
                watch(s)
                out += Self.message("graph", ConsoleSnapshot.graph(s))
                out += Self.message("stats", ConsoleSnapshot.stats(s, rates: &rates, events: [], skipped: skipped))
            }
        }
        if out.isEmpty { out = ": idle\n\n" }
        channel.writeAndFlush(HTTPServerResponsePart.body(.byteBuffer(channel.allocator.buffer(string: out))), promise: nil)
    }

    private func watch(_ s: LiveSession) {
        watching = s
        s.pipeline.watchLevels(true)
        let tail = EventTail()
        self.tail = tail
        let events = s.pipeline.events(buffer: 256)
        tailTask = Task {
            for await e in events { tail.append(e.jsonLine()) }
        }
    }

    static func message(_ event: String, _ data: String) -> String {
        "event: \(event)\ndata: \(data)\n\n"
    }
}
