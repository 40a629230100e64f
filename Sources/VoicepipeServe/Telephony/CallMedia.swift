import Foundation
import NIOCore
import NIOPosix
import Nodes
import PipelineCore

/// A telephone call's media, whichever side placed the call: its RTP socket, the caller's packets through
/// ``RTPInbound`` and the jitter buffer into the graph's `app-source` (decoded, converted to the graph's
/// rate, with RFC 4733 digits as `dtmf` events), and the graph's answer audio out every `ptime`
/// (silence between answers) to where the other side's RTP comes from.
final class CallMedia: Sendable {
    /// What the media counts, for the route's metrics (or a log).
    enum Report: Sendable {
        case received(bytes: Int)
        case ignored(code: String)
        case sent(seconds: Double)
        case dropped(seconds: Double)
    }

    struct State {
        var inbound: RTPInbound
        var jitter: JitterBuffer
        var detector = TelephoneEventDetector()
        var digits: [TelephoneEventDetector.Digit] = []
        /// Where RTP goes: the other side's latched source, else its SDP address.
        var remote: SocketAddress?
        var latched = false
        var lastRTP = ContinuousClock.now
        /// The other side sends (its direction), and voicepipe may send (the answer's direction).
        var peerSends = true
        var weSend = true
        /// Answer audio at the codec's rate, waiting to be sent.
        var queue: [Int16] = []
        var extended: (last: UInt32, value: Int64)?
        var ended = false
    }

    let codec: TelephoneCodec
    let payloadType: UInt8
    let ptime: Int
    let graphFormat: AudioFormat
    let answerBufferMs: Int
    private let report: @Sendable (Report) -> Void
    private let state: LockedValue<State>
    private let channel = LockedValue<(any Channel)?>(nil)
    private let opened = ContinuousClock.now
    private let clock = ContinuousClock()
    /// Told when a packet or a digit arrives (the playout waits on it while the jitter buffer is empty).
    private let arrived = ChangeSignal()
    /// Told when the answer queue shrinks or is emptied (``waitUntilSent(deadline:)`` waits on it).
    private let sent = ChangeSignal()

    init(negotiation n: MediaNegotiation, graphFormat: AudioFormat, jitterMs: ClosedRange<Int>, answerBufferMs: Int,
         report: @escaping @Sendable (Report) -> Void) throws {
        codec = n.codec
        payloadType = n.payloadType
        ptime = n.ptime
        self.graphFormat = graphFormat
        self.answerBufferMs = answerBufferMs
        self.report = report
        // Fails early (a missing G.722 library) before anything is answered.
        _ = try CallCodec(n.codec, ptime: n.ptime, graphRate: graphFormat.sampleRate)
        let jitter = JitterBuffer(configuration: try .init(minMs: max(jitterMs.lowerBound, n.ptime), maxMs: max(jitterMs.upperBound, n.ptime * 2), frameMs: n.ptime))
        var s = State(inbound: RTPInbound(payloadType: n.payloadType, telephoneEvent: n.telephoneEvent, comfortNoise: n.comfortNoise), jitter: jitter)
        s.remote = try? SocketAddress.makeAddressResolvingHost(n.remoteAddress, port: n.remotePort)
        s.peerSends = n.remoteDirection.sends
        s.weSend = n.remoteDirection.receives
        state = LockedValue(s)
    }

    /// Binds the call's RTP socket (UDP; port 0: one of the kernel's choosing) on `host`; returns the port.
    func bind(host: String, group: any EventLoopGroup, port: Int = 0) async throws -> Int {
        let ch = try await DatagramBootstrap(group: group)
            .channelOption(.recvAllocator, value: FixedSizeRecvByteBufferAllocator(capacity: 2048))
            .channelInitializer { [self] ch in ch.eventLoop.makeCompletedFuture { try ch.pipeline.syncOperations.addHandler(RTPHandler(media: self)) } }
            .bind(host: host, port: port).get()
        channel.withLock { $0 = ch }
        return ch.localAddress?.port ?? 0
    }

    func close() { channel.withLock { $0 }?.close(promise: nil) }

    /// A re-INVITE changed where the other side is or what it does.
    func update(_ n: MediaNegotiation) {
        state.withLock { s in
            if n.remoteAddress != "0.0.0.0", let r = try? SocketAddress.makeAddressResolvingHost(n.remoteAddress, port: n.remotePort), r != s.remote {
                s.remote = r
                s.latched = false
                s.inbound.relatch()
            }
            s.peerSends = n.remoteDirection.sends
            s.weSend = n.remoteDirection.receives
            s.lastRTP = .now
            if !s.weSend { s.queue.removeAll() }
        }
        sent.notify()
    }

