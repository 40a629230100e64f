import Foundation
import PipelineCore
import NATSClient

/// The server's counters and gauges, rendered in Prometheus' text exposition format (version 0.0.4)
/// at `/metrics`. Labels are route names and error codes (bounded sets: routes come from the
/// configuration, codes from the front-ends), never anything a client sends.
final class ServeMetrics: Sendable {
    private struct State {
        var active: [String: Int] = [:]
        var total: [String: [String: Int]] = [:]          // route → outcome → count
        var errors: [String: [String: Int]] = [:]         // route → code → count
        var durations: [String: [Double]] = [:]           // route → recent session seconds (last 1,000)
        var durationSum: [String: Double] = [:]
        var durationCount: [String: Int] = [:]
        var audioBytes: [String: Int] = [:]
        var frames: [String: Int] = [:]
        var drops: [String: Int] = [:]
        var mediaAgeP99: [String: Double] = [:]
        var firstResult: [String: [Double]] = [:]
        var answerSeconds: [String: Double] = [:]
        var answerDropped: [String: Int] = [:]
        var answerDroppedSeconds: [String: Double] = [:]
        var inputPaused: [String: Int] = [:]
        var inputPeakBytes: [String: Int] = [:]
    }
    private let state = LockedValue(State())
    let started = ContinuousClock.now

    func sessionStarted(route: String) { state.withLock { $0.active[route, default: 0] += 1 } }

    func sessionEnded(route: String, outcome: String, seconds: Double, drops: Int, mediaAgeP99Ms: Double?) {
        state.withLock { s in
            s.active[route, default: 1] -= 1
            s.total[route, default: [:]][outcome, default: 0] += 1
            s.durations[route, default: []].append(seconds)
            if s.durations[route]!.count > 1000 { s.durations[route]!.removeFirst() }
            s.durationSum[route, default: 0] += seconds
            s.durationCount[route, default: 0] += 1
            s.drops[route, default: 0] += drops
            if let age = mediaAgeP99Ms { s.mediaAgeP99[route] = age }
        }
    }

    /// A session refused before it started (full, draining, bad signature...).
    func refused(route: String, code: String) {
        state.withLock { s in
            s.total[route, default: [:]]["refused", default: 0] += 1
            s.errors[route, default: [:]][code, default: 0] += 1
        }
    }

    func error(route: String, code: String) { state.withLock { $0.errors[route, default: [:]][code, default: 0] += 1 } }

    func audio(route: String, bytes: Int) {
        state.withLock { s in
            s.audioBytes[route, default: 0] += bytes
            s.frames[route, default: 0] += 1
        }
    }

    /// Answer audio written to a client.
    func answerSent(route: String, seconds: Double) { state.withLock { $0.answerSeconds[route, default: 0] += seconds } }

    /// Answer audio dropped because its client fell behind (or left the end of the session unread).
    func answerDropped(route: String, messages: Int, seconds: Double) {
        guard messages > 0 else { return }
        state.withLock { s in
            s.answerDropped[route, default: 0] += messages
            s.answerDroppedSeconds[route, default: 0] += seconds
        }
    }

    /// A session's back-pressure on its client: how many times reading stopped because its graph fell
    /// behind, and the most bytes that waited for the graph at once.
    func input(route: String, pauses: Int, peakBytes: Int) {
        state.withLock { s in
            s.inputPaused[route, default: 0] += pauses
            s.inputPeakBytes[route] = max(s.inputPeakBytes[route] ?? 0, peakBytes)
        }
    }

    func input(route: String, _ statistics: (pauses: Int, peakBytes: Int)) {
        input(route: route, pauses: statistics.pauses, peakBytes: statistics.peakBytes)
    }

    func firstResult(route: String, seconds: Double) {
        state.withLock { s in
            s.firstResult[route, default: []].append(seconds)
            if s.firstResult[route]!.count > 1000 { s.firstResult[route]!.removeFirst() }
        }
    }

    var activeSessions: Int { state.withLock { $0.active.values.reduce(0, +) } }

