import Foundation
import PipelineCore

/// The JSON the console page reads: a session list, a pipeline's graph with its layout, and its live
/// figures. Only ids, types, routes and measurements: never a node's configuration (keys, URLs).
enum ConsoleSnapshot {
    static func sessions(_ list: [LiveSession], now: ContinuousClock.Instant = .now) -> String {
        json(list.sorted { $0.started < $1.started }.map { s -> [String: Any] in
            ["id": s.id, "route": s.route, "age_s": ServeSession.seconds(now - s.started),
             "frames": s.pipeline.edgeStats.reduce(UInt64(0)) { $0 + $1.sent }]
        })
    }

    static func graph(_ s: LiveSession) -> String {
        let g = s.pipeline.graph
        let places = GraphDrawing.layout(g)
        let nodes = g.nodes.map { n -> [String: Any] in
            ["id": n.id, "type": n.descriptor.type, "col": places[n.id]?.column ?? 0, "row": places[n.id]?.row ?? 0]
        }
        let links = g.links.map { l -> [String: Any] in
            let audio = g.node(l.fromNode)?.descriptor.outputs.first { $0.name == l.fromPort }?.kinds.contains(.audio) ?? false
            return ["from": l.fromNode, "from_port": l.fromPort, "to": l.toNode, "to_port": l.toPort, "input": "\(l.toNode).\(l.toPort)",
                    "capacity": l.capacity, "audio": audio]
        }
        return json(["session": s.id, "name": g.name.isEmpty ? s.route : g.name, "nodes": nodes, "links": links] as [String: Any])
    }

    /// What one viewer remembers between updates, to turn counters into rates.
    struct Rates {
        var sent: [String: UInt64] = [:]
        var at: ContinuousClock.Instant?
    }

    /// Live figures of `s`: per edge (keyed by its consumer input `node.port`) frames/s, queue depth and
    /// capacity, drops, media age p50/p99, audio peak; per node counters (`late`, ...), gauges and
    /// restarts; the events since the last update (JSON lines as the jsonl-sink writes them).
    static func stats(_ s: LiveSession, rates: inout Rates, events: [String], skipped: Int, now: ContinuousClock.Instant = .now) -> String {
        let p = s.pipeline
        let elapsed = rates.at.map { ServeSession.seconds(now - $0) } ?? 0
        var edges: [String: Any] = [:]
        var sent: [String: UInt64] = [:]
        for (stat, live) in zip(p.edgeStats, p.edgeLive) {
            sent[live.input] = stat.sent
            let before = rates.sent[live.input]
            let fps: Double? = (before != nil && elapsed > 0) ? Double(stat.sent &- before!) / elapsed : nil
            edges[live.input] = ["sent": stat.sent, "dropped": stat.dropped, "depth": live.depth, "capacity": stat.capacity,
                                 "max_depth": stat.maxDepth, "fps": orNull(fps.map { ($0 * 10).rounded() / 10 }),
                                 "p50_ms": orNull(stat.age.map { ($0.p50Ms * 10).rounded() / 10 }),
                                 "p99_ms": orNull(stat.age.map { ($0.p99Ms * 10).rounded() / 10 }),
                                 "peak": (live.peak * 1000).rounded() / 1000] as [String: Any]
        }
        rates.sent = sent
        rates.at = now
        var nodes: [String: Any] = [:]
        for n in p.nodeStats {
            nodes[n.id] = ["counters": n.counters, "gauges": n.gauges, "restarts": n.restarts] as [String: Any]
        }
        let body = json(["session": s.id, "age_s": ServeSession.seconds(now - s.started), "edges": edges, "nodes": nodes,
                         "skipped": skipped, "events_dropped": p.eventsDropped] as [String: Any])
        // The events are already JSON.
        return String(body.dropLast()) + ",\"events\":[" + events.joined(separator: ",") + "]}"
    }

    private static func orNull(_ v: Double?) -> Any { v.map { $0 as Any } ?? NSNull() }

    static func json(_ object: Any) -> String {
        guard let data = try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys]) else { return "{}" }
        return String(decoding: data, as: UTF8.self)
    }
}

/// The last events of one pipeline, gathered while a viewer watches it (bounded: older ones are
/// dropped when the viewer is slower than the events).
final class EventTail: Sendable {
    private let lines = LockedValue<[String]>([])
    let limit: Int

    init(limit: Int = 64) { self.limit = limit }

    func append(_ line: String) {
        lines.withLock { l in
            l.append(line)
            if l.count > limit { l.removeFirst(l.count - limit) }
        }
    }

    func take() -> [String] { lines.withLock { l in defer { l = [] }; return l } }
}
