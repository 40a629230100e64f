import PipelineCore

/// `jitter-buffer`: turns Opus packets from `rtp-receive` (in arrival order, with gaps, copies and
/// stragglers) into exactly one frame per packet interval, on the pipeline's clock.
///
/// Input: encoded `opus` frames ordered by `pts` (the RTP timestamp in ns, as `rtp-receive` sets it;
/// copies share a pts). Output: the packets in order, re-stamped on a continuous timeline from 0, and
/// for every slot with nothing to play a **lost-frame marker**: an `opus` frame with an empty payload,
/// `marks.discontinuity = true` and the slot's duration. `opus-decode` holds such a slot until the
/// next real packet arrives and rebuilds it from that packet's in-band FEC when the sender used
/// `fec: true` (libopus conceals otherwise, and PLC covers earlier slots of a longer gap); the
/// marker itself carries no data.
///
/// The delay adapts as described on ``JitterBuffer``. Counters (`played`, `concealed`, `stretched`,
/// `skipped`, `late`, `duplicates`, `resyncs`) go to `--stats`; a `jitter_stats` event with the same
/// fields plus `jitter_ms`, `target_ms`, `delay_ms` and (after a few seconds) `clock_drift_ppm` is emitted every `stats_interval_ms` and at the end.
public actor JitterBufferNode: Node {
    private var buffer: JitterBuffer
    private let statsIntervalNanos: Int64
    private var inputEnded = false
    private var startWaiter: CheckedContinuation<Void, Never>?
    private var reported = JitterBuffer.Statistics()
    private var lastFormat: AudioFormat?
    private var lastCodec = "opus"

    init(configuration: JitterBuffer.Configuration, statsIntervalMs: Int) {
        buffer = JitterBuffer(configuration: configuration)
        statsIntervalNanos = Int64(statsIntervalMs) * 1_000_000
    }

    public func run(_ context: NodeContext) async throws {
        let pacer = context.makePacer()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await frame in context.input() {
                    guard let encoded = frame.encoded, !encoded.payload.isEmpty else { continue }
                    await self.insert(frame, codec: encoded.codec, format: encoded.format, arrival: Self.nanos(pacer.elapsed))
                }
                await self.endInput()
            }
            group.addTask { try await self.playout(context, pacer: pacer) }
            try await group.waitForAll()
        }
        try await report(context)
    }

    private func insert(_ frame: Frame, codec: String, format: AudioFormat?, arrival: Int64) {
        if let format { lastFormat = format }
        lastCodec = codec
        _ = buffer.insert(frame, arrival: arrival)
        wakePlayout()
    }

    private func endInput() {
        inputEnded = true
        wakePlayout()
    }

    private func wakePlayout() {
        if buffer.nextTickTime != nil || inputEnded, let w = startWaiter {
            startWaiter = nil
            w.resume()
        }
    }

    private func waitForStart() async {
        if buffer.nextTickTime != nil || inputEnded { return }
        await withCheckedContinuation { startWaiter = $0 }
    }

    private func playout(_ context: NodeContext, pacer: Pacer) async throws {
        await waitForStart()
        var nextReport = statsIntervalNanos
        let out = context.output()
        while true {
            guard let due = buffer.nextTickTime else { return }
            if inputEnded && buffer.isEmpty { return }
            try await pacer.wait(until: .nanoseconds(due))
            let frame: Frame
            switch buffer.tick() {
            case .play(var f, let outputPts):
                f.pts = outputPts
                f.marks.discontinuity = false
                frame = f
            case .conceal(let duration, let outputPts, next: _, stretch: _):
                frame = Frame(payload: .encoded(EncodedBuffer(codec: lastCodec, payload: [], durationNanos: duration, format: lastFormat)),
                              pts: outputPts, marks: FrameMarks(discontinuity: true))
            }
            try await out.send(frame)
            if statsIntervalNanos > 0, due >= nextReport {
                nextReport = due + statsIntervalNanos
                try await report(context)
            }
        }
    }

    private func report(_ context: NodeContext) async throws {
        let s = buffer.statistics
        let deltas: [(String, Int, Int)] = [
            ("played", s.played, reported.played), ("concealed", s.concealed, reported.concealed),
            ("stretched", s.stretched, reported.stretched), ("skipped", s.skipped, reported.skipped),
            ("late", s.late, reported.late), ("duplicates", s.duplicates, reported.duplicates),
            ("resyncs", s.resyncs, reported.resyncs),
        ]
        for (name, now, before) in deltas where now > before { context.count(name, by: UInt64(now - before)) }
        reported = s
        var fields: [(String, EventValue)] = deltas.map { ($0.0, .int(Int64($0.1))) }
        fields.append(("jitter_ms", .double((buffer.jitterNanos / 1e5).rounded() / 10)))
        fields.append(("target_ms", .double(Double(buffer.targetDelayNanos / 100_000) / 10)))
        fields.append(("delay_ms", .double(Double(buffer.currentDelayNanos / 100_000) / 10)))
        if let ppm = buffer.driftPPM {
            let rounded = (ppm * 10).rounded() / 10
            fields.append(("clock_drift_ppm", .double(rounded)))
            context.gauge("clock_drift_ppm", rounded)
        }
        try await context.emit(.jitterStats, fields)
    }

    private static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Configuration of `jitter-buffer`.
    public struct Configuration: NodeConfiguration {
        /// Smallest target delay beyond the fastest transit.
        public var minMs: Int
        /// Largest target delay.
        public var maxMs: Int
        /// Packet interval for concealment and adaptation steps.
        public var frameMs: Int
        /// `jitter_stats` event period (0 = only at the end).
        public var statsIntervalMs: Int
        /// Follow the sender's clock.
        public var driftCompensation: Bool
        /// The parameters of `jitter-buffer`.
        public static let parameters = [
            ParamSpec("min_ms", .int(0...5000), default: 20, doc: "smallest target delay beyond the fastest transit"),
            ParamSpec("max_ms", .int(0...5000), default: 200, doc: "largest target delay"),
            ParamSpec("frame_ms", .int(1...120), default: 20, doc: "packet interval for concealment and adaptation steps until the packets show their own (AAC: 1,024 samples)"),
            ParamSpec("stats_interval_ms", .int(0...3_600_000), default: 5000, doc: "jitter_stats event period (0 = only at the end)"),
            ParamSpec("drift_compensation", .bool, default: true,
                      doc: "estimate the sender's clock drift (clock_drift_ppm in --stats and jitter_stats) and play out at its rate instead of stretching or skipping whole frames"),
        ]

        /// The buffer's settings; throws when the delays and the interval do not fit together.
        public func bufferConfiguration() throws(JitterBuffer.ConfigurationError) -> JitterBuffer.Configuration {
            var c = try JitterBuffer.Configuration(minMs: minMs, maxMs: maxMs, frameMs: frameMs)
            c.compensatesDrift = driftCompensation
            return c
        }

        /// `min_ms` must not exceed `max_ms`.
        public func problems() -> [String] {
            do { _ = try bufferConfiguration(); return [] } catch { return [error.message] }
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "jitter-buffer", summary: "Reorders Opus packets from rtp-receive and plays one frame per interval, marking lost ones for concealment",
        family: "DSP",
        inputs: [PortSpec("in", [.encoded], codecs: ["opus", "aac"], doc: "Opus packets or AAC access units ordered by pts (from rtp-receive)")],
        outputs: [PortSpec("out", [.encoded], codecs: ["opus", "aac"], doc: "one packet per interval; empty payload = lost, conceal it"), .events],
        configuration: Configuration.self,
        format: .none,
        executor: .realtime,
        make: { c, _ in JitterBufferNode(configuration: try c.bufferConfiguration(), statsIntervalMs: c.statsIntervalMs) })
}
