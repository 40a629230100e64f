import COpus
import PipelineCore

/// `rtp-receive`: receives Opus (RFC 7587) or, with `codec: aac`, AAC (RFC 3640 `mpeg4-generic`, AAC-hbr)
/// over RTP/UDP (RFC 3550) on `bind:port`, IPv4 or IPv6 (`bind: "::"` takes both), and delivers one encoded
/// frame per new packet (per access unit for AAC), in arrival order.
///
/// Frame contract (what `jitter-buffer` relies on):
/// - `pts` is the packet's RTP timestamp, extended past 32-bit wrap-around, relative to the first
///   packet of the stream and converted from the RTP clock (48 kHz for Opus, `rate` for AAC) to nanoseconds. Packets are told
///   apart and ordered by `pts` (the runtime re-stamps `Frame.seq`, so the RTP sequence number is not
///   carried); a DTX pause shows as a jump in `pts`.
/// - Opus: `durationNanos` is the packet's duration read from its Opus TOC; `format` is 48 kHz with the
///   packet's channel count. AAC: each access unit is 1,024 samples at `rate` (unit `i` of a packet
///   starts 1,024 × i after the packet's timestamp); `format` is `rate`/`channels`; fragmented units are
///   reassembled, and a fragment whose end was lost is dropped (`invalid`).
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
    private let aac: AudioFormat?
    private let clock: Int64
    private var depacketizer = RTPMPEG4Payload.Depacketizer()

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
        aac = c.codec == .aac ? AudioFormat(sampleRate: c.rate, channels: c.channels) : nil
        clock = Int64(aac?.sampleRate ?? 48_000)
    }

    public func run(_ context: NodeContext) async throws {
        let worker = BlockingWorker(name: "rtp-receive-\(context.id)")
        defer { worker.shutdown() }
        let (bindHost, port) = (self.bindHost, self.port)
        let socket: UDPSocket
        do {
            socket = try await worker.run { try UDPSocket(bindHost: bindHost, port: port) }
        } catch let e as UDPError {
            throw NodeError(NodeErrorCode(e.code), "rtp-receive: \(e.message)")
        }
        let boundPort = socket.localPort
        context.logger.info("receiving RTP on \(bindHost) port \(boundPort)")
        try await context.emit(.rtpListening, [("port", .int(Int64(boundPort))), ("bind", .string(bindHost))])
        let pacer = context.makePacer()
        var nextReport = statsIntervalNanos
        do {
            while !Task.isCancelled {
                let datagram = try await worker.run { try socket.receive(timeoutMs: 50) }
                let now = Self.nanos(pacer.elapsed)
                if let datagram {
                    for frame in accept(datagram.bytes, arrival: now, context: context) { try await context.send(frame) }
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
            throw NodeError(NodeErrorCode(e.code), "rtp-receive: \(e.message)")
        }
        _ = try? await worker.run { socket.close() }
        try? await report(context)
    }

    /// Parses and classifies one datagram; returns the frames to deliver.
    private func accept(_ bytes: [UInt8], arrival: Int64, context: NodeContext) -> [Frame] {
        guard let packet = try? RTPPacket(parsing: bytes) else {
            context.count("invalid")
            return []
        }
        guard packet.payloadType == payloadType else {
            context.count("wrong_payload_type")
            return []
        }
        if let configuredSSRC, packet.ssrc != configuredSSRC {
            context.count("foreign_ssrc")
            return []
        }
        if var current = source, current.ssrc != packet.ssrc {
            guard arrival - current.lastArrival >= sourceTimeoutNanos else {
                context.count("foreign_ssrc")
                return []
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
        guard var s = source else { return [] }
        defer { source = s }
        let arrivalTicks = arrival / 1_000_000_000 * clock + (arrival % 1_000_000_000) * clock / 1_000_000_000
        switch s.stats.record(sequenceNumber: packet.sequenceNumber, timestamp: packet.timestamp, arrival: arrivalTicks) {
        case .duplicate:
            return []
        case .outOfRange:
            context.count("out_of_range")
            return []
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
            return []
        }
        let start = s.ptsBase + MediaTime.nanos(samples: extended - s.firstTimestamp, rate: Int(clock))
        if let aac {
            let units: [[UInt8]]
            do {
                units = try depacketizer.units(in: packet.payload, marker: packet.marker, timestamp: packet.timestamp)
            } catch {
                context.count("invalid")
                return []
            }
            let duration = MediaTime.nanos(samples: Int64(AACRates.frameSamples), rate: aac.sampleRate)
            var frames: [Frame] = []
            for (i, unit) in units.enumerated() {
                let pts = start + MediaTime.nanos(samples: Int64(i * AACRates.frameSamples), rate: aac.sampleRate)
                s.lastEnd = max(s.lastEnd, pts + duration)
                frames.append(Frame(payload: .encoded(EncodedBuffer(codec: "aac", payload: unit, durationNanos: duration, format: aac)), pts: pts))
            }
            return frames
        }
        let samples = packet.payload.withUnsafeBufferPointer { opus_packet_get_nb_samples($0.baseAddress!, Int32($0.count), 48_000) }
        let channels = packet.payload.withUnsafeBufferPointer { opus_packet_get_nb_channels($0.baseAddress!) }
        guard samples > 0, channels > 0 else {
            context.count("invalid")
            return []
        }
        let duration = MediaTime.nanos(samples: Int64(samples), rate: 48_000)
        s.lastEnd = max(s.lastEnd, start + duration)
        return [Frame(payload: .encoded(EncodedBuffer(codec: "opus", payload: packet.payload, durationNanos: duration,
                                                      format: AudioFormat(sampleRate: 48_000, channels: Int(channels)))),
                      pts: start)]
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
            try await context.emit(.rtpStats, [("received", .int(0)), ("lost", .int(0)), ("duplicated", .int(0)),
                                                 ("reordered", .int(0)), ("jitter_ms", .double(0))])
            return
        }
        flushCounters(&s, context: context)
        source = s
        let st = s.stats
        try await context.emit(.rtpStats, [
            ("ssrc", .int(Int64(s.ssrc))), ("received", .int(st.received)), ("expected", .int(st.expected)),
            ("lost", .int(st.lost)), ("duplicated", .int(st.duplicated)), ("reordered", .int(st.reordered)),
            ("jitter_ms", .double((st.jitter / (Double(clock) / 10_000)).rounded() / 10)),
        ])
    }

    private static func nanos(_ d: Duration) -> Int64 {
        d.components.seconds * 1_000_000_000 + d.components.attoseconds / 1_000_000_000
    }

    /// Payload formats `rtp-receive` takes.
    public enum Codec: String, Sendable, Decodable, CaseIterable {
        case opus, aac
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
        /// Payload format.
        public var codec: Codec
        /// AAC sampling rate = RTP clock.
        public var rate: Int
        /// AAC channels.
        public var channels: Int
        /// The parameters of `rtp-receive`.
        public static let parameters = [
            ParamSpec("port", .int(0...65535), default: 5004, doc: "local UDP port (0 = any free one, see the rtp_listening event)"),
            ParamSpec("bind", .string, default: "0.0.0.0", doc: "local address; \"::\" for IPv6 and IPv4"),
            ParamSpec("payload_type", .int(0...127), default: 96, doc: "RTP payload type to accept"),
            ParamSpec("ssrc", .int(0...4_294_967_295), doc: "accept only this source (default: the first heard)"),
            ParamSpec("source_timeout_ms", .int(0...3_600_000), default: 2000, doc: "silence after which another source is taken (without ssrc)"),
            ParamSpec("stats_interval_ms", .int(0...3_600_000), default: 5000, doc: "rtp_stats event period (0 = only at the end)"),
            ParamSpec("codec", .choice(Codec.allCases.map(\.rawValue)), default: "opus", doc: "payload format: opus (RFC 7587) or aac (RFC 3640 mpeg4-generic, AAC-hbr)"),
            ParamSpec("rate", .int(8000...96000), default: 48000, doc: "aac: the stream's sampling rate (= RTP clock); opus always uses 48000"),
            ParamSpec("channels", .int(1...2), default: 1, doc: "aac: the stream's channel count"),
        ]
        public func problems() -> [String] {
            codec == .aac && !AACRates.supported.contains(rate) ? ["rate must be 16000, 22050, 24000, 32000, 44100 or 48000 for aac, got \(rate)"] : []
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "rtp-receive", summary: "Receives Opus (RFC 7587) or AAC (RFC 3640) over RTP/UDP (RFC 3550), IPv4 or IPv6; feed it to jitter-buffer",
        family: "sources", inputs: [],
        outputs: [PortSpec("out", [.encoded], codecs: ["opus", "aac"], doc: "Opus packets or AAC access units in arrival order, pts = RTP timestamp in ns"), .events],
        configuration: Configuration.self,
        format: .none,
        defaultOverflow: .dropOldest,
        executor: .realtime,
        make: { c, _ in RTPReceiveNode(configuration: c) })
}
