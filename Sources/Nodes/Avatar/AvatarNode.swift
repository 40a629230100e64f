import DigitalHuman
import Foundation
import Logging
import PipelineCore

/// `avatar`: drives a Tencent interactive digital human from audio slices or text.
///
/// When the pipeline starts it creates a session (`newsession`), waits until it is ready, starts
/// it and emits `avatar_session` with the play address; it then opens the command channel and
/// sends:
/// - `SEND_AUDIO` from the `in` port (16 kHz mono; driver types `audio` and `voice` only), cut into
///   `packet_bytes` packets (6,400 bytes = 200 ms), paced at real time, `IsFinal: true` on the
///   packet that ends an utterance (the slicer's last slice, or the VAD's speech end);
/// - `SEND_TEXT` for each text frame of the `text` port (e.g. the `asr` node's `text` output);
/// - `SEND_HEARTBEAT` every `heartbeat_s`;
/// - with `barge_in: true`, an interrupting empty text when a frame of `in` is marked speech start.
///
/// Server pushes become `avatar_status` (`speak_start` / `speak_over`), `avatar_text` (input,
/// speech, risk and discarded texts) and `error` events. The session is closed at end of stream,
/// on shutdown, on cancellation and on failure. Connect at least one of `in` and `text`.
public actor AvatarNode: Node {
    let settings: AvatarSettings

    init(settings: AvatarSettings) {
        self.settings = settings
    }

    public func run(_ context: NodeContext) async throws {
        let s = settings
        // Credentials from the environment are secrets too: kept out of events and logs.
        context.secrets.add(s.api.appkey)
        context.secrets.add(s.api.accessToken)
        let client: IVHClient
        do {
            client = try IVHClient(s.api)
        } catch let e as IVHError {
            throw NodeError(NodeErrorCode(e.stableCode), e.description)
        }
        var session: IVHSession?
        var failure: (any Error)?
        do {
            let request = s.newSession
            let created = try await Self.shielded { try await client.newSession(request) }
            session = created
            context.logger.info("avatar session \(created.id) created (status \(created.statusName))")
            let ready = try await waitUntilReady(created, client: client, context: context)
            session = ready
            try await waitForStart(context)
            try await client.startSession(ready.id)
            if s.spaceParam != nil || s.imageParam != nil {
                try await client.configureSession(ready.id, spaceParam: s.spaceParam, imageParam: s.imageParam)
            }
            try? await context.emit(.avatarSession, [
                ("state", "open"), ("session_id", .string(ready.id)), ("play_url", .string(ready.playURL)),
                ("protocol", .string(s.newSession.protocolName)), ("driver_type", .string("\(s.newSession.driverType)")),
            ])
            try await drive(ready, client: client, context: context)
        } catch {
            failure = error
        }
        if let id = session?.id {
            let timeout = s.closeTimeout
            let closed = await Self.shieldedResult { try await client.closeSession(id, timeout: timeout) }
            switch closed {
            case .success:
                context.logger.info("avatar session \(id) closed")
                try? await context.emit(.avatarSession, [("state", "closed"), ("session_id", .string(id))])
            case .failure(let e as IVHError) where e.code.map(IVHCommandChannel.fatalCodes.contains) == true:
                try? await context.emit(.avatarSession, [("state", "closed"), ("session_id", .string(id))])
            case .failure(let e):
                context.logger.error("closing avatar session \(id) failed: \(e)")
                try? await context.emitError(code: (e as? IVHError)?.stableCode ?? "ivh_close_failed", message: "closing session \(id) failed: \(e)")
            }
        }
        _ = await Self.shieldedResult { try await client.shutdown() }
        guard let failure else { return }
        if failure is CancellationError { return }
        if let e = failure as? IVHError { throw NodeError(NodeErrorCode(e.stableCode), e.description) }
        throw failure
    }

    /// Runs `operation` in a task of its own, so that cancelling the caller (pipeline abort) does
    /// not cut short a request whose outcome must be known (creating and closing the session).
    /// The operation's own timeout bounds the wait.
    static func shielded<T: Sendable>(_ operation: @escaping @Sendable () async throws -> T) async throws -> T {
        try await Task { try await operation() }.value
    }

    static func shieldedResult(_ operation: @escaping @Sendable () async throws -> Void) async -> Result<Void, any Error> {
        await Task { try await operation() }.result
    }

    /// Waits before startsession: for the first frame on `start` when it is linked (the SDK starts
    /// once the player shows its first frame), or `start_delay_ms`, whichever comes first.
    private func waitForStart(_ context: NodeContext) async throws {
        let delay = settings.startDelay
        let linked = context.connectedInputs.contains("start")
        guard linked || delay > .zero else { return }
        try await withThrowingTaskGroup(of: Void.self) { group in
            if linked {
                group.addTask {
                    for await _ in context.input("start") { return }
                    // The start input ended without a frame: wait for the delay, if any, alone.
                    if delay > .zero { try await context.clock.sleep(for: delay) }
                }
            }
            if delay > .zero { group.addTask { try await context.clock.sleep(for: delay) } }
            try await group.next()
            group.cancelAll()
        }
        context.logger.info("starting the avatar session")
    }

    /// Polls `statsession` until the session is running (status 1).
    private func waitUntilReady(_ created: IVHSession, client: IVHClient, context: NodeContext) async throws -> IVHSession {
        var current = created
        let pacer = context.makePacer()
        while current.status == 3 {
            if context.isStopping { throw CancellationError() }
            if pacer.elapsed > settings.readyTimeout {
                throw IVHError(.transport, "session \(created.id) not ready after \(settings.readyTimeout)", operation: "statsession")
            }
            try await context.clock.sleep(for: settings.pollInterval)
            let status = try await client.status(created.id)
            current = IVHSession(id: created.id, status: status.status, playURL: status.playURL.isEmpty ? current.playURL : status.playURL)
        }
        guard current.status == 1 else {
            throw IVHError(.badResponse, "session \(created.id) is \(current.statusName), not running", operation: "newsession")
        }
        return current
    }

    private enum Finished: Sendable { case channel, heartbeat, inputs, drainTimeout }

    /// Opens the command channel and feeds it until the inputs end and what was queued is sent.
    private func drive(_ session: IVHSession, client: IVHClient, context: NodeContext) async throws {
        let s = settings
        let gate = DrivingGate(packetBytes: s.packetBytes, clock: context.clock)
        let observer = IVHChannelObserver(
            push: { push, raw in
                await gate.observe(push, details: IVHPush.details(raw))
                await Self.report(push, raw: raw, context: context)
            },
            connected: { n in
                if n > 0 { context.count("reconnects") }
                try? await context.emit(.avatarChannel, [("state", "connected"), ("reconnects", .int(Int64(n)))])
            },
            disconnected: { reason in
                try? await context.emit(.avatarChannel, [("state", "disconnected"), ("reason", .string(reason))])
            },
            sent: { command in
                switch command {
                case .audio(_, _, let pcm, _): context.count("audio_packets"); context.count("audio_bytes", by: UInt64(pcm.count))
                case .text: context.count("texts")
                case .heartbeat: context.count("heartbeats")
                }
            })
        let channel = IVHCommandChannel(
            sessionID: session.id, url: { client.commandChannelURL(sessionID: session.id) }, tls: try s.api.tlsConfiguration(),
            clock: context.clock, heldPackets: s.heldPackets, maxFailures: s.maxReconnects, logger: context.logger, observer: observer)

        try await withThrowingTaskGroup(of: Finished.self) { group in
            group.addTask { try await channel.run(); return .channel }
            group.addTask {
                while true {
                    try await context.clock.sleep(for: s.heartbeat)
                    await channel.send(.heartbeat)
                }
            }
            group.addTask {
                try await self.feed(channel, gate: gate, context: context)
                channel.finish()
                return .inputs
            }
            while let done = try await group.next() {
                switch done {
                case .channel, .drainTimeout:
                    if done == .drainTimeout {
                        let left = channel.queue.count
                        context.count("drain_timeouts")
                        context.logger.warning("command channel did not drain in time; \(left) commands not sent")
                        try? await context.emitError(code: "avatar_drain_timeout",
                                                     message: "the command channel did not drain in time: \(left) commands not sent")
                    }
                    group.cancelAll()
                    let dropped = channel.queue.dropped
                    if dropped > 0 {
                        try? await context.emitError(code: "avatar_audio_dropped",
                                                     message: "\(dropped) audio packets dropped while the command channel was down")
                    }
                    return
                case .inputs:
                    group.addTask { try await context.clock.sleep(for: s.drainTimeout); return .drainTimeout }
                case .heartbeat:
                    continue
                }
            }
        }
    }

    /// Reads both inputs until they end.
    private func feed(_ channel: IVHCommandChannel, gate: DrivingGate, context: NodeContext) async throws {
        let s = settings
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                var warned = false
                for await frame in context.input("in") {
                    if frame.marks.speechStart && s.bargeIn {
                        await channel.send(.text("", interrupt: true), front: true)
                        await gate.interrupted()
                        context.count("barge_ins")
                    }
                    guard s.newSession.driverType.acceptsAudio, let audio = frame.audio else { continue }
                    guard audio.format.sampleRate == 16000, audio.format.channels == 1 else {
                        if !warned {
                            warned = true
                            try? await context.emitError(code: "unsupported_format", message: "avatar needs 16 kHz mono audio, got \(audio.format); audio dropped")
                        }
                        continue
                    }
                    let ends = frame.marks.slice.map(\.isLast) ?? frame.marks.speechEnd
                    let wasMuted = await gate.isMuted
                    for packet in await gate.audio(AudioPacketizer.bytes(audio.samples), endsUtterance: ends) {
                        let dropped = await channel.send(packet)
                        if dropped > 0 { context.count("dropped_packets", by: UInt64(dropped)) }
                    }
                    if wasMuted { context.count("muted_audio_ms", by: UInt64(audio.samples.count / 16)) }
                }
                for packet in await gate.endAudioTurn() {
                    let dropped = await channel.send(packet)
                    if dropped > 0 { context.count("dropped_packets", by: UInt64(dropped)) }
                }
            }
            group.addTask {
                for await frame in context.input("text") {
                    let text = frame.text ?? frame.event?["text"]?.stringValue ?? ""
                    guard !text.trimmingCharacters(in: .whitespacesAndNewlines).isEmpty else { continue }
                    // An audio turn in progress ends (IsFinal) before a text is sent.
                    for packet in await gate.endAudioTurn() { await channel.send(packet) }
                    await channel.send(.text(text, interrupt: s.interruptText))
                }
            }
        }
    }

    /// Turns a server push into events: every documented field reaches an event; a push of a
    /// type without an event of its own becomes `avatar_push` with the whole payload.
    static func report(_ push: IVHPush, raw: String = "", context: NodeContext) async {
        let details = IVHPush.details(raw)
        func extra(_ keys: [String]) -> [(String, EventValue)] {
            keys.compactMap { k in details[k].map { (k, $0) } }
        }
        switch push {
        case .inputText(let t):
            try? await context.emit(.avatarText, [("kind", "input"), ("text", .string(t))]
                                    + extra(["interrupt_result", "interrupt_message", "req_id"]))
        case .speechText(let t, let id):
            try? await context.emit(.avatarText, [("kind", "speech"), ("text", .string(t)), ("speech_id", id.map { .int(Int64($0)) } ?? .null)]
                                    + extra(["text_pro", "uninterrupt", "muted", "chat_status", "req_id"]))
            if case .string(let type)? = details["interaction_type"], !type.isEmpty {
                let kinds = ["BubbleInfo": "tips", "Image": "image", "Video": "video", "Popup": "popup", "OptionInfo": "options"]
                try? await context.emit(.avatarInteraction, [("kind", .string(kinds[type] ?? type)), ("interaction_type", .string(type)),
                                                                ("content", details["interaction_content"] ?? .null),
                                                                ("speech_id", id.map { .int(Int64($0)) } ?? .null)])
            }
            if case .int(4)? = details["chat_status"] {
                try? await context.emit(.avatarStatus, [("status", "script_ended"), ("speech_id", id.map { .int(Int64($0)) } ?? .null)])
            }
        case .speakStatus(let status, let id):
            try? await context.emit(.avatarStatus, [("status", .string(status)), ("speech_id", id.map { .int(Int64($0)) } ?? .null)])
        case .riskNotice(let t):
            try? await context.emit(.avatarText, [("kind", "risk"), ("text", .string(t))])
        case .discardedText(let t):
            try? await context.emit(.avatarText, [("kind", "discarded"), ("text", .string(t))])
        case .error(let code, let message):
            let e = IVHError(.api(code), message, operation: "commandchannel")
            try? await context.emitError(code: e.stableCode, message: e.description)
        case .other(let type):
            let all = IVHPush.details(raw, includePayload: true)
            try? await context.emit(.avatarPush, [("type", type.map { .int(Int64($0)) } ?? .null), ("payload", all["payload"] ?? .null)])
        }
    }
}
