import Foundation
import Logging
import NIOCore
import NIOPosix
import Nodes
import PipelineCore

/// The `audiosocket` route: Asterisk's AudioSocket on a TCP port, one call per connection and each call a
/// session of the route's graph.
///
/// Every message is a 1-byte type, a 2-byte big-endian payload length and the payload. The call opens with
/// `0x01` (the call's UUID, 16 bytes; the session's id on the event bus), then `0x10`…`0x16` audio (signed
/// linear 16-bit little-endian mono at 8, 12, 16, 24, 32, 44.1 or 48 kHz) converted to the rate of the
/// graph's `app-source`, `0x03` DTMF (one ASCII digit, a `dtmf` event with `digit` on the `app-source`'s
/// `events`), `0x00` hangup and `0xff` error. The graph's answer audio (its `app-sink` fed audio) goes back
/// at the caller's last rate in 20 ms audio messages paced at real time; what the graph interrupts (its
/// barge-in) is discarded at once. A malformed message (unknown type, a length its type does not take,
/// audio longer than a second, anything before the UUID) is answered with an `0xff` error, counted, and
/// the call closed; so is a call over `max_sessions` or while draining. Error codes voicepipe sends:
/// see ``AudioSocket/ErrorCode``.
enum AudioSocket {
    /// Codes of the `0xff` messages voicepipe sends (application codes, clear of Asterisk's 0x01…0x04).
    enum ErrorCode: UInt8 {
        case badMessage = 0x80
        case busy = 0x81
        case draining = 0x82
        case graphFailed = 0x83
        case idle = 0x84
    }

    static let hangup: UInt8 = 0x00
    static let uuid: UInt8 = 0x01
    static let dtmf: UInt8 = 0x03
    static let error: UInt8 = 0xff

    /// Audio message types and their sample rates.
    static let rates: [UInt8: Int] = [0x10: 8000, 0x11: 12000, 0x12: 16000, 0x13: 24000, 0x14: 32000, 0x15: 44100, 0x16: 48000]

    /// The audio type of a sample rate (nil for a rate the protocol has no type for).
    static func audioType(rate: Int) -> UInt8? { rates.first { $0.value == rate }?.key }

    /// One message on the wire.
    static func encode(type: UInt8, payload: [UInt8]) -> [UInt8] {
        precondition(payload.count <= 0xffff)
        return [type, UInt8(payload.count >> 8), UInt8(payload.count & 0xff)] + payload
    }

    /// A decoded message.
    enum Message: Equatable, Sendable {
        case hangup
        case uuid([UInt8])
        case dtmf(Character)
        case audio(rate: Int, bytes: [UInt8])
        case error(code: UInt8?)
    }

    /// Why the bytes received are not AudioSocket.
    struct Problem: Error, Equatable, CustomStringConvertible {
        var message: String
        var description: String { message }
    }

    /// Splits the byte stream into messages; a header is checked as soon as it is complete, so an
    /// oversized or unknown message is refused before its payload arrives.
    struct Decoder {
        private var buffer: [UInt8] = []

        /// Bytes of an incomplete message held.
        var pending: Int { buffer.count }

        mutating func push(_ bytes: [UInt8]) throws(Problem) -> [Message] {
            buffer += bytes
            var out: [Message] = []
            var at = 0
            defer { buffer.removeFirst(at) }
            while buffer.count - at >= 3 {
                let type = buffer[at]
                let length = Int(buffer[at + 1]) << 8 | Int(buffer[at + 2])
                try Self.check(type: type, length: length)
                guard buffer.count - at - 3 >= length else { break }
                let payload = Array(buffer[(at + 3)..<(at + 3 + length)])
                at += 3 + length
                switch type {
                case AudioSocket.hangup: out.append(.hangup)
                case AudioSocket.uuid: out.append(.uuid(payload))
                case AudioSocket.dtmf: out.append(.dtmf(Character(Unicode.Scalar(payload[0]))))
                case AudioSocket.error: out.append(.error(code: payload.first))
                default:
                    // check(type:length:) admits only the audio types here; a type it let through by mistake
                    // is refused as a bad message, not a crash.
                    guard let rate = AudioSocket.rates[type] else { throw Problem(message: "unknown message type 0x\(String(type, radix: 16))") }
                    out.append(.audio(rate: rate, bytes: payload))
                }
            }
            return out
        }

