import Foundation
import PipelineCore

/// `engine: whisper`: OpenAI's Whisper through whisper.cpp, in the process (16 kHz mono).
///
/// The model is loaded once per process and shared by every node and session that names the same
/// file; decoding runs on the model's bounded pool of decoder threads (``WhisperDecoderPool``).
/// Each utterance is decoded whole when it ends (the final, with word timings); while it goes on,
/// the growing utterance is decoded every `partial_interval_ms` of new audio for a partial — one
/// at a time per node, greedy, on one segment — and a final never waits for a partial.
public struct WhisperEngine: ASREngine {
    let model: WhisperModel
    let request: WhisperRequest
    let partialIntervalMs: Int64
    let partials: Bool
    let earlyFinals: Bool

    /// Quiet audio after speech that starts decoding the final ahead of the utterance's end (when no other
    /// final waits: a final ahead goes after finals and before partials, and is promoted to a final when its
    /// utterance ends; when speech resumes it is cancelled, and aborted if it runs).
    static let earlyFinalPauseMs: Int64 = 100

    public var segmentsUnmarkedAudio: Bool { false }

    /// What the main loop hands the sender, in order.
    private enum Outgoing: Sendable {
        case now(ASRResult)
        case final(Task<[ASRResult], Never>)
    }

    private final class PartialBox: Sendable {
        let state = LockedValue(PartialState())
    }

    /// The utterance partials may still report on.
    private struct PartialState {
        var openSeq: Int?
        var inFlight = false
        var lastText = ""
        /// When the last partial's decoding ended and what it cost: the next one waits at least as
        /// long, so partials keep a decoder busy at most half the time.
        var lastEnded: ContinuousClock.Instant?
        var lastCost: Duration = .zero
    }

