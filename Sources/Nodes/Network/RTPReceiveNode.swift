import COpus
import PipelineCore

/// `rtp-receive`: receives Opus over RTP/UDP (RFC 3550 / RFC 7587) on `bind:port`, IPv4 or IPv6
/// (`bind: "::"` takes both), and delivers one encoded `opus` frame per new packet, in arrival order.
///
/// Frame contract (what `jitter-buffer` relies on):
/// - `pts` is the packet's RTP timestamp, extended past 32-bit wrap-around, relative to the first
///   packet of the stream and converted from the 48 kHz RTP clock to nanoseconds. Packets are told
///   apart and ordered by `pts` (the runtime re-stamps `Frame.seq`, so the RTP sequence number is not
///   carried); a DTX pause shows as a jump in `pts`.
/// - `durationNanos` is the packet's duration read from its Opus TOC; `format` is 48 kHz with the
///   packet's channel count.
/// - Copies of a packet already received, packets of other sources and packets with another payload
///   type are dropped here and counted.
///
/// Source selection: the configured `ssrc`, or else the first source heard; when that source has
/// been silent for `source_timeout_ms`, a new one is taken (a restarted peer), its timeline placed
/// after the old one by the wall-clock gap.
///
/// Reports, per RFC 3550 A.1/A.8: `received` (unique), `lost` (expected − received), `duplicated`,
/// `reordered` (arrived after a higher sequence number) and `jitter_ms`, as counters (`--stats`) and in an
/// `rtp_stats` event every `stats_interval_ms` and at the end. It emits `rtp_listening` with the bound
/// `port` once the socket is open (useful with `port: 0`).
public actor RTPReceiveNode: Node {
    private let bindHost: String
    private let port: Int
    private let payloadType: UInt8
    private let configuredSSRC: UInt32?
    private let sourceTimeoutNanos: Int64
    private let statsIntervalNanos: Int64

    private struct Source {
        var ssrc: UInt32
        var stats = RTPReceptionStatistics()
        var firstTimestamp: Int64 = 0
        var lastExtendedTimestamp: Int64?
        var ptsBase: Int64 = 0
        var lastArrival: Int64 = 0
        var lastEnd: Int64 = 0
        var reported = (received: Int64(0), lost: Int64(0), duplicated: Int64(0), reordered: Int64(0))
    }
    private var source: Source?

    init(configuration c: Configuration) {
        bindHost = c.bind
        port = c.port
        payloadType = UInt8(c.payloadType)
        configuredSSRC = c.ssrc.map { UInt32(truncatingIfNeeded: $0) }
        sourceTimeoutNanos = Int64(c.sourceTimeoutMs) * 1_000_000
        statsIntervalNanos = Int64(c.statsIntervalMs) * 1_000_000
    }

    public func run(_ context: NodeContext) async throws {
        let worker = BlockingWorker(name: "rtp-receive-\(context.id)")
        defer { worker.shutdown() }
        let (bindHost, port) = (self.bindHost, self.port)
        let socket: UDPSocket
        do {
            socket = try await worker.run { try UDPSocket(bindHost: bindHost, port: port) }
        } catch let e as UDPError {
            throw NodeError(e.code, "rtp-receive: \(e.message)")
        }
        let boundPort = socket.localPort
        context.logger.info("receiving RTP on \(bindHost) port \(boundPort)")
        try await context.emit("rtp_listening", [("port", .int(Int64(boundPort))), ("bind", .string(bindHost))])
        let pacer = context.makePacer()
        var nextReport = statsIntervalNanos
        do {
            while !Task.isCancelled {
                let datagram = try await worker.run { try socket.receive(timeoutMs: 50) }
                let now = Self.nanos(pacer.elapsed)
                if let datagram, let frame = accept(datagram.bytes, arrival: now, context: context) {
                    try await context.send(frame)
                }
                if statsIntervalNanos > 0, now >= nextReport {
                    nextReport = now + statsIntervalNanos
                    try await report(context)
                }
            }
        } catch is CancellationError {
            // Shutdown: a normal end for a source.
        } catch let e as UDPError {
            _ = try? await worker.run { socket.close() }
            throw NodeError(e.code, "rtp-receive: \(e.message)")
        }
        _ = try? await worker.run { socket.close() }
        try? await report(context)
    }

    /// Parses and classifies one datagram; returns the frame to deliver, if any.
    private func accept(_ bytes: [UInt8], arrival: Int64, context: NodeContext) -> Frame? {
        guard let packet = try? RTPPacket(parsing: bytes) else {
            context.count("invalid")
            return nil
        }
        guard packet.payloadType == payloadType else {
            context.count("wrong_payload_type")
            return nil
        }
        if let configuredSSRC, packet.ssrc != configuredSSRC {
            context.count("foreign_ssrc")
            return nil
        }
        if var current = source, current.ssrc != packet.ssrc {
            guard arrival - current.lastArrival >= sourceTimeoutNanos else {
                context.count("foreign_ssrc")
                return nil
            }
            flushCounters(&current, context: context)
            context.logger.info("source \(current.ssrc) timed out; now receiving \(packet.ssrc)")
            context.count("source_changes")
            var next = Source(ssrc: packet.ssrc)
            next.ptsBase = current.lastEnd + (arrival - current.lastArrival)
            source = next
        } else if source == nil {
            source = Source(ssrc: packet.ssrc)
        }
        guard var s = source else { return nil }
        defer { source = s }
        let arrival48k = arrival / 1_000_000_000 * 48_000 + (arrival % 1_000_000_000) * 48_000 / 1_000_000_000
        switch s.stats.record(sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp, arrival: arrival48k) {
        case .duplicate:
            return nil
        case .outOfRange:
            context.count("out_of_range")
            return nil
        case .inOrder, .reordered:
            break
        }
        s.lastArrival = arrival
        // Extend the 32-bit timestamp: the nearest value to the last one, modulo 2^32.
        let extended: Int64
        if let last = s.lastExtendedTimestamp {
            extended = last + Int64(Int32(bitPattern: packet.timestamp &- UInt32(truncatingIfNeeded: last)))
        } else {
            extended = Int64(packet.timestamp)
            s.firstTimestamp = extended
        }
        if s.lastExtendedTimestamp.map({ extended > $0 }) ?? true { s.lastExtendedTimestamp = extended }
        guard !packet.payload.isEmpty else {
            context.count("invalid")
            return nil
        }
        let samples = packet.payload.withUnsafeBufferPointer { opus_packet_get_nb_samples($0.baseAddress!, Int32($0.count), 48_000) }
        let channels = packet.payload.withUnsafeBufferPointer { opus_packet_get_nb_channels($0.baseAddress!) }
        guard samples > 0, channels > 0 else {
            context.count("invalid")
            return nil
        }
        let duration = MediaTime.nanos(samples: Int64(samples), rate: 48_000)
        let pts = s.ptsBase + MediaTime.nanos(samples: extended - s.firstTimestamp, rate: 48_000)
        s.lastEnd = max(s.lastEnd, pts + duration)
        return Frame(payload: .encoded(EncodedBuffer(codec: "opus", payload: packet.payload, durationNanos: duration,
                                                     format: AudioFormat(sampleRate: 48_000, channels: Int(channels)))),
                     pts: pts)
    }

    private func flushCounters(_ s: inout Source, context: NodeContext) {
        let st = s.stats
        let now = (received: st.received, lost: st.lost, duplicated: st.duplicated, reordered: st.reordered)
        if now.received > s.reported.received { context.count("received", by: UInt64(now.received - s.reported.received)) }
        if now.lost > s.reported.lost { context.count("lost", by: UInt64(now.lost - s.reported.lost)) }
        if now.duplicated > s.reported.duplicated { context.count("duplicated", by: UInt64(now.duplicated - s.reported.duplicated)) }
        if now.reordered > s.reported.reordered { context.count("reordered", by: UInt64(now.reordered - s.reported.reordered)) }
        s.reported = (now.received, max(now.lost, s.reported.lost), now.duplicated, now.reordered)
    }

    private func report(_ context: NodeContext) async throws {
        guard var s = source else {
            try await context.emit("rtp_stats", [("received", .int(0)), ("lost", .int(0)), ("duplicated", .int(0)),
                                                 ("reordered", .int(0)), ("jitter_ms", .double(0))])
            return
        }
        flushCounters(&s, context: context)
        source = s
        let st = s.stats
        try await context.emit("rtp_stats", [
            ("ssrc", .int(Int64(s.ssrc))), ("received", .int(st.received)), ("expected", .int(st.expected)),
            ("lost", .int(st.lost)), ("duplicated", .int(st.duplicated)), ("reordered", .int(st.reordered)),
            ("jitter_ms", .double((st.jitter / 4.8).rounded() / 10)),
        ])
    }

    private static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Configuration of `rtp-receive`.
    public struct Configuration: NodeConfiguration {
        /// Local UDP port (0 = any free one).
        public var port: Int
        /// Local address (`::` for IPv6 and IPv4).
        public var bind: String
        /// RTP payload type to accept.
        public var payloadType: Int
        /// The only source accepted; `nil` = the first heard.
        public var ssrc: Int?
        /// Silence after which another source is taken (without `ssrc`).
        public var sourceTimeoutMs: Int
        /// `rtp_stats` event period (0 = only at the end).
        public var statsIntervalMs: Int
        /// The parameters of `rtp-receive`.
        public static let parameters = [
            ParamSpec("port", .int(0...65535), default: 5004, doc: "local UDP port (0 = any free one, see the rtp_listening event)"),
            ParamSpec("bind", .string, default: "0.0.0.0", doc: "local address; \"::\" for IPv6 and IPv4"),
            ParamSpec("payload_type", .int(0...127), default: 96, doc: "RTP payload type to accept"),
            ParamSpec("ssrc", .int(0...4_294_967_295), doc: "accept only this source (default: the first heard)"),
            ParamSpec("source_timeout_ms", .int(0...3_600_000), default: 2000, doc: "silence after which another source is taken (without ssrc)"),
            ParamSpec("stats_interval_ms", .int(0...3_600_000), default: 5000, doc: "rtp_stats event period (0 = only at the end)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "rtp-receive", summary: "Receives Opus over RTP/UDP (RFC 3550 / RFC 7587), IPv4 or IPv6; feed it to jitter-buffer",
        family: "sources", inputs: [],
        outputs: [PortSpec("out", [.encoded], codecs: ["opus"], doc: "Opus packets in arrival order, pts = RTP timestamp in ns"), .events],
        configuration: Configuration.self,
        format: .none,
        defaultOverflow: .dropOldest,
        executor: .realtime,
        make: { c, _ in RTPReceiveNode(configuration: c) })
}