        static func check(type: UInt8, length: Int) throws(Problem) {
            switch type {
            case AudioSocket.hangup, AudioSocket.error: return
            case AudioSocket.uuid where length != 16:
                throw Problem(message: "a UUID message (0x01) carries 16 bytes, not \(length)")
            case AudioSocket.dtmf where length != 1:
                throw Problem(message: "a DTMF message (0x03) carries 1 byte, not \(length)")
            case AudioSocket.uuid, AudioSocket.dtmf: return
            default:
                guard let rate = AudioSocket.rates[type] else {
                    throw Problem(message: String(format: "unknown message type 0x%02x", type))
                }
                // A second of audio at most in one message (Asterisk sends 20 ms).
                if length > 2 * rate {
                    throw Problem(message: String(format: "an audio message (0x%02x) of %d bytes is longer than a second at %d Hz", type, length, rate))
                }
            }
        }
    }

    /// The UUID's usual text form.
    static func uuidString(_ bytes: [UInt8]) -> String {
        let hex = bytes.map { String(format: "%02x", $0) }.joined()
        let parts = [0..<8, 8..<12, 12..<16, 16..<20, 20..<32].map { r in
            String(hex[hex.index(hex.startIndex, offsetBy: r.lowerBound)..<hex.index(hex.startIndex, offsetBy: r.upperBound)])
        }
        return parts.joined(separator: "-")
    }

    static func bind(server: ServeServer, route: ServeConfiguration.Route, group: any EventLoopGroup) async throws -> any Channel {
        let bootstrap = ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(ServeServer.acceptBackoff()) }
            }
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(AudioSocketHandler(call: AudioSocketCall(server: server, route: route, channel: channel)))
                }
            }
        return try await bootstrap.bind(host: server.configuration.listen.host, port: route.port ?? 9092).get()
    }
}

/// One TCP connection: decodes messages and hands them to its call in order.
private final class AudioSocketHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    let call: AudioSocketCall
    private var decoder = AudioSocket.Decoder()
    private var failed = false

    init(call: AudioSocketCall) { self.call = call }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !failed else { return }
        var buffer = unwrapInboundIn(data)
        let bytes = buffer.readBytes(length: buffer.readableBytes) ?? []
        do {
            for m in try decoder.push(bytes) { call.received(m) }
        } catch {
            failed = true
            call.protocolError(error.message)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        call.closed(truncated: failed ? 0 : decoder.pending)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) { context.close(promise: nil) }
}

/// One call: its graph, the caller's audio in, the answer audio out. What the caller sends waits in the
/// call's ``SessionInbox`` (about ``ServeSession/inboxSeconds`` of audio at the graph's rate, at most): a
/// caller that sends faster than the graph takes finds the connection no longer reading, and nothing is dropped.
final class AudioSocketCall: TelephoneCall {
    let server: ServeServer
    let route: ServeConfiguration.Route
    let channel: any Channel
    /// The caller's messages and the call's own signals, in order; bounded by back-pressure.
    private let inbox: SessionInbox<Input>
    private let opened = ContinuousClock.now
    private let running = LockedValue<LiveSession?>(nil)
    var live: LiveSession? { running.withLock { $0 } }

    private enum Input: Sendable {
        case message(AudioSocket.Message)
        /// A malformed message: answered with an error, then the call ends.
        case malformed(String)
        /// The connection closed; `truncated` bytes of a message were left.
        case closed(truncated: Int)
        case idle
        case maxDuration
        case drain
        case graphEnded
    }

    private struct Outbound {
        /// The caller's rate (its last audio message's), where the answer goes back.
        var rate = 8000
        /// Answer audio at `rate`, not yet sent.
        var queue: [Int16] = []
        var lastInput = ContinuousClock.now
        var ended = false
    }
    private let outbound = LockedValue(Outbound())
    /// Told when the queued answer shrinks or the connection closes (the end of a call waits on it).
    private let sent = ChangeSignal()