    public func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws {
        let session = model.pool.newSession()
        let (outgoing, send) = AsyncStream<Outgoing>.makeStream()
        let partialState = PartialBox()
        let pool = model.pool
        let request = self.request
        let quick = { var q = request; q.quick = true; q.beamSize = 1; return q }()

        try await withThrowingTaskGroup(of: Void.self) { group in
            // The sender: results in the order the main loop produced them; a final's place in the
            // order is taken when its utterance ends, its content when its decoding is done.
            group.addTask {
                for await item in outgoing {
                    switch item {
                    case .now(let result): try await results.send(result)
                    case .final(let task):
                        // A cancelled node (a session gone, a stop past its drain time) gives up its
                        // waiting decodings instead of holding the pool.
                        let finals = await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
                        for result in finals { try await results.send(result) }
                    }
                }
            }
            defer { send.finish() }

            var current: (voiceID: String, seq: Int, startMs: Int64)?
            var samples: [Float] = []
            var endMs: Int64 = 0
            var sincePartial: Int64 = 0
            var voicedSincePartial = false
            // Set when the partial due now was skipped (counted once, tried again with the next audio).
            var partialSkipped = false
            var pause = PauseTracker()
            var utteranceWallStart = ContinuousClock.now
            // A final decoded ahead, from the start of a pause in which the utterance may end: used when
            // the utterance does end with no more speech, dropped (cancelled) when speech resumes.
            var early: (samples: Int, id: UInt64, task: Task<WhisperDecoding?, any Error>)?
            for await input in inputs {
                switch input {
                case .utteranceStart(let voiceID, let seq, let startMs):
                    current = (voiceID, seq, startMs)
                    utteranceWallStart = ContinuousClock.now
                    samples.removeAll(keepingCapacity: true)
                    endMs = startMs
                    sincePartial = 0
                    voicedSincePartial = false
                    pause = PauseTracker()
                    early?.task.cancel()
                    early = nil
                    partialState.state.withLock { $0.openSeq = seq; $0.lastText = "" }
                    send.yield(.now(.utteranceStart(voiceID: voiceID, seq: seq)))
                case .audio(let audio):
                    guard let utterance = current else { continue }
                    let first = samples.count
                    samples.reserveCapacity(samples.count + audio.samples.count)
                    for s in audio.samples { samples.append(Float(s) * (1.0 / 32768.0)) }
                    endMs = audio.endMs
                    let durationMs = audio.endMs - audio.startMs
                    sincePartial += durationMs
                    if pause.push(samples[first...], durationMs: durationMs) {
                        voicedSincePartial = true
                        early?.task.cancel()
                        early = nil
                    } else if earlyFinals, early == nil, pause.quietMs >= Self.earlyFinalPauseMs, pause.heardSpeech, pool.takesAhead {
                        let audio = samples
                        let id = pool.newRequestID()
                        early = (samples.count, id, Task { try await pool.decode(audio, request: request, priority: .ahead, session: session, id: id) })
                    }
                    // Partials use spare decoding time only (a free thread, nothing waiting), and only for
                    // audio that arrives at about real time: a file read as fast as it decodes has a
                    // listener for its finals, not for guesses on the way.
                    let mediaMs = endMs - utterance.startMs
                    let wall = (ContinuousClock.now - utteranceWallStart).components
                    let wallMs = wall.seconds * 1000 + wall.attoseconds / 1_000_000_000_000_000
                    guard partials, sincePartial >= partialIntervalMs, voicedSincePartial, mediaMs <= wallMs * 3 / 2 + 500 else { continue }
                    // Finals first: a partial is skipped (and counted) while a final waits, the decoders are
                    // behind, or other processes leave no core for it.
                    guard pool.hasFreeThread else {
                        if !partialSkipped { context.count("whisper_partials_skipped") }
                        partialSkipped = true
                        continue
                    }
                    partialSkipped = false
                    let start = partialState.state.withLock { state -> Bool in
                        if state.inFlight { return false }
                        if let ended = state.lastEnded, ContinuousClock.now - ended < state.lastCost { return false }
                        state.inFlight = true
                        return true
                    }
                    guard start else { continue }
                    sincePartial = 0
                    voicedSincePartial = false
                    // At most the last 30 s (one Whisper window) for a partial.
                    let snapshot = Array(samples.suffix(16000 * 30))
                    let partialEnd = endMs
                    let snapshotStartMs = partialEnd - Int64(snapshot.count) / 16
                    let logger = context.logger
                    group.addTask {
                        let started = ContinuousClock.now
                        let decoding = try? await pool.decode(snapshot, request: quick, priority: .partial, session: session)
                        if let decoding {
                            logger.trace("whisper: partial of \(utterance.voiceID): \(snapshot.count / 16) ms decoded in \(Int(decoding.decodeMs)) ms, audio_ctx \(decoding.audioContext)")
                        }
                        partialState.state.withLock { state in
                            state.inFlight = false
                            state.lastEnded = ContinuousClock.now
                            state.lastCost = decoding.map { .milliseconds($0.decodeMs) } ?? state.lastEnded! - started
                            guard state.openSeq == utterance.seq, let decoding else { return }
                            // A partial whose decoding failed a check (a loop in a short context) is not shown.
                            if let guarded = decoding.guarded {
                                logger.debug("whisper: partial of \(utterance.voiceID) not shown: check \(guarded) tripped")
                                return
                            }
                            let text = Self.text(decoding)
                            guard !text.isEmpty, text != state.lastText else { return }
                            state.lastText = text
                            // Yielded under the lock the final's end takes: a partial is never sent after its final.
                            send.yield(.now(.partial(ASRTranscript(text: text, voiceID: utterance.voiceID, seq: utterance.seq,
                                                                    startMs: max(utterance.startMs, snapshotStartMs), endMs: partialEnd,
                                                                    language: decoding.language))))
                        }
                    }
                case .utteranceEnd:
                    guard let utterance = current else { continue }
                    current = nil
                    let audio = samples
                    let utteranceEnd = endMs
                    let logger = context.logger
                    let counters = context
                    let ahead = early?.task
                    if let early { pool.promote(early.id) }
                    early = nil
                    if ahead != nil { context.count("whisper_early_finals") }
                    let task = Task<[ASRResult], Never> {
                        var out: [ASRResult] = []
                        var transcript = ASRTranscript(text: "", voiceID: utterance.voiceID, seq: utterance.seq,
                                                       startMs: utterance.startMs, endMs: utteranceEnd)
                        do {
                            let decoding: WhisperDecoding?
                            if let ahead {
                                decoding = try await ahead.value
                            } else {
                                decoding = try await pool.decode(audio, request: request, priority: .final, session: session)
                            }
                            if let decoding {
                                logger.debug("whisper: utterance \(utterance.voiceID): \(audio.count / 16) ms decoded in \(Int(decoding.decodeMs)) ms after \(Int(decoding.queuedMs)) ms queued, audio_ctx \(decoding.audioContext), mean log p \(String(format: "%.2f", decoding.meanLogProbability))\(decoding.retries.isEmpty ? "" : " after retries (\(decoding.retries.joined(separator: ", ")))")\(ahead != nil ? " (ahead)" : "")")
                                for turnedDown in decoding.rejected {
                                    logger.debug("whisper: utterance \(utterance.voiceID): turned down: \(turnedDown)")
                                }
                                if decoding.unsureKept {
                                    logger.debug("whisper: utterance \(utterance.voiceID): unsure at two reduced contexts; kept the second (mean log p \(String(format: "%.2f", decoding.meanLogProbability))) instead of the whole window")
                                    counters.count("whisper_unsure_kept")
                                }
                                if let reason = decoding.loopCut {
                                    logger.debug("whisper: utterance \(utterance.voiceID): the sentence was said over (\(reason)); kept its first copy")
                                    counters.count("whisper_loops_cut")
                                }
                                for reason in decoding.retries {
                                    counters.count("whisper_retries")
                                    counters.count("whisper_guard_" + reason)
                                }
                                if !decoding.retries.isEmpty, decoding.audioContext >= WhisperAudioContext.window {
                                    counters.count("whisper_full_window_retries")
                                }
                                transcript.decodeMs = Int64(decoding.decodeMs.rounded())
                                transcript.queuedMs = Int64(decoding.queuedMs.rounded())
                                transcript.text = Self.text(decoding)
                                transcript.language = decoding.language
                                if !transcript.text.isEmpty {
                                    transcript.words = Self.words(decoding, offsetMs: utterance.startMs)
                                }
                            }
                        } catch is CancellationError {
                        } catch {
                            logger.error("whisper: utterance \(utterance.voiceID): \(error)")
                            out.append(.error(code: "decode_failed", message: "\(error)", voiceID: utterance.voiceID))
                        }
                        out.append(.final(transcript))
                        out.append(.utteranceEnd(voiceID: utterance.voiceID, seq: utterance.seq))
                        return out
                    }
                    partialState.state.withLock { state in
                        state.openSeq = nil
                        send.yield(.final(task))
                    }
                }
            }
            early?.task.cancel()
            send.finish()
            try await group.waitForAll()
        }
    }