    /// Barge-in: what is queued is not sent.
    func interrupt() {
        state.withLock { $0.queue.removeAll() }
        sent.notify()
    }
    func digit(_ d: TelephoneEventDetector.Digit) {
        state.withLock { $0.digits.append(d) }
        arrived.notify()
    }
    func end() { state.withLock { $0.ended = true } }
    var queueIsEmpty: Bool { state.withLock { $0.queue.isEmpty } }

    /// Waits until the answer queued so far has been sent (``queueIsEmpty``), up to `deadline`. Returns
    /// true when it was sent, false at the deadline (or when the waiting task was cancelled before).
    @discardableResult
    func waitUntilSent(deadline: ContinuousClock.Instant) async -> Bool {
        await sent.wait(until: deadline) { [self] in state.withLock { $0.queue.isEmpty } }
    }
    var counters: RTPInbound.Counters { state.withLock { $0.inbound.counters } }

    /// True when the other side said it sends and has sent nothing for `limit`.
    func silent(for limit: Duration) -> Bool {
        state.withLock { $0.peerSends && ContinuousClock.now - $0.lastRTP > limit }
    }

    /// When the other side will have been silent for `limit` if nothing more comes (nil while it says it does
    /// not send, on hold): the moment to look again, not a tick.
    func silenceDeadline(_ limit: Duration) -> ContinuousClock.Instant? {
        state.withLock { $0.peerSends ? $0.lastRTP + limit : nil }
    }

    /// One datagram on the RTP port.
    func received(_ bytes: [UInt8], from address: SocketAddress) {
        let text = "\(address.ipAddress ?? "?"):\(address.port ?? 0)"
        let clockRate = Int64(codec.rtpmap.clock)
        let frameNanos = Int64(ptime) * 1_000_000
        let arrival = Int64((ContinuousClock.now - opened) / .nanoseconds(1))
        let verdict: RTPInbound.Verdict? = state.withLock { s in
            guard !s.ended else { return nil }
            let v = s.inbound.classify(bytes, from: text)
            switch v {
            case .audio(let p):
                s.lastRTP = .now
                if !s.latched { s.remote = address; s.latched = true }
                let ts = s.extended.map { $0.value + Int64(Int32(bitPattern: p.timestamp &- $0.last)) } ?? 0
                s.extended = (p.timestamp, ts)
                let frame = Frame(payload: .encoded(EncodedBuffer(codec: codec.name, payload: p.payload, durationNanos: frameNanos)),
                                  pts: ts * 1_000_000_000 / clockRate)
                _ = s.jitter.insert(frame, arrival: arrival)
            case .telephoneEvent(let p):
                s.lastRTP = .now
                if !s.latched { s.remote = address; s.latched = true }
                s.digits += s.detector.packet(timestamp: p.timestamp, payload: p.payload)
            case .comfortNoise:
                s.lastRTP = .now
            default: break
            }
            return v
        }
        switch verdict {
        case .audio, .telephoneEvent: arrived.notify()
        default: break
        }
        switch verdict {
        case .wrongAddress: report(.ignored(code: "rtp_wrong_address"))
        case .wrongSSRC: report(.ignored(code: "rtp_wrong_ssrc"))
        case .malformed: report(.ignored(code: "rtp_malformed"))
        case .unknownPayloadType: report(.ignored(code: "rtp_unknown_payload"))
        case .audio(let p): report(.received(bytes: p.payload.count))
        default: break
        }
    }

    /// The three tasks of a running call: playout into `source`, the answer from `sink` queued, RTP sent.
    func start(source: AppSourceNode, sink: AppSinkNode?) -> [Task<Void, Never>] {
        var tasks = [Task { [self] in await play(into: source) }, Task { [self] in await send() }]
        if let sink { tasks.append(Task { [self] in await answer(sink) }) }
        return tasks
    }