    init(server: ServeServer, route: ServeConfiguration.Route, channel: any Channel) {
        self.server = server
        self.route = route
        self.channel = channel
        // The caller's audio is mono, converted to the app-source's rate.
        inbox = SessionInbox(limitBytes: ServeSession.inboxBytes(AudioFormat(sampleRate: route.format.sampleRate, channels: 1)),
                             limitMessages: ServeSession.inboxMessages, channel: channel)
        server.addCall(self)
        Task { await self.run() }
    }

    func received(_ m: AudioSocket.Message) {
        outbound.withLock { $0.lastInput = .now }
        if case .audio(_, let bytes) = m { inbox.push(.message(m), bytes: bytes.count) } else { inbox.push(.message(m), bytes: 0) }
    }
    func protocolError(_ message: String) { inbox.push(.malformed(message), bytes: 0) }
    func closed(truncated: Int) {
        sent.notify()
        inbox.push(.closed(truncated: truncated), bytes: 0)
        inbox.finish()
        // The caller is gone: the graph stops at once, even if a push into it is waiting for room.
        live?.pipeline.stop()
    }
    func endForShutdown() { inbox.push(.drain, bytes: 0) }

    private var logger: Logger { server.logger }

    private func send(_ type: UInt8, _ payload: [UInt8]) {
        let bytes = AudioSocket.encode(type: type, payload: payload)
        channel.writeAndFlush(channel.allocator.buffer(bytes: bytes), promise: nil)
    }

    /// An `0xff` error, then the connection closes (after the message is written).
    private func fail(_ code: AudioSocket.ErrorCode) {
        let bytes = AudioSocket.encode(type: AudioSocket.error, payload: [code.rawValue])
        let channel = self.channel
        channel.writeAndFlush(channel.allocator.buffer(bytes: bytes)).whenComplete { _ in channel.close(promise: nil) }
    }