    /// Tells speech from the quiet that may end an utterance: a chunk is voiced when its level is within
    /// 30 dB of the loudest chunk so far (or above -40 dBFS). Only quiet that low lets a final decoded
    /// ahead stand for the utterance, so a soft last word is not cut off; in a noisy room the quiet never
    /// comes and finals are decoded when the utterance ends.
    struct PauseTracker {
        private(set) var peak: Float = 0
        private(set) var quietMs: Int64 = 0
        private(set) var heardSpeech = false

        /// Adds a chunk; true when it is voiced.
        mutating func push(_ chunk: ArraySlice<Float>, durationMs: Int64) -> Bool {
            guard !chunk.isEmpty else { return false }
            var energy: Float = 0
            for x in chunk { energy += x * x }
            let rms = (energy / Float(chunk.count)).squareRoot()
            peak = max(peak, rms)
            if rms >= min(max(peak * 0.03, 0.001), 0.01) {
                quietMs = 0
                heardSpeech = true
                return true
            }
            quietMs += durationMs
            return false
        }
    }

    /// The decoding's text: segments joined, without the bracketed non-speech tags Whisper writes for
    /// silence, music or noise (`[BLANK_AUDIO]`, `(music)`).
    static func text(_ decoding: WhisperDecoding) -> String {
        let parts = decoding.segments.map { $0.text.trimmingCharacters(in: .whitespacesAndNewlines) }.filter { !$0.isEmpty && !isNonSpeechTag($0) }
        return ASRNode.join(parts)
    }

    static func isNonSpeechTag(_ text: String) -> Bool {
        guard let first = text.first, let last = text.last else { return false }
        return (first == "[" && last == "]") || (first == "(" && last == ")") || (first == "*" && last == "*" && text.count > 1)
    }

