import BoundedTransport
import CoreNodes
import Foundation
import Logging
import NIOCore
import NIOSSL
import PipelineCore
import WSClient

/// One recognition stream against Tencent Cloud's real-time ASR WebSocket API (v2).
///
/// Audio is cut into ``TencentASRConfiguration/chunkMs`` binary messages and sent no faster than
/// real time (paced on the injected clock from the start of each connection); the end of input
/// sends `{"type": "end"}` and waits for `final: 1`. Results (`slice_type` 0/1/2) become
/// utterance start / partial / final results.
///
/// A dropped connection (or a retryable server code) is reported as an `error` result and
/// retried with backoff and a new voice id; audio arriving meanwhile is held in a bounded
/// ``TencentAudioBacklog`` (drops counted as `dropped_audio_ms`), and audio the server had not
/// finished recognizing is sent again, so a short outage loses no speech. Codes that a retry
/// cannot fix (parameters, credentials, account, audio format) are fatal.
///
/// Pauses: when no audio has come for ``TencentASRConfiguration/idleEnd`` (between utterances of
/// a VAD slicer, a muted microphone), the connection is ended cleanly — `{"type": "end"}`, the
/// final result — and the next audio opens a new connection. The service drops a connection that
/// receives no audio for 15 s (code 4008) and warns that gaps over 6 s may break recognition; a
/// quiet room therefore costs no errors and no billed silence.
package actor TencentASRSession {
    private enum Outcome: Sendable {
        case finished
        case serverError(code: Int, message: String)
        case closed(String)
    }

    private struct OpenUtterance {
        var index: Int
        var voiceID: String
        var seq: Int
        var text: String
        var startMs: Int64
        var endMs: Int64
    }

    package let config: TencentASRConfiguration
    package let results: ASRResults
    package let clock: any Clock<Duration>
    package let makePacer: @Sendable () -> Pacer
    package let logger: Logger
    package let count: @Sendable (String, UInt64) -> Void
    private let chunkSamples: Int
    private let rate: Int
    private let audioBell = TencentDoorbell()

    private var backlog: TencentAudioBacklog
    private var reconnect: TencentReconnectState
    private var carry: [Int16] = []
    private var carryStart: Int64 = 0
    private var inputEnded = false
    private var inputVoiceID: String?
    private var nextSeq = 0
    private var open: OpenUtterance?
    private var outcome: Outcome?
    private var accepted = false
    private var connectionVoiceID = ""
    private var endSent = false
    private var everSent = false
    private var idleEnded = false
    private let started = ContinuousClock.now

    /// Creates a session. `makePacer` makes a pacer whose time zero is now on `clock`;
    /// `count` adds to a node counter (`dropped_audio_ms`, `reconnects`).
    package init(config: TencentASRConfiguration, results: ASRResults, clock: any Clock<Duration>,
         makePacer: @escaping @Sendable () -> Pacer, logger: Logger,
         count: @escaping @Sendable (String, UInt64) -> Void = { _, _ in }) {
        self.config = config
        self.results = results
        self.clock = clock
        self.makePacer = makePacer
        self.logger = logger
        self.count = count
        rate = config.audioFormat.sampleRate
        chunkSamples = max(1, rate * config.chunkMs / 1000)
        backlog = TencentAudioBacklog(capacity: max(rate * config.maxHeldMs / 1000, rate / 10))
        reconnect = TencentReconnectState(policy: config.reconnect)
    }

    /// Recognizes `inputs` until they end and every result is delivered.
    package func run(inputs: ASRInputs) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await self.readInputs(inputs) }
            group.addTask { try await self.connectionLoop() }
            try await group.waitForAll()
        }
    }

    // MARK: input

    private func readInputs(_ inputs: ASRInputs) async throws {
        for await input in inputs {
            switch input {
            case .utteranceStart(let voiceID, _, _): inputVoiceID = voiceID
            case .utteranceEnd: inputVoiceID = nil
            case .audio(let a): append(a)
            }
        }
        flushCarry()
        inputEnded = true
        audioBell.ring()
    }

    private func append(_ a: ASRAudio) {
        var samples = a.samples
        if a.format.channels > 1 { samples = AudioConverter.remix(samples, from: a.format.channels, to: 1) }
        let start = a.pts * Int64(rate) / 1_000_000_000
        if !carry.isEmpty, carryStart + Int64(carry.count) != start, a.marks.discontinuity { flushCarry() }
        if carry.isEmpty { carryStart = start }
        carry += samples
        var offset = 0
        while carry.count - offset >= chunkSamples {
            queue(Array(carry[offset..<offset + chunkSamples]), at: carryStart + Int64(offset))
            offset += chunkSamples
        }
        if offset > 0 {
            carry.removeFirst(offset)
            carryStart += Int64(offset)
        }
        audioBell.ring()
    }

    private func flushCarry() {
        guard !carry.isEmpty else { return }
        queue(carry, at: carryStart)
        carryStart += Int64(carry.count)
        carry = []
    }

    private func queue(_ samples: [Int16], at start: Int64) {
        let dropped = backlog.append(.init(samples: samples, mediaStart: start))
        noteDropped(dropped)
    }

    private func noteDropped(_ samples: Int) {
        guard samples > 0 else { return }
        count("dropped_audio_ms", UInt64(samples * 1000 / rate))
        logger.warning("tencent: backlog full, dropped \(samples * 1000 / rate) ms of audio")
    }

    // MARK: connections

    private func connectionLoop() async throws {
        while true {
            // Connect only when there is audio to send: an idle connection times out (4008).
            while backlog.isEmpty && !inputEnded { await audioBell.wait(); try Task.checkCancellation() }
            if backlog.isEmpty && inputEnded && !everSent { return }
            let result = await connectOnce()
            try await closeOpenUtterance(asInterrupted: true)
            switch result {
            case .finished:
                if inputEnded && backlog.isEmpty { return }
                if idleEnded {
                    // Ended on a pause: the server recognized everything; wait for new audio.
                    backlog.connectionEnded()
                    everSent = false   // nothing outstanding: the end of input needs no connection
                    continue
                }
                // The server ended the stream early: go on with a new connection.
                try await retry(reason: "the server ended the stream before the audio did")
            case .serverError(let code, let message):
                let what = TencentServerMessage.describe(code: code)
                try await results.send(.error(code: "server_error_\(code)", message: "Tencent ASR error \(code): \(what) (\(TerminalText.escape(message)))",
                                              voiceID: flowVoiceID))
                if TencentServerMessage.isFatal(code: code) {
                    throw NodeError(NodeErrorCode("server_error_\(code)"), "Tencent ASR refused the connection with code \(code): \(what) (\(message))")
                }
                try await retry(reason: "server error \(code)")
            case .closed(let reason):
                try await retry(reason: reason)
            }
        }
    }

    /// The flow an error concerns: the open utterance, else the input's flow, else the connection.
    private var flowVoiceID: String? {
        open?.voiceID ?? inputVoiceID ?? (connectionVoiceID.isEmpty ? nil : connectionVoiceID)
    }

    private func retry(reason: String) async throws {
        try Task.checkCancellation()
        noteDropped(backlog.connectionLost())
        switch reconnect.connectionLost(at: ContinuousClock.now - started) {
        case .reconnect(let delay, let attempt):
            count("reconnects", 1)
            let ms = delay.components.seconds * 1000 + delay.components.attoseconds / 1_000_000_000_000_000
            logger.warning("tencent: \(reason); reconnecting in \(ms) ms (attempt \(attempt) of \(config.reconnect.maxAttempts))")
            try await results.send(.error(code: "reconnecting",
                                          message: "connection lost (\(reason)); reconnecting in \(ms) ms, attempt \(attempt) of \(config.reconnect.maxAttempts)",
                                          voiceID: flowVoiceID))
            try await clock.sleep(for: delay)
        case .giveUp(let attempts):
            throw NodeError(.connectionFailed, "Tencent ASR: \(reason); gave up after \(attempts) reconnection attempts")
        }
    }

    private func connectOnce() async -> Outcome {
        let voiceID = UUID().uuidString.lowercased()
        let now = Int(Date().timeIntervalSince1970)
        let request = config.request(voiceID: voiceID, timestamp: now, nonce: Int.random(in: 1...9_999_999_999))
        connectionVoiceID = voiceID
        outcome = nil
        accepted = false
        endSent = false
        idleEnded = false
        let acceptedBell = TencentDoorbell()
        logger.info("tencent: connecting to \(request.redactedURL)")
        var tls: TLSConfiguration?
        if config.endpoint.scheme == "wss" {
            var t = TLSConfiguration.makeClientConfiguration()
            if let ca = config.caFile { t.trustRoots = .file(ca) }   // a private CA instead of the system store
            tls = t
        }
        do {
            try await BoundedWebSocket.connect(
                url: request.url, configuration: .init(maxFrameSize: 1 << 20, closeTimeout: .seconds(2)), tlsConfiguration: tls,
                handshakeTimeout: config.handshakeTimeout, logger: logger
            ) { inbound, outbound, _ in
                try await withThrowingTaskGroup(of: Void.self) { group in
                    group.addTask { try await self.sendLoop(outbound, acceptedBell: acceptedBell) }
                    group.addTask { try await self.handshakeWatchdog(outbound) }
                    do {
                        for try await message in inbound.messages(maxSize: 1 << 20) {
                            guard case .text(let text) = message else { continue }
                            if await self.receive(text, acceptedBell: acceptedBell) { break }
                        }
                    } catch {
                        group.cancelAll()
                        throw error
                    }
                    group.cancelAll()
                    try? await outbound.close(.normalClosure, reason: nil)
                }
            }
        } catch is CancellationError {
            return outcome ?? .closed("cancelled")
        } catch {
            return outcome ?? .closed(Self.describe(error))
        }
        return outcome ?? .closed(accepted ? "the connection closed before the final result" : "the connection closed during the handshake")
    }

    /// Handles one server message; returns true when the connection is done.
    private func receive(_ text: String, acceptedBell: TencentDoorbell) async -> Bool {
        let m: TencentServerMessage
        do {
            m = try TencentServerMessage.parse(text)
        } catch {
            // A message that does not follow the protocol (not JSON, a `code` that is not an
            // integer, times out of range) is never taken for success: report it and drop the
            // connection, which the bounded reconnection policy then handles.
            let why: String
            if case DecodingError.dataCorrupted(let c) = error { why = c.debugDescription } else { why = "not a JSON object of the protocol" }
            let excerpt = TerminalText.escape(String(text.prefix(80)), keepNewlines: false)
            count("bad_server_messages", 1)
            try? await results.send(.error(code: "bad_server_message", message: "Tencent ASR sent a malformed message (\(why)): \(excerpt)",
                                           voiceID: flowVoiceID))
            outcome = .closed("the server sent a malformed message (\(why))")
            return true
        }
        if m.code != 0 {
            outcome = .serverError(code: m.code, message: m.message)
            return true
        }
        if !accepted {
            accepted = true
            reconnect.connected()
            acceptedBell.ring()
        }
        if let r = m.result {
            if r.sliceType == 2 { reconnect.progressed() }
            try? await handle(r)
        }
        if m.isFinal {
            try? await closeOpenUtterance(asInterrupted: false)
            outcome = .finished
            return true
        }
        return false
    }

    /// Closes a connection whose server never answers the handshake.
    private func handshakeWatchdog(_ outbound: WebSocketOutboundWriter) async throws {
        try await clock.sleep(for: config.handshakeTimeout)
        guard !accepted else { return }
        outcome = .closed("no answer to the handshake within \(config.handshakeTimeout)")
        try? await outbound.close(.goingAway, reason: "handshake timeout")
    }

    private func sendLoop(_ outbound: WebSocketOutboundWriter, acceptedBell: TencentDoorbell) async throws {
        while !accepted { await acceptedBell.wait(); try Task.checkCancellation() }
        let pacer = makePacer()
        while true {
            try Task.checkCancellation()
            if let chunk = backlog.next() {
                everSent = true
                // No faster than real time: a chunk leaves no earlier than its position on this connection.
                try await pacer.wait(until: .nanoseconds(MediaTime.nanos(samples: chunk.connectionStart, rate: rate)))
                var buffer = ByteBufferAllocator().buffer(capacity: chunk.samples.count * 2)
                for s in chunk.samples { buffer.writeInteger(s, endianness: .little) }
                try await outbound.write(.binary(buffer))
            } else if inputEnded {
                if !endSent {
                    // Let the last audio play out in real time before announcing the end.
                    try await pacer.wait(until: .nanoseconds(MediaTime.nanos(samples: backlog.connectionPosition, rate: rate)))
                    guard backlog.isEmpty else { continue }
                    try await outbound.write(.text(#"{"type": "end"}"#))
                    endSent = true
                }
                try await clock.sleep(for: config.finalTimeout)
                outcome = .closed("no final result within \(config.finalTimeout) after the end of the audio")
                try? await outbound.close(.normalClosure, reason: nil)
                return
            } else if idleEnded || config.idleEnd <= .zero {
                await audioBell.wait()
            } else if !(await audioOrTimeout(config.idleEnd)) && backlog.isEmpty && !inputEnded {
                // A pause: end this connection cleanly once the audio sent so far has played out.
                try await pacer.wait(until: .nanoseconds(MediaTime.nanos(samples: backlog.connectionPosition, rate: rate)))
                guard backlog.isEmpty, !inputEnded else { continue }
                logger.info("tencent: no audio for \(config.idleEnd); ending the connection until audio comes again")
                count("idle_ends", 1)
                idleEnded = true
                endSent = true
                try await outbound.write(.text(#"{"type": "end"}"#))
                try await clock.sleep(for: config.finalTimeout)
                outcome = .closed("no final result within \(config.finalTimeout) after ending an idle connection")
                try? await outbound.close(.normalClosure, reason: nil)
                return
            }
        }
    }

    /// Waits for audio (true) or for `timeout` to pass (false).
    private func audioOrTimeout(_ timeout: Duration) async -> Bool {
        let bell = audioBell
        let clock = self.clock
        return await withTaskGroup(of: Bool.self) { group in
            group.addTask { await bell.wait(); return !Task.isCancelled }
            group.addTask { (try? await clock.sleep(for: timeout)) == nil }
            let first = await group.next() ?? false
            group.cancelAll()
            return first
        }
    }

    // MARK: results

    private func mediaMs(_ connectionMs: Int64) -> Int64 {
        backlog.mediaPosition(connection: connectionMs * Int64(rate) / 1000) * 1000 / Int64(rate)
    }

    private func handle(_ r: TencentResult) async throws {
        if let o = open, o.index != r.index { try await closeOpenUtterance(asInterrupted: false) }
        if open == nil {
            let voiceID = inputVoiceID ?? "\(connectionVoiceID)-\(r.index)"
            open = OpenUtterance(index: r.index, voiceID: voiceID, seq: nextSeq, text: "", startMs: mediaMs(r.startTime), endMs: mediaMs(r.endTime))
            nextSeq += 1
            try await results.send(.utteranceStart(voiceID: voiceID, seq: open!.seq))
        }
        guard var o = open else { return }
        o.text = r.text
        o.endMs = max(o.startMs, mediaMs(r.endTime))
        open = o
        // Word times count from the sentence's start on this connection.
        let sentenceStart = mediaMs(r.startTime)
        let words = r.words.map { w in
            ASRWord(word: w.word, startMs: sentenceStart + w.startTime, endMs: sentenceStart + max(w.startTime, w.endTime), stable: w.stable)
        }
        let transcript = ASRTranscript(text: r.text, voiceID: o.voiceID, seq: o.seq, startMs: o.startMs, endMs: o.endMs, words: words)
        switch r.sliceType {
        case 2:
            try await results.send(.final(transcript))
            try await results.send(.utteranceEnd(voiceID: o.voiceID, seq: o.seq))
            backlog.confirm(through: r.endTime * Int64(rate) / 1000)
            open = nil
        default:
            if !r.text.isEmpty { try await results.send(.partial(transcript)) }
        }
    }

    /// Ends an open utterance: with its last text when the server moved on, with an empty
    /// text when the connection broke (its audio is sent again on the next connection).
    private func closeOpenUtterance(asInterrupted interrupted: Bool) async throws {
        guard let o = open else { return }
        open = nil
        let t = ASRTranscript(text: interrupted ? "" : o.text, voiceID: o.voiceID, seq: o.seq, startMs: o.startMs, endMs: o.endMs)
        try await results.send(.final(t))
        try await results.send(.utteranceEnd(voiceID: o.voiceID, seq: o.seq))
    }

    package static func describe(_ error: any Error) -> String {
        if let e = error as? WebSocketClientError { return "WebSocket: \(e)" }
        if let e = error as? NIOSSLError { return "TLS: \(e)" }
        if let e = error as? BoringSSLError { return "TLS: \(e)" }
        return String(describing: error)
    }
}