    private func run() async {
        defer {
            server.metrics.input(route: route.name, inbox.takeStatistics())
            server.removeCall(self)
        }
        // The first message names the call.
        let watchdog = Task { [self] in await watch() }
        defer { watchdog.cancel() }
        var id: [UInt8]?
        first: while let input = await inbox.next() {
            switch input {
            case .message(.uuid(let bytes)): id = bytes; break first
            case .closed(let truncated):
                if truncated > 0 {
                    server.metrics.error(route: route.name, code: "truncated")
                    logger.info("route '\(route.name)': a connection closed inside its first message (\(truncated) bytes of it)")
                }
                channel.close(promise: nil)
                return
            case .message(.hangup), .drain: channel.close(promise: nil); return
            case .message(let m):
                refuseMalformed("the first message must be the call's UUID (0x01), not \(m.kindName)")
                return
            case .malformed(let text): refuseMalformed(text); return
            case .idle:
                server.metrics.error(route: route.name, code: "idle")
                fail(.idle)
                return
            case .maxDuration, .graphEnded: continue
            }
        }
        guard let id else { return }
        let token = WyomingToken()
        guard server.admitWyoming(token) else {
            let draining = server.isDraining
            server.metrics.refused(route: route.name, code: draining ? "draining" : "busy")
            logger.info("route '\(route.name)': call \(AudioSocket.uuidString(id)) refused (\(draining ? "draining" : "too many sessions"))")
            fail(draining ? .draining : .busy)
            return
        }
        defer { server.removeWyoming(token) }
        let bus = SessionEvents(server: server, route: route.name, session: AudioSocket.uuidString(id))
        server.metrics.sessionStarted(route: route.name)
        bus.started(protocol: "audiosocket", remote: channel.remoteAddress.map { "\($0.ipAddress ?? "?"):\($0.port ?? 0)" })
        let pipeline: Pipeline
        let source: AppSourceNode
        do {
            pipeline = try Pipeline(graph: route.graph, logger: Logger(label: "voicepipe.serve.\(route.name)"))
            guard let s = pipeline.appSource(route.sourceID) else { throw PipelineError(node: route.sourceID, code: "no_source", message: "no app-source") }
            source = s
        } catch {
            server.metrics.sessionEnded(route: route.name, outcome: "error", seconds: 0, drops: 0, mediaAgeP99Ms: nil)
            server.metrics.error(route: route.name, code: "graph_failed")
            await bus.finished(outcome: "error", audioBytes: 0, drops: 0)
            fail(.graphFailed)
            return
        }
        running.withLock { $0 = LiveSession(id: bus.session, route: route.name, started: opened, pipeline: pipeline) }
        defer { running.withLock { $0 = nil } }
        let events = pipeline.events(buffer: 10_000)
        let answerRoute = route.answer
        let forwarding = Task { [self] in
            for await e in events {
                bus.forward(e)
                if answerRoute?.interrupts(e) == true {
                    outbound.withLock { $0.queue.removeAll() }
                    sent.notify()
                }
            }
        }
        let answering = route.answer.flatMap { pipeline.appSink($0.sinkID) }.map { sink in
            Task { [self] in await answer(sink) }
        }
        let pacing = route.answer == nil ? nil : Task { [self] in await pace() }
        let running = Task { [self] in
            defer { inbox.push(.graphEnded, bytes: 0) }
            do { try await pipeline.run(); return nil as (any Error)? } catch { return error }
        }
        var bytes = 0
        var carry: UInt8?
        var converter: (rate: Int, converter: AudioConverter?)?
        var outcome = "completed"
        var stopAtOnce = true
        loop: while let input = await inbox.next() {
            switch input {
            case .message(.audio(let rate, var payload)):
                bytes += payload.count
                server.metrics.audio(route: route.name, bytes: payload.count)
                if let c = carry { payload.insert(c, at: 0); carry = nil }
                if payload.count % 2 == 1 { carry = payload.removeLast() }
                var samples = [Int16](repeating: 0, count: payload.count / 2)
                for i in 0..<samples.count { samples[i] = Int16(bitPattern: UInt16(payload[2 * i]) | UInt16(payload[2 * i + 1]) << 8) }
                if converter?.rate != rate {
                    let from = AudioFormat(sampleRate: rate, channels: 1)
                    converter = (rate, from == route.format ? nil : try? AudioConverter(from: from, to: route.format))
                    let changed = outbound.withLock { o -> Bool in
                        defer { o.rate = rate }
                        return o.rate != rate
                    }
                    if changed { outbound.withLock { $0.queue.removeAll() } }
                }
                let converted = converter?.converter.map { $0.convert(samples) } ?? samples
                if !converted.isEmpty { await source.push(converted) }
            case .message(.dtmf(let digit)):
                await source.push(event: Event(.dtmf, fields: [("digit", .string(String(digit)))]))
            case .message(.uuid):
                refuseMalformed("a second UUID message inside the call")
                outcome = "error"
                break loop
            case .message(.hangup):
                outcome = "hangup"
                break loop
            case .message(.error(let code)):
                server.metrics.error(route: route.name, code: "caller_error")
                logger.info("route '\(route.name)': call \(bus.session): the caller sent error \(code.map { String(format: "0x%02x", $0) } ?? "(no code)")")
                outcome = "caller_error"
                break loop
            case .malformed(let text):
                refuseMalformed(text)
                outcome = "error"
                break loop
            case .closed(let truncated):
                if truncated > 0 {
                    server.metrics.error(route: route.name, code: "truncated")
                    logger.info("route '\(route.name)': call \(bus.session): the connection closed inside a message (\(truncated) bytes of it)")
                }
                outcome = "disconnected"
                break loop
            case .idle:
                server.metrics.error(route: route.name, code: "idle")
                fail(.idle)
                outcome = "idle"
                break loop
            case .maxDuration:
                server.metrics.error(route: route.name, code: "max_duration")
                outcome = "limit"
                stopAtOnce = false
                break loop
            case .drain:
                outcome = "shutdown"
                stopAtOnce = false
                break loop
            case .graphEnded:
                break loop
            }
        }
        source.finish()
        if stopAtOnce { pipeline.stop() }
        let failure = await running.value
        _ = await forwarding.value
        await answering?.value
        if !stopAtOnce {
            // The answer still queued is played out (bounded by the stall limit).
            _ = await sent.wait(until: .now + ServeSession.stallLimit) { [self] in
                outbound.withLock { $0.queue.isEmpty } || !channel.isActive
            }
        }
        outbound.withLock { $0.ended = true }
        pacing?.cancel()
        _ = await pacing?.value
        if failure != nil && outcome == "completed" { outcome = "error" }
        let drops = pipeline.edgeStats.reduce(0) { $0 + Int($1.dropped) }
        server.metrics.input(route: route.name, inbox.takeStatistics())
        server.metrics.sessionEnded(route: route.name, outcome: outcome, seconds: ServeSession.seconds(ContinuousClock.now - opened), drops: drops,
                                    mediaAgeP99Ms: pipeline.sinkAges.map(\.age.p99Ms).max())
        await bus.finished(outcome: outcome, audioBytes: bytes, drops: drops)
        if let failure {
            server.metrics.error(route: route.name, code: "graph_failed")
            logger.warning("route '\(route.name)': call \(bus.session): graph failed: \(failure)")
            fail(.graphFailed)
        } else if outcome != "idle" && outcome != "error" {
            if channel.isActive && outcome != "hangup" && outcome != "disconnected" { send(AudioSocket.hangup, []) }
            channel.close(promise: nil)
        }
    }