    private func play(into source: AppSourceNode) async {
        guard let decoder = try? CallCodec(codec, ptime: ptime, graphRate: graphFormat.sampleRate) else { return }
        let from = AudioFormat(sampleRate: decoder.rate, channels: 1)
        let converter = from == graphFormat ? nil : try? AudioConverter(from: from, to: graphFormat)
        while !Task.isCancelled {
            let (due, digits): (Int64?, [TelephoneEventDetector.Digit]) = state.withLock { s in
                defer { s.digits.removeAll() }
                return (s.jitter.nextTickTime, s.digits)
            }
            for d in digits {
                await source.push(event: Event(.dtmf, fields: [("digit", .string(d.digit)), ("duration_ms", .int(Int64(d.durationMs)))]))
            }
            guard let due else {
                // Nothing to play until a packet (or a digit) comes.
                _ = await arrived.wait(until: .now + .seconds(1)) { [self] in
                    state.withLock { $0.jitter.nextTickTime != nil || !$0.digits.isEmpty }
                }
                continue
            }
            let at = opened + .nanoseconds(due)
            if at > .now {
                try? await Task.sleep(until: min(at, .now + .milliseconds(20)), clock: clock)
                if at > .now { continue }
            }
            var samples: [Int16]
            switch state.withLock({ $0.jitter.tick() }) {
            case .play(let frame, _): samples = (try? decoder.decode(frame.encoded?.payload ?? [])) ?? decoder.conceal()
            case .conceal: samples = decoder.conceal()
            }
            if let converter { samples = converter.convert(samples) }
            if !samples.isEmpty { await source.push(samples) }
        }
    }

    private func answer(_ sink: AppSinkNode) async {
        let rate = SIPCall.codecRate(codec, graphRate: graphFormat.sampleRate)
        let target = AudioFormat(sampleRate: rate, channels: 1)
        var converter: AudioConverter?
        for await frame in sink.frames {
            guard let audio = frame.audio else { continue }
            if audio.format != target && converter?.input != audio.format { converter = try? AudioConverter(from: audio.format, to: target) }
            let samples = audio.format == target ? audio.samples : (converter?.convert(audio.samples) ?? [])
            let limit = rate * answerBufferMs / 1000
            let dropped = state.withLock { s -> Int in
                s.queue += samples
                let over = max(0, s.queue.count - limit)
                if over > 0 { s.queue.removeFirst(over) }
                return over
            }
            if dropped > 0 { report(.dropped(seconds: Double(dropped) / Double(rate))) }
        }
    }

    private func send() async {
        guard let encoder = try? CallCodec(codec, ptime: ptime, graphRate: graphFormat.sampleRate) else { return }
        let ssrc = UInt32.random(in: 1...UInt32.max)
        var seq = UInt16.random(in: 0...UInt16.max)
        var timestamp = UInt32.random(in: 0...UInt32.max)
        var first = true
        var next = clock.now
        while !Task.isCancelled {
            next += .milliseconds(ptime)
            try? await Task.sleep(until: next, clock: clock)
            if clock.now - next > .milliseconds(200) { next = clock.now }
            let (chunk, remote, allowed, hadAudio): ([Int16], SocketAddress?, Bool, Bool) = state.withLock { s in
                let n = min(s.queue.count, encoder.frameSamples)
                var c = Array(s.queue.prefix(n))
                s.queue.removeFirst(n)
                if c.count < encoder.frameSamples { c += [Int16](repeating: 0, count: encoder.frameSamples - c.count) }
                return (c, s.remote, s.weSend && !s.ended, n > 0)
            }
            if hadAudio { sent.notify() }
            guard allowed, let remote, let ch = channel.withLock({ $0 }), let payload = try? encoder.encode(chunk) else { continue }
            let packet = RTPPacket(marker: first, payloadType: payloadType, sequenceNumber: seq, timestamp: timestamp, ssrc: ssrc, payload: payload)
            first = false
            seq &+= 1
            timestamp &+= encoder.timestampStep
            ch.writeAndFlush(AddressedEnvelope(remoteAddress: remote, data: ch.allocator.buffer(bytes: packet.serialized())), promise: nil)
            if hadAudio { report(.sent(seconds: Double(ptime) / 1000)) }
        }
    }
}

private final class RTPHandler: ChannelInboundHandler {
    typealias InboundIn = AddressedEnvelope<ByteBuffer>
    let media: CallMedia

    init(media: CallMedia) { self.media = media }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        var envelope = unwrapInboundIn(data)
        let bytes = envelope.data.readBytes(length: envelope.data.readableBytes) ?? []
        media.received(bytes, from: envelope.remoteAddress)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {}
}