    /// The exposition text.
    func render(draining: Bool, maxSessions: Int, nats: JetStreamPublisher.Statistics? = nil) -> String {
        let s = state.withLock { $0 }
        var out = ""
        func line(_ name: String, _ labels: [(String, String)], _ value: Double) {
            let l = labels.isEmpty ? "" : "{" + labels.map { "\($0.0)=\"\(escape($0.1))\"" }.joined(separator: ",") + "}"
            out += "\(name)\(l) \(format(value))\n"
        }
        func header(_ name: String, _ type: String, _ help: String) { out += "# HELP \(name) \(help)\n# TYPE \(name) \(type)\n" }
        header("voicepipe_sessions_active", "gauge", "Sessions running now.")
        for (r, n) in s.active.sorted(by: { $0.key < $1.key }) { line("voicepipe_sessions_active", [("route", r)], Double(n)) }
        header("voicepipe_sessions_max", "gauge", "Sessions allowed at once (max_sessions).")
        line("voicepipe_sessions_max", [], Double(maxSessions))
        header("voicepipe_draining", "gauge", "1 while the server drains (SIGTERM) and accepts no new session.")
        line("voicepipe_draining", [], draining ? 1 : 0)
        header("voicepipe_sessions_total", "counter", "Sessions by how they ended: completed, disconnected, limit, error, refused.")
        for (r, byOutcome) in s.total.sorted(by: { $0.key < $1.key }) {
            for (o, n) in byOutcome.sorted(by: { $0.key < $1.key }) { line("voicepipe_sessions_total", [("route", r), ("outcome", o)], Double(n)) }
        }
        header("voicepipe_session_duration_seconds", "summary", "Session duration.")
        for r in s.durationCount.keys.sorted() {
            let sorted = (s.durations[r] ?? []).sorted()
            for q in [0.5, 0.99] where !sorted.isEmpty {
                line("voicepipe_session_duration_seconds", [("route", r), ("quantile", "\(q)")], sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))])
            }
            line("voicepipe_session_duration_seconds_sum", [("route", r)], s.durationSum[r] ?? 0)
            line("voicepipe_session_duration_seconds_count", [("route", r)], Double(s.durationCount[r] ?? 0))
        }
        header("voicepipe_first_result_seconds", "summary", "Session start-up: connection to first result sent.")
        for (r, values) in s.firstResult.sorted(by: { $0.key < $1.key }) {
            let sorted = values.sorted()
            for q in [0.5, 0.99] where !sorted.isEmpty {
                line("voicepipe_first_result_seconds", [("route", r), ("quantile", "\(q)")], sorted[min(sorted.count - 1, Int(Double(sorted.count) * q))])
            }
        }
        header("voicepipe_audio_bytes_total", "counter", "Audio bytes received from clients.")
        for (r, n) in s.audioBytes.sorted(by: { $0.key < $1.key }) { line("voicepipe_audio_bytes_total", [("route", r)], Double(n)) }
        header("voicepipe_audio_frames_total", "counter", "Audio messages received from clients.")
        for (r, n) in s.frames.sorted(by: { $0.key < $1.key }) { line("voicepipe_audio_frames_total", [("route", r)], Double(n)) }
        header("voicepipe_drops_total", "counter", "Frames dropped inside session graphs (by their overflow policies).")
        for (r, n) in s.drops.sorted(by: { $0.key < $1.key }) { line("voicepipe_drops_total", [("route", r)], Double(n)) }
        header("voicepipe_answer_audio_seconds_total", "counter", "Answer audio sent to clients (websocket routes with an app-sink).")
        for (r, v) in s.answerSeconds.sorted(by: { $0.key < $1.key }) { line("voicepipe_answer_audio_seconds_total", [("route", r)], v) }
        header("voicepipe_answer_audio_dropped_total", "counter", "Answer audio messages dropped, oldest first, because a client fell behind by more than answer_buffer_ms.")
        for (r, n) in s.answerDropped.sorted(by: { $0.key < $1.key }) { line("voicepipe_answer_audio_dropped_total", [("route", r)], Double(n)) }
        header("voicepipe_answer_audio_dropped_seconds_total", "counter", "Seconds of answer audio dropped because a client fell behind.")
        for (r, v) in s.answerDroppedSeconds.sorted(by: { $0.key < $1.key }) { line("voicepipe_answer_audio_dropped_seconds_total", [("route", r)], v) }
        header("voicepipe_input_paused_total", "counter", "Times a session stopped reading from its client because its graph fell behind (back-pressure: nothing is dropped).")
        for (r, n) in s.inputPaused.sorted(by: { $0.key < $1.key }) { line("voicepipe_input_paused_total", [("route", r)], Double(n)) }
        header("voicepipe_input_waiting_peak_bytes", "gauge", "The most client input one session held waiting for its graph at once.")
        for (r, n) in s.inputPeakBytes.sorted(by: { $0.key < $1.key }) { line("voicepipe_input_waiting_peak_bytes", [("route", r)], Double(n)) }
        header("voicepipe_media_age_p99_ms", "gauge", "p99 media age at the sinks of the last session that ended.")
        for (r, v) in s.mediaAgeP99.sorted(by: { $0.key < $1.key }) { line("voicepipe_media_age_p99_ms", [("route", r)], v) }
        header("voicepipe_errors_total", "counter", "Errors by route and code.")
        for (r, byCode) in s.errors.sorted(by: { $0.key < $1.key }) {
            for (c, n) in byCode.sorted(by: { $0.key < $1.key }) { line("voicepipe_errors_total", [("route", r), ("code", c)], Double(n)) }
        }
        header("voicepipe_uptime_seconds", "gauge", "Seconds since the server started.")
        let up = ContinuousClock.now - started
        line("voicepipe_uptime_seconds", [], Double(up.components.seconds) + Double(up.components.attoseconds) / 1e18)
        if let n = nats {
            for (name, type, help, value) in [
                ("voicepipe_nats_connected", "gauge", "1 while connected to NATS.", n.connected ? 1 : 0),
                ("voicepipe_nats_events_total", "counter", "Session events queued for NATS.", Double(n.accepted)),
                ("voicepipe_nats_acknowledged_total", "counter", "Events stored by the JetStream stream.", Double(n.acknowledged)),
                ("voicepipe_nats_dropped_total", "counter", "Events dropped because the buffer was full (NATS away too long).", Double(n.dropped)),
                ("voicepipe_nats_rejected_total", "counter", "Events the stream refused for good.", Double(n.rejected)),
                ("voicepipe_nats_resent_total", "counter", "Events sent again (acknowledgement late or connection lost).", Double(n.resent)),
                ("voicepipe_nats_held", "gauge", "Events held now, waiting for NATS.", Double(n.held)),
                ("voicepipe_nats_reconnects_total", "counter", "Connections to NATS lost.", Double(n.disconnects)),
            ] as [(String, String, String, Double)] {
                header(name, type, help)
                line(name, [], value)
            }
        }
        return out
    }

    private func escape(_ s: String) -> String {
        s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "\n", with: "\\n")
    }

    private func format(_ v: Double) -> String {
        v == v.rounded() && abs(v) < 1e15 ? String(Int64(v)) : String(v)
    }
}