    private func refuseMalformed(_ text: String) {
        server.metrics.error(route: route.name, code: "bad_message")
        logger.info("route '\(route.name)': malformed AudioSocket message: \(text)")
        fail(.badMessage)
    }

    /// The answer's audio, converted to the caller's rate and queued (the oldest dropped beyond the route's `answer_buffer_ms`).
    private func answer(_ sink: AppSinkNode) async {
        var converter: AudioConverter?
        for await frame in sink.frames {
            guard let audio = frame.audio else { continue }
            let rate = outbound.withLock { $0.rate }
            let target = AudioFormat(sampleRate: rate, channels: 1)
            if converter?.input != audio.format || converter?.output != target {
                converter = try? AudioConverter(from: audio.format, to: target)
            }
            guard let converter else { continue }
            let samples = converter.convert(audio.samples)
            let limit = rate * (route.answer?.bufferMs ?? 20_000) / 1000
            let dropped = outbound.withLock { o -> Int in
                o.queue += samples
                let over = max(0, o.queue.count - limit)
                if over > 0 { o.queue.removeFirst(over) }
                return over
            }
            if dropped > 0 { server.metrics.answerDropped(route: route.name, messages: 1, seconds: Double(dropped) / Double(rate)) }
        }
    }

    /// Sends the queued answer in 20 ms audio messages, one every 20 ms.
    private func pace() async {
        let clock = ContinuousClock()
        var next = clock.now
        while !Task.isCancelled {
            next += .milliseconds(20)
            try? await Task.sleep(until: next, clock: clock)
            let (chunk, rate) = outbound.withLock { o -> ([Int16], Int) in
                let n = min(o.queue.count, o.rate / 50)
                let c = Array(o.queue.prefix(n))
                o.queue.removeFirst(n)
                return (c, o.rate)
            }
            if !chunk.isEmpty { sent.notify() }
            if clock.now - next > .milliseconds(200) { next = clock.now }
            guard !chunk.isEmpty, let type = AudioSocket.audioType(rate: rate) else { continue }
            guard channel.isActive else { return }
            if !channel.isWritable {
                // The caller reads nothing: this frame is dropped, not buffered without bound.
                server.metrics.answerDropped(route: route.name, messages: 1, seconds: Double(chunk.count) / Double(rate))
                continue
            }
            var payload = [UInt8](repeating: 0, count: chunk.count * 2)
            for (i, s) in chunk.enumerated() {
                let u = UInt16(bitPattern: s)
                payload[2 * i] = UInt8(u & 0xff)
                payload[2 * i + 1] = UInt8(u >> 8)
            }
            send(type, payload)
            server.metrics.answerSent(route: route.name, seconds: Double(chunk.count) / Double(rate))
        }
    }

    /// Pushes `.idle` after `idle_timeout_ms` without any message, `.maxDuration` at `max_duration_s` (``CallLimits``).
    private func watch() async {
        await CallLimits.watch(route: route, outbound: outbound, lastInput: \.lastInput, inbox: inbox, idle: .idle, maxDuration: .maxDuration)
    }
}

extension AudioSocket.Message {
    var kindName: String {
        switch self {
        case .hangup: "hangup (0x00)"
        case .uuid: "UUID (0x01)"
        case .dtmf: "DTMF (0x03)"
        case .audio: "audio"
        case .error: "error (0xff)"
        }
    }
}
