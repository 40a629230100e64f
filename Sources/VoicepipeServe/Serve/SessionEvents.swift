import Foundation
import NATSClient
import Nodes
import PipelineCore

/// A session's events on NATS JetStream, when the serve configuration has `nats:` (otherwise every call
/// does nothing): `started` once admitted, the graph's events as they come (filtered by `nats.events`),
/// and `finished` exactly once at the end — published before the client's last answer and, while NATS
/// is connected, acknowledged by the stream first (up to `nats.finished_ack_ms`), so a client that saw
/// its session end finds `finished` in the stream even if this worker dies right after. The graph's own
/// `finished` events (the recognizer's whole-session text) are not published separately: their `text` is
/// part of the session's one `finished`.
struct SessionEvents: Sendable {
    private final class Texts: Sendable {
        let list = LockedValue<[String]>([])
    }
    private let texts = Texts()
    let server: ServeServer
    let route: String
    /// The subject's session token: the client's voice_id (tencent-asr), `session_id`/`voice_id` from the
    /// query (websocket), else a random id.
    let session: String
    let opened = ContinuousClock.now

    private var elapsed: Double { ServeSession.seconds(ContinuousClock.now - opened) }

    func started(protocol kind: String, remote: String?) {
        guard let events = server.events else { return }
        var fields: [(String, EventValue)] = [("protocol", .string(kind))]
        if let remote { fields.append(("remote", .string(remote))) }
        fields.append(("unix_time", .double((Date().timeIntervalSince1970 * 1000).rounded() / 1000)))
        events.publish(Event(.started, node: "serve", ts: 0, fields: fields), route: route, session: session)
    }

    func forward(_ event: Event) {
        guard let events = server.events else { return }
        if event.name == .finished {
            if let text = event["text"]?.stringValue, !text.isEmpty { texts.list.withLock { $0.append(text) } }
            return
        }
        guard server.publishes(event.name.rawValue), event.name != .started else { return }
        events.publish(event, route: route, session: session)
    }

    /// Publishes `finished`; waits (bounded) for the stream to store it.
    func finished(outcome: String, audioBytes: Int, drops: Int, extra: [(String, EventValue)] = []) async {
        guard let events = server.events, let n = server.configuration.nats else { return }
        let seconds = elapsed
        var fields: [(String, EventValue)] = [("outcome", .string(outcome)), ("duration_s", .double((seconds * 1000).rounded() / 1000)),
                                              ("audio_bytes", .int(Int64(audioBytes))), ("drops", .int(Int64(drops)))]
        fields += extra
        fields.append(("text", .string(texts.list.withLock { $0.joined(separator: " ") })))
        let e = Event(.finished, node: "serve", ts: seconds, fields: fields)
        let stored = await events.publisher.publishAndWait(subject: events.subject(route: route, session: session, event: "finished"),
                                                           payload: NATSEventPublisher.payload(e, route: route, session: session, worker: events.worker),
                                                           timeout: .milliseconds(n.finishedAckMs))
        if !stored { server.logger.debug("route '\(route)': session \(session): finished event queued, not yet stored") }
    }
}
