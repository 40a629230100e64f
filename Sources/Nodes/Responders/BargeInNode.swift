import PipelineCore

/// `barge-in`: follows a spoken conversation from its nodes' events — the VAD's, the recognizer's,
/// the responder's, the synthesizer's and the loudspeaker's — and does two things with them.
///
/// **Barge-in.** While an answer is under way (a `chat`/`webhook` request in flight, `tts` speaking,
/// or its audio still playing), speech from the person that lasts `min_speech_ms` (counted from its
/// onset, using the VAD's `speech_ms`) — and, when `min_words` > 0, a transcript with that many
/// words — sends `barge_in` on `interrupt`. Linked to the sink's, the synthesizer's and the
/// responder's `interrupt` inputs, it stops playback, synthesis and the request at once. Shorter
/// speech (a cough, a knock, the answer's own echo left over by the canceller) ends before the
/// threshold and is only counted (`ignored_speech`). The sink's `interrupted` event (what was
/// actually played) is passed on on `interrupt` too, so the responder keeps only that in its history.
///
/// **Latency.** For each turn — the end of the person's speech to the first sample of the answer
/// leaving the loudspeaker — a `latency` event with `total_ms` and its stages: `endpoint_ms` (end of
/// speech → the VAD's decision, its hang-over included), `asr_ms` (→ final transcript), `respond_ms`
/// (→ the first sentence reaching `tts`), `tts_ms` (→ its first audio reaching the sink) and
/// `playback_ms` (the audio queued ahead of it in the sink and device). A stage whose events never
/// came is `null`.
///
/// ```yaml
/// turns: { type: barge-in, min_speech_ms: 120 }
/// links:
///   - vad.events -> turns
///   - asr.events -> turns
///   - chat.events -> turns
///   - tts.events -> turns
///   - speaker.events -> turns
///   - turns.interrupt -> speaker.interrupt
///   - turns.interrupt -> tts.interrupt
///   - turns.interrupt -> chat.interrupt
/// ```
public actor BargeInNode: Node {
    let minSpeechMs: Int
    let minWords: Int
    let tailMs: Int

    /// The answer under way.
    private var requests = 0
    private var speaking = 0
    private var answerStart: Double?
    private var answerAudioMs: Int64 = 0
    /// Speech heard while an answer is under way, not yet decided.
    private var pending: (id: Int, mediaMs: Int64, speechMs: Int64, since: Double)?
    private var pendingID = 0
    private var words = 0
    /// Events of the turn being measured.
    private var turn = TurnTimes()

    struct TurnTimes {
        var speechEnd: Double?
        var endOfSpeech: Double?
        var final: Double?
        var ttsStart: Double?
        var measured = false
    }

    init(configuration c: Configuration) {
        minSpeechMs = c.minSpeechMs
        minWords = c.minWords
        tailMs = c.tailMs
    }

    public func run(_ context: NodeContext) async throws {
        let pacer = context.makePacer()
        try await withThrowingTaskGroup(of: Void.self) { group in
            for await frame in context.input() {
                guard let event = frame.event else { continue }
                let now = event.ts ?? (pacer.elapsed / .seconds(1))
                if let wait = try await observe(event, at: now, context: context) {
                    let id = pendingID
                    group.addTask {
                        try? await context.clock.sleep(for: .milliseconds(wait))
                        try await self.timerFired(id, context: context)
                    }
                }
            }
            group.cancelAll()
        }
    }

    /// True while an answer is requested, spoken or playing.
    private func active(at now: Double) -> Bool {
        if requests > 0 || speaking > 0 { return true }
        guard let start = answerStart else { return false }
        return now < start + Double(answerAudioMs + Int64(tailMs)) / 1000
    }

    /// Takes one event; returns a delay (ms) after which a pending barge-in is to be decided.
    private func observe(_ e: Event, at now: Double, context: NodeContext) async throws -> Int? {
        switch e.name {
        case .speechStart:
            guard active(at: now), pending == nil else { return nil }
            pendingID += 1
            words = 0
            let speech = e["speech_ms"]?.intValue ?? 0
            pending = (pendingID, e["media_ms"]?.intValue ?? 0, speech, now)
            let wait = Int64(minSpeechMs) - speech
            if wait <= 0 && minWords == 0 {
                try await fire(context: context, now: now)
                return nil
            }
            return wait > 0 ? Int(wait) : nil
        case .speechEnd:
            if pending != nil {
                pending = nil
                context.count("ignored_speech")
            }
            let silence = Double(e["silence_ms"]?.intValue ?? 0) / 1000
            turn = TurnTimes(speechEnd: now, endOfSpeech: now - silence)
        case .transcript:
            let text = e["text"]?.stringValue ?? ""
            if pending != nil, minWords > 0 {
                words = max(words, text.split(whereSeparator: { $0.isWhitespace }).count)
                if let p = pending, words >= minWords, (now - p.since) * 1000 + Double(p.speechMs) >= Double(minSpeechMs) {
                    try await fire(context: context, now: now)
                }
            }
            if e["final"]?.boolValue == true, !text.trimmingCharacters(in: .whitespaces).isEmpty, turn.final == nil {
                turn.final = now
            }
        case .responseStart:
            requests += 1
            answerStart = nil
            answerAudioMs = 0
        case .responseEnd, .error:
            requests = max(0, requests - 1)
        case .ttsStart:
            speaking += 1
            if turn.final != nil, turn.ttsStart == nil { turn.ttsStart = now }
        case .ttsEnd:
            speaking = max(0, speaking - 1)
            if e["interrupted"]?.boolValue != true { answerAudioMs += e["duration_ms"]?.intValue ?? 0 }
        case .playbackStart:
            let delay = e["delay_ms"]?.intValue
            if answerStart == nil { answerStart = now + Double(delay ?? 0) / 1000 }
            if turn.final != nil, !turn.measured {
                turn.measured = true
                try await report(playbackAt: now, delayMs: delay, context: context)
            }
        case .interrupted:
            answerStart = nil
            answerAudioMs = 0
            // The responder keeps only what was played.
            try await context.output("interrupt").send(.event(Event(.interrupted, fields: e.fields)))
        default:
            break
        }
        return nil
    }

    private func timerFired(_ id: Int, context: NodeContext) async throws {
        guard let p = pending, p.id == id, minWords == 0 || words >= minWords else { return }
        try await fire(context: context, now: nil)
    }

    /// Interrupts the answer.
    private func fire(context: NodeContext, now: Double?) async throws {
        guard let p = pending else { return }
        pending = nil
        context.count("barge_ins")
        let fields: [(String, EventValue)] = [("media_ms", .int(p.mediaMs)), ("min_speech_ms", .int(Int64(minSpeechMs)))]
        try await context.output("interrupt").send(.event(Event(.bargeIn, fields: fields)))
        try await context.emit(.bargeIn, fields)
    }

    private func report(playbackAt: Double, delayMs: Int64?, context: NodeContext) async throws {
        func ms(_ a: Double?, _ b: Double?) -> EventValue {
            guard let a, let b else { return .null }
            return .int(Int64(((b - a) * 1000).rounded()))
        }
        let audible = playbackAt + Double(delayMs ?? 0) / 1000
        let t = turn
        let fields: [(String, EventValue)] = [
            ("total_ms", ms(t.endOfSpeech ?? t.final, audible)),
            ("endpoint_ms", ms(t.endOfSpeech, t.speechEnd)),
            ("asr_ms", ms(t.speechEnd, t.final)),
            ("respond_ms", ms(t.final, t.ttsStart)),
            ("tts_ms", ms(t.ttsStart, playbackAt)),
            ("playback_ms", delayMs.map { .int($0) } ?? .null),
        ]
        context.count("turns")
        try await context.emit(.latency, fields)
    }

    /// Configuration of `barge-in`.
    public struct Configuration: NodeConfiguration {
        public var minSpeechMs: Int
        public var minWords: Int
        public var tailMs: Int

        public static let parameters: [ParamSpec] = [
            ParamSpec("min_speech_ms", .int(0...10_000), default: 120,
                      doc: "speech (from its onset) that interrupts an answer; shorter sounds are ignored"),
            ParamSpec("min_words", .int(0...100), default: 0,
                      doc: "also require a transcript (partial or final) with this many words before interrupting (0: speech alone)"),
            ParamSpec("tail_ms", .int(0...10_000), default: 300,
                      doc: "an answer counts as playing this long after its audio's expected end"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "barge-in", summary: "Interrupts an answer when the person speaks over it (min_speech_ms, min_words); a latency event per turn",
        family: "services",
        inputs: [PortSpec("in", [.event], doc: "events of the vad, asr, chat/webhook, tts and the sink (links fan in)")],
        outputs: [PortSpec("interrupt", [.event], doc: "barge_in decisions and the sink's interrupted: link to the sink's, tts's and chat's interrupt"),
                  .events],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in BargeInNode(configuration: c) })
}