    /// Words from the tokens' times: a token whose text begins with a space starts a word; in scripts
    /// written without spaces each token is a word. Times are media milliseconds.
    static func words(_ decoding: WhisperDecoding, offsetMs: Int64) -> [ASRWord] {
        var out: [ASRWord] = []
        for segment in decoding.segments where !isNonSpeechTag(segment.text.trimmingCharacters(in: .whitespaces)) {
            var bytes: [UInt8] = []
            var t0: Int64 = -1
            var t1: Int64 = -1
            func flush() {
                let word = String(decoding: bytes, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
                if !word.isEmpty, t0 >= 0 {
                    out.append(ASRWord(word: word, startMs: offsetMs + t0 * 10, endMs: offsetMs + max(t0, t1) * 10, stable: true))
                }
                bytes = []
                t0 = -1
            }
            for token in segment.tokens {
                let startsWord = token.bytes.first == 0x20
                let complete = String(validating: bytes, as: UTF8.self) != nil
                let spaceless = complete && !bytes.isEmpty && (String(decoding: bytes, as: UTF8.self).unicodeScalars.last.map(isSpacelessScript) ?? false)
                if startsWord || spaceless { flush() }
                if t0 < 0 { t0 = max(token.t0, 0) }
                t1 = max(token.t1, t1)
                bytes += token.bytes
            }
            flush()
        }
        return out
    }

    /// Scripts written without spaces between words (CJK ideographs, kana, Thai, ...).
    static func isSpacelessScript(_ scalar: Unicode.Scalar) -> Bool {
        switch scalar.value {
        case 0x3040...0x30FF, 0x3400...0x4DBF, 0x4E00...0x9FFF, 0xF900...0xFAFF, 0x0E00...0x0E7F, 0x20000...0x2FA1F: return true
        default: return false
        }
    }

    /// The `asr` node parameters of `engine: whisper`.
    public struct Configuration: ASREngineConfiguration {
        /// The ggml model file; nil = `VOICEPIPE_WHISPER_MODEL`, then the installed tiny.en.
        public var model: String?
        /// `auto` or a Whisper language code; nil = `auto` (English-only models: `en`).
        public var language: String?
        /// Threads per decoding; nil = 1.
        public var threads: Int?
        /// Beam search width; nil or 1 = greedy.
        public var beamSize: Int?
        /// Text that conditions the decoder (names, spelling, style).
        public var initialPrompt: String?
        /// Translate into English instead of transcribing.
        public var translate: Bool?
        /// Decoder threads shared by everything that uses the model; nil = cores / threads.
        public var decoders: Int?
        /// Encoder frames to run: `auto` (sized to the utterance; the default), `full` (the 30 s window) or a number.
        public var audioCtx: String?

        /// The parameters that only `engine: whisper` uses (`language` is shared with pocketsphinx).
        public static let parameters = [
            ParamSpec("model", .path, doc: "whisper: ggml model file (default $VOICEPIPE_WHISPER_MODEL, then .deps/whisper/models/ggml-tiny.en.bin from scripts/install-whisper.sh)"),
            ParamSpec("language", .string, doc: "whisper: `auto` (detect; the default) or a language code (en, zh, de, ...); English-only models take en"),
            ParamSpec("threads", .int(1...64), doc: "whisper: threads per decoding (default 1: several utterances decode side by side on the pool's threads; more threads shorten one decoding on an idle machine, but whisper.cpp's OpenMP threads wait on each other badly when other work shares the cores)"),
            ParamSpec("beam_size", .int(1...16), doc: "whisper: beam search width for finals (default 1: greedy; partials are always greedy)"),
            ParamSpec("initial_prompt", .string, doc: "whisper: text that conditions the decoder: names, spellings, punctuation style"),
            ParamSpec("translate", .bool, doc: "whisper: translate into English instead of transcribing (multilingual models)"),
            ParamSpec("audio_ctx", .string, doc: "whisper: encoder frames (20 ms each) a decoding runs: `auto` (the default: the utterance's length plus 1.3 s, decoded again with a larger context, then the whole window, when the result looks like a loop), `full` (Whisper's whole 30 s window, always) or a number of frames (1...1500; longer utterances get more)"),
            ParamSpec("decoders", .int(1...64), doc: "whisper: decoding threads shared by every asr node and session using the model (default: cores / threads, at least 1; the pool only grows)"),
        ]

        /// The model file to use, given the graph's environment variables.
        public func resolvedModel(_ environment: [String: String]) -> String? { WhisperFiles.model(model, environment) }

        /// Threads per decoding.
        public var resolvedThreads: Int { threads ?? 1 }

        /// Missing or malformed model, unknown language, a language or translation the model cannot do.
        public func problems() -> [String] { problems(environment: [:]) }

        public func problems(environment: [String: String]) -> [String] {
            var problems: [String] = []
            if WhisperAudioContext(parameter: audioCtx) == nil {
                problems.append("whisper: audio_ctx '\(audioCtx ?? "")': expected auto, full or a number of encoder frames in 1...\(WhisperAudioContext.window) (Whisper's window is \(WhisperAudioContext.window) frames of 20 ms)")
            }
            if let language, language != "auto", !WhisperLanguages.codes.contains(language) {
                let near = WhisperLanguages.codes.filter { $0.hasPrefix(language.prefix(1).lowercased()) }.prefix(8)
                problems.append("whisper: unknown language '\(language)'; use auto or a Whisper language code (\(near.isEmpty ? "en, zh, de, es, fr, ja" : near.joined(separator: ", ")), ...)")
            }
            guard let path = resolvedModel(environment) else {
                problems.append("whisper: no model: set model, or VOICEPIPE_WHISPER_MODEL, or run scripts/install-whisper.sh (looked in \(WhisperFiles.modelSearch))")
                return problems
            }
            if let problem = WhisperFiles.modelProblem(path) {
                problems.append("whisper: " + problem)
            } else if WhisperFiles.isEnglishOnly(path) {
                if let language, language != "auto", language != "en" {
                    problems.append("whisper: model \(path) is English-only and cannot recognize language '\(language)'; use a multilingual model (ggml-tiny.bin, ggml-base.bin, ...)")
                }
                if translate == true {
                    problems.append("whisper: model \(path) is English-only and cannot translate; use a multilingual model")
                }
            }
            return problems
        }
    }

    /// Engine registration.
    public static let descriptor = ASREngineDescriptor(
        name: "whisper", summary: "OpenAI Whisper in the process (whisper.cpp ggml models, many languages, one model shared by all sessions)",
        configuration: Configuration.self,
        make: { c, node, env in
            guard let path = WhisperFiles.model(c.model, env.variables) else {
                throw NodeError(.whisperModel, "node '\(env.id)': no whisper model: set model, or VOICEPIPE_WHISPER_MODEL, or run scripts/install-whisper.sh")
            }
            try WhisperLibrary.load(env.variables, logger: env.logger)
            let model = try WhisperModel.shared(path: path)
            let threads = c.resolvedThreads
            model.pool.ensureWorkers(c.decoders ?? max(1, ProcessInfo.processInfo.activeProcessorCount / threads))
            var language = c.language ?? "auto"
            if !model.multilingual { language = "en" }
            guard let audioContext = WhisperAudioContext(parameter: c.audioCtx) else {
                throw NodeError(.whisperModel, "node '\(env.id)': whisper audio_ctx '\(c.audioCtx ?? "")': expected auto, full or 1...\(WhisperAudioContext.window)")
            }
            if model.audioContextFrames != WhisperAudioContext.window {
                throw NodeError(.whisperModel, "node '\(env.id)': whisper model \(path) has an audio context of \(model.audioContextFrames) frames; voicepipe sizes contexts for Whisper's \(WhisperAudioContext.window)")
            }
            let request = WhisperRequest(threads: threads, beamSize: c.beamSize ?? 1, translate: c.translate ?? false, language: language,
                                         initialPrompt: c.initialPrompt, wordTimestamps: true, quick: false, audioContext: audioContext)
            return WhisperEngine(model: model, request: request, partialIntervalMs: Int64(node.partialIntervalMs), partials: true,
                                 earlyFinals: true)
        })
}

extension WhisperFiles {
    /// True when the ggml header's vocabulary is the English-only one (51864 tokens).
    static func isEnglishOnly(_ path: String) -> Bool {
        guard let handle = FileHandle(forReadingAtPath: path), let head = try? handle.read(upToCount: 8), head.count == 8 else { return false }
        try? handle.close()
        return head.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4, as: Int32.self) } == 51864
    }
}

/// Whisper's language codes, in its own order.
enum WhisperLanguages {
    static let codes: [String] = """
        en zh de es ru ko fr ja pt tr pl ca nl ar sv it id hi fi vi he uk el ms cs ro da hu ta no th ur hr bg lt la mi ml cy sk \
        te fa lv bn sr az sl kn et mk br eu is hy ne mn bs kk sq sw gl mr pa si km sn yo so af oc ka be tg sd gu am yi lo uz fo \
        ht ps tk nn mt sa lb my bo tl mg as tt haw ln ha ba jw su yue
        """.split(separator: " ").map(String.init)
}
