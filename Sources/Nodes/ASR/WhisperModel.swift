import CWhisper
import Foundation
import Logging
import PipelineCore

/// Where `engine: whisper` finds whisper.cpp's library and its default model.
///
/// The library: `VOICEPIPE_WHISPER_LIBRARY`, then `.deps/whisper/lib/libwhisper.so.1` (what
/// `scripts/install-whisper.sh` installs) in the working directory and above the running executable,
/// then the dynamic loader's search path. The model: the node's `model`, then
/// `VOICEPIPE_WHISPER_MODEL`, then `.deps/whisper/models/ggml-tiny.en.bin`.
enum WhisperFiles {
    static let libraryName = "libwhisper.so.1"
    static let defaultModel = "models/ggml-tiny.en.bin"

    /// Project-local prefixes to look in.
    static var prefixes: [String] { ProjectDependencies.prefixes("whisper") }

    /// The library file to load, or the bare name for the dynamic loader: `VOICEPIPE_WHISPER_LIBRARY`, then
    /// the build made for this machine (`native/lib`, scripts/build-whisper-native.sh) when this CPU has
    /// every feature it was built for, then the wheel's (`lib`).
    static func library(_ variables: [String: String]) -> String { librarySelection(variables).path }

    /// The library to load and, when a machine build was passed over, why.
    static func librarySelection(_ variables: [String: String]) -> (path: String, note: String?) {
        if let env = variables["VOICEPIPE_WHISPER_LIBRARY"], !env.isEmpty { return (env, nil) }
        var note: String?
        for p in prefixes where FileManager.default.fileExists(atPath: p + "/native/lib/" + libraryName) {
            let missing = missingFeatures(builtFor: p + "/native/FEATURES")
            if missing.isEmpty { return (p + "/native/lib/" + libraryName, nil) }
            note = "whisper: the machine build in \(p)/native was made for CPU features this CPU lacks (\(missing.joined(separator: ", "))); using the wheel's library (scripts/build-whisper-native.sh --force rebuilds it)"
        }
        for p in prefixes where FileManager.default.fileExists(atPath: p + "/lib/" + libraryName) { return (p + "/lib/" + libraryName, note) }
        return (libraryName, note)
    }

    /// This CPU's feature flags (`/proc/cpuinfo`).
    static let cpuFlags: Set<String> = {
        guard let text = try? String(contentsOfFile: "/proc/cpuinfo", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("flags") }),
              let colon = line.firstIndex(of: ":") else { return [] }
        return Set(line[line.index(after: colon)...].split(separator: " ").map(String.init))
    }()

    /// The features named in a build's FEATURES file ("whisper.cpp from pywhispercpp 1.5.1 for: avx avx2 ...")
    /// that this CPU does not list; every feature when the file cannot be read.
    static func missingFeatures(builtFor file: String) -> [String] {
        guard let text = try? String(contentsOfFile: file, encoding: .utf8), let colon = text.lastIndex(of: ":") else {
            return ["(unreadable \(file))"]
        }
        let wanted = text[text.index(after: colon)...].split(whereSeparator: { $0 == " " || $0 == "\n" }).map { String($0) }
        guard !cpuFlags.isEmpty else { return [] }
        return wanted.filter { !cpuFlags.contains($0.replacingOccurrences(of: ".", with: "_")) }
    }

    /// The instruction sets whisper.cpp's system information says the library uses, by this CPU's flag
    /// names, which the CPU does not list (the library would stop the process with SIGILL).
    static func claimedButMissing(systemInfo: String) -> [String] {
        guard !cpuFlags.isEmpty else { return [] }
        let names = ["AVX": "avx", "AVX2": "avx2", "FMA": "fma", "F16C": "f16c", "AVX512": "avx512f", "AVX512_VBMI": "avx512vbmi",
                     "AVX512_VNNI": "avx512_vnni", "AVX512_BF16": "avx512_bf16", "AVX_VNNI": "avx_vnni", "AMX_INT8": "amx_int8", "BMI2": "bmi2"]
        var missing: [String] = []
        for part in systemInfo.split(separator: "|") {
            let kv = part.split(separator: "=").map { $0.trimmingCharacters(in: .whitespaces) }
            guard kv.count == 2, kv[1] == "1", let flag = names[kv[0]] else { continue }
            if !cpuFlags.contains(flag) { missing.append(kv[0]) }
        }
        return missing
    }

    /// The model file: `explicit` when given, else the environment's, else the installed default.
    static func model(_ explicit: String?, _ variables: [String: String]) -> String? {
        if let explicit, !explicit.isEmpty { return explicit }
        if let env = variables["VOICEPIPE_WHISPER_MODEL"], !env.isEmpty { return env }
        return prefixes.map { $0 + "/" + defaultModel }.first { FileManager.default.fileExists(atPath: $0) }
    }

    /// Where a missing default model was looked for.
    static var modelSearch: String {
        (["$VOICEPIPE_WHISPER_MODEL"] + prefixes.map { $0 + "/" + defaultModel }).joined(separator: ", ")
    }

    /// What is wrong with a model file, read from its header without loading it; nil when it looks
    /// like a whisper.cpp ggml model.
    static func modelProblem(_ path: String) -> String? {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else {
            return "whisper model \(path) does not exist; scripts/install-whisper.sh installs one, README \"Whisper models\" says where to get others"
        }
        if isDirectory.boolValue {
            return "whisper model \(path) is a directory; give the ggml .bin file (a CTranslate2 directory converts with scripts/whisper-ct2-to-ggml.py)"
        }
        guard let handle = FileHandle(forReadingAtPath: path) else { return "whisper model \(path) is not readable" }
        defer { try? handle.close() }
        let head = (try? handle.read(upToCount: 48)) ?? Data()
        guard head.count >= 48 else { return "whisper model \(path) is too short (\(head.count) bytes) to be a ggml model" }
        let magic = head.prefix(4).withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        if magic == 0x4655_4747 { // "GGUF"
            return "whisper model \(path) is a GGUF file; whisper.cpp reads its own ggml format (ggml-*.bin)"
        }
        guard magic == 0x6767_6d6c else { // "ggml", little-endian
            return "whisper model \(path) is not a whisper.cpp ggml model (it starts with \(head.prefix(4).map { String(format: "%02x", $0) }.joined()), not 'lmgg')"
        }
        let fields = (0..<11).map { i in head.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4 + 4 * i, as: Int32.self) } }
        let (vocab, audioCtx, mels) = (fields[0], fields[1], fields[9])
        guard (51_000...52_000).contains(vocab), audioCtx == 1500, mels == 80 || mels == 128 else {
            return "whisper model \(path) has a ggml header but not a Whisper model's (vocabulary \(vocab), audio context \(audioCtx), \(mels) mel bands)"
        }
        return nil
    }
}

/// whisper.cpp's library, loaded once per process.
public enum WhisperLibrary {
    /// Call before the process exits: decodings still running are aborted and waited for (up to 30 s),
    /// so that exit's handlers do not tear ggml down under them (a run that fails while the model's first
    /// decoding is under way would otherwise crash on its way out). Harmless when Whisper was never loaded.
    public static func finishBeforeExit() {
        vp_whisper_finish()
    }

    private static let loaded = LockedValue<String?>(nil)

    /// Loads the library (once); throws naming the file and what went wrong.
    static func load(_ variables: [String: String], logger: Logger? = nil) throws {
        try loaded.withLock { (state: inout String?) throws in
            if state != nil { return }
            let (path, note) = WhisperFiles.librarySelection(variables)
            if let note { logger?.info("\(note)") }
            var message = [CChar](repeating: 0, count: 512)
            guard vp_whisper_load(path, &message, message.count) == 0 else {
                let why = cString(message)
                throw NodeError(.whisperLibraryMissing,
                                "asr engine whisper needs whisper.cpp's libwhisper, which could not be loaded from \(path) (\(why)); run scripts/install-whisper.sh, or set VOICEPIPE_WHISPER_LIBRARY to a libwhisper.so.1")
            }
            let info = String(cString: vp_whisper_system_info()).trimmingCharacters(in: .whitespacesAndNewlines)
            let missing = WhisperFiles.claimedButMissing(systemInfo: info)
            guard missing.isEmpty else {
                throw NodeError(.whisperLibraryMissing,
                                "\(path) is built for CPU features this CPU lacks (\(missing.joined(separator: ", "))): it would stop the process; run scripts/build-whisper-native.sh --force, or set VOICEPIPE_WHISPER_LIBRARY to the wheel's .deps/whisper/lib/libwhisper.so.1")
            }
            logger?.debug("whisper: \(path) (whisper.cpp \(String(cString: vp_whisper_version()))), CPU features: \(info)")
            state = path
        }
    }
}

/// A loaded Whisper model: the weights, shared read-only by every decoder in the process.
final class WhisperModel: @unchecked Sendable {
    /// whisper.cpp's context; after loading it is only read (decoders keep their own state).
    let pointer: OpaquePointer
    let path: String
    let multilingual: Bool
    let type: String
    /// Encoder frames in the model's window (1500 for Whisper's 30 s).
    let audioContextFrames: Int
    /// Decoding threads for this model.
    let pool: WhisperDecoderPool

    private init(pointer: OpaquePointer, path: String) {
        self.pointer = pointer
        self.path = path
        multilingual = vp_whisper_model_is_multilingual(pointer) != 0
        type = String(cString: vp_whisper_model_type(pointer))
        audioContextFrames = Int(vp_whisper_model_n_audio_ctx(pointer))
        pool = WhisperDecoderPool(name: (path as NSString).lastPathComponent, context: pointer)
    }

    private static let models = LockedValue<[String: WhisperModel]>([:])

    /// The model in `path`, loaded on first use and then shared (keyed by the file's real path).
    /// Models stay loaded for the life of the process, so sessions that come and go reuse them.
    static func shared(path: String) throws -> WhisperModel {
        if let problem = WhisperFiles.modelProblem(path) { throw NodeError(.whisperModel, problem) }
        let key = (try? FileManager.default.destinationOfSymbolicLink(atPath: path)).map {
            $0.hasPrefix("/") ? $0 : ((path as NSString).deletingLastPathComponent as NSString).appendingPathComponent($0)
        } ?? URL(fileURLWithPath: path).standardizedFileURL.resolvingSymlinksInPath().path
        return try models.withLock { (models: inout [String: WhisperModel]) throws -> WhisperModel in
            if let model = models[key] { return model }
            var message = [CChar](repeating: 0, count: 512)
            guard let pointer = vp_whisper_model_load(key, &message, message.count) else {
                throw NodeError(.whisperModel, "cannot load whisper model \(path): \(cString(message))")
            }
            let model = WhisperModel(pointer: pointer, path: key)
            models[key] = model
            return model
        }
    }

    /// The number of distinct models loaded (for tests and metrics).
    static var loadedCount: Int { models.withLock { $0.count } }
}

/// What one decoding asks for.
struct WhisperRequest: Sendable {
    var threads: Int
    var beamSize: Int
    var translate: Bool
    var language: String
    var initialPrompt: String?
    var wordTimestamps: Bool
    /// Partials: one segment, no timestamps, a bounded number of tokens, one try.
    var quick: Bool
    /// How much of the encoder's window to run.
    var audioContext: WhisperAudioContext = .auto
}

/// One decoded token.
struct WhisperToken: Sendable {
    var bytes: [UInt8]
    var probability: Float
    /// Centiseconds from the start of the decoded audio.
    var t0: Int64
    var t1: Int64
}

/// One decoded segment.
struct WhisperSegment: Sendable {
    var text: String
    var t0: Int64
    var t1: Int64
    var noSpeech: Float
    var tokens: [WhisperToken]
    /// Every token the segment took, timestamps and control tokens included (what the token bound counts).
    var rawTokenCount: Int = 0
}

/// What a decoding produced.
struct WhisperDecoding: Sendable {
    var segments: [WhisperSegment]
    var language: String?
    /// Wall time the decoder spent, every try included, in milliseconds.
    var decodeMs: Double
    /// Wall time the request waited for a decoder, in milliseconds.
    var queuedMs: Double = 0
    /// The encoder frames of the kept try (1500: the whole window).
    var audioContext: Int = WhisperAudioContext.window
    /// The checks that tripped on earlier tries (``WhisperGuard``), in order; empty when the first try stood.
    var retries: [String] = []
    /// Set when a final said its one sentence over and over and was cut to its first copy (the check that
    /// tripped); the cut text passed every check.
    var loopCut: String?
    /// Set when two reduced contexts were both unsure (confidence only) and the second, at least as sure as the
    /// first, was kept instead of decoding the whole window.
    var unsureKept = false
    /// The tries a check turned down, for the debug log: context, check, cost and the start of their text.
    var rejected: [String] = []
    /// Set on a partial whose only try failed a check: it is not shown.
    var guarded: String?

    /// The mean natural log of the text tokens' probabilities (0 when there are none): how sure the decoder
    /// was of what it wrote.
    var meanLogProbability: Double {
        let p = segments.flatMap(\.tokens).map { Double(max($0.probability, 1e-9)) }
        return p.isEmpty ? 0 : p.reduce(0) { $0 + log($1) } / Double(p.count)
    }
}

/// A bounded pool of decoder threads for one model.
///
/// Every `asr` node and `serve` session that uses the model submits its utterances here; each thread
/// owns one whisper.cpp decoder state (its buffers) and decodes one request at a time, so memory and
/// threads grow with the pool, not with the number of sessions. Which request runs where, which partial
/// gives way to a final and which waiting partial is answered with nothing are ``WhisperSchedule``'s
/// rules; the pool is its storage: the schedule under a lock, a mailbox per thread, and the actions the
/// schedule returns carried out after the lock is released. Partials start only as far as other
/// processes leave cores free (``CoreBudget``); finals use every decoder thread.
final class WhisperDecoderPool: @unchecked Sendable {
    typealias Priority = WhisperSchedule<Job>.Priority

    /// A request: what to decode, and whom to answer.
    final class Job: Sendable {
        let samples: [Float]
        let request: WhisperRequest
        let continuation: CheckedContinuation<WhisperDecoding?, any Error>
        let enqueued = ContinuousClock.now
        init(samples: [Float], request: WhisperRequest, continuation: CheckedContinuation<WhisperDecoding?, any Error>) {
            self.samples = samples
            self.request = request
            self.continuation = continuation
        }
    }

    /// One decoder thread: its inbox (the next request the schedule gave it, with its threads: one at a time,
    /// taken with the runtime's blocking receive) and its abort flag, set by other threads and polled by
    /// whisper.cpp, both through atomic accessors (vp_whisper_flag_set/get).
    private final class Worker: @unchecked Sendable {
        let index: Int
        let abort = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        let inbox = Handoff<(entry: WhisperSchedule<Job>.Entry, threads: Int)>(capacity: 1, overflow: .suspend)
        init(index: Int) {
            self.index = index
            abort.initialize(to: 0)
        }
        func setAbort(_ value: Bool) { vp_whisper_flag_set(abort, value ? 1 : 0) }
    }

    let name: String
    /// The model's whisper.cpp context (never freed: models live as long as the process).
    private let context: OpaquePointer
    let budget: CoreBudget
    private let schedule = LockedValue(WhisperSchedule<Job>())
    /// The decoder threads, by index (appended under `schedule`'s lock, read without it once started).
    private let workers = LockedValue<[Worker]>([])
    private let ids = LockedValue<UInt64>(0)

    init(name: String, context: OpaquePointer, budget: CoreBudget = .shared) {
        self.name = name
        self.context = context
        self.budget = budget
    }

    private func nextID() -> UInt64 { ids.withLock { $0 += 1; return $0 } }

    /// A new session key.
    func newSession() -> UInt64 { nextID() }

    /// A new request key, for a final decoded ahead that ``promote(_:)`` may later name.
    func newRequestID() -> UInt64 { nextID() }

    /// The utterance of the final decoded ahead as request `id` ended: if it still waits, it waits as a final.
    func promote(_ id: UInt64) {
        let allowed = budget.decodersAllowed
        perform(update { $0.promote(id: id, allowed: allowed) })
    }

    /// True when no final waits: a final decoded ahead delays no one's final.
    var takesAhead: Bool { schedule.withLock { $0.takesAhead } }

    /// Grows the pool to at least `count` threads (it never shrinks).
    func ensureWorkers(_ count: Int) {
        let allowed = budget.decodersAllowed
        let (added, actions) = schedule.withLock { s -> ([Worker], [WhisperSchedule<Job>.Action]) in
            let added = workers.withLock { w -> [Worker] in
                var added: [Worker] = []
                while w.count < count {
                    let worker = Worker(index: w.count)
                    w.append(worker)
                    added.append(worker)
                }
                return added
            }
            let actions = s.addWorkers(upTo: count, allowed: allowed)
            setFlags(actions)
            return (added, actions)
        }
        for worker in added {
            let thread = Thread { [self] in self.loop(worker) }
            thread.name = "whisper-\(worker.index + 1)"
            thread.stackSize = 1 << 23
            thread.start()
        }
        perform(actions)
    }

    /// True when a thread is free within the budget and nothing waits: a partial started now delays no one.
    var hasFreeThread: Bool {
        let allowed = budget.decodersAllowed
        return schedule.withLock { $0.hasFreeThread(allowed: allowed) }
    }

    /// Threads in the pool.
    var workerCount: Int { workers.withLock { $0.count } }

    /// Decodes `samples`; nil when a partial was replaced by a newer one or aborted for a final.
    /// Cancelling the calling task removes the job, or aborts it if it is running.
    func decode(_ samples: [Float], request: WhisperRequest, priority: Priority, session: UInt64, id given: UInt64? = nil) async throws -> WhisperDecoding? {
        let id = given ?? nextID()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<WhisperDecoding?, any Error>) in
                if Task.isCancelled {
                    continuation.resume(throwing: CancellationError())
                    return
                }
                let entry = WhisperSchedule<Job>.Entry(id: id, session: session, priority: priority, threads: request.threads,
                                                       job: Job(samples: samples, request: request, continuation: continuation))
                let allowed = budget.decodersAllowed
                perform(update { $0.submit(entry, allowed: allowed) })
            }
        } onCancel: {
            perform(update { $0.cancel(id: id) })
        }
    }

    /// Changes the schedule, and sets the decoder threads' abort flags as it says while still under its lock: a
    /// flag set later could reach the next request the thread took meanwhile.
    private func update(_ change: (inout WhisperSchedule<Job>) -> [WhisperSchedule<Job>.Action]) -> [WhisperSchedule<Job>.Action] {
        schedule.withLock { s in
            let actions = change(&s)
            setFlags(actions)
            return actions
        }
    }

    private func setFlags(_ actions: [WhisperSchedule<Job>.Action]) {
        guard actions.contains(where: { if case .answerNothing = $0 { false } else if case .cancelled = $0 { false } else { true } }) else { return }
        let threads = workers.withLock { $0 }
        for action in actions {
            switch action {
            case .start(let worker, _, _): threads[worker].setAbort(false)
            case .abort(let worker): threads[worker].setAbort(true)
            case .answerNothing, .cancelled: break
            }
        }
    }

    /// Carries out the schedule's actions that wake threads or answer callers (outside its lock).
    private func perform(_ actions: [WhisperSchedule<Job>.Action]) {
        guard !actions.isEmpty else { return }
        let threads = workers.withLock { $0 }
        for action in actions {
            switch action {
            case .start(let worker, let entry, let n):
                // Never waits: the schedule starts one request on a thread only after the last one ended.
                threads[worker].inbox.trySend((entry, n))
            case .abort:
                break
            case .answerNothing(let entry):
                entry.job.continuation.resume(returning: nil)
            case .cancelled(let entry):
                entry.job.continuation.resume(throwing: CancellationError())
            }
        }
    }

    private func loop(_ worker: Worker) {
        // The decoder's buffers are made, and ggml's lazily built objects with a first decoding of 1 s
        // of silence, before the first request: it does not wait for them, and the process can exit
        // safely from then on (see voicepipe_whisper.c).
        var state: OpaquePointer? = vp_whisper_state_new(context)
        if let state {
            let silence = [Float](repeating: 0, count: 16000)
            var error = [CChar](repeating: 0, count: 256)
            var warmup = vp_whisper_request(n_threads: 1, beam_size: 1, translate: false, language: nil, initial_prompt: nil,
                                            token_timestamps: false, no_timestamps: true, single_segment: true, max_tokens: 1,
                                            temperature_fallback: false, abort_flag: nil, audio_ctx: 64)
            _ = "en".withCString { language in
                warmup.language = language
                return silence.withUnsafeBufferPointer { vp_whisper_run(context, state, &warmup, $0.baseAddress, Int32($0.count), &error, error.count) }
            }
        }
        while true {
            guard let (entry, threads) = worker.inbox.receiveBlocking()?.element else { return }
            let taken = entry.job
            var result: Result<WhisperDecoding?, any Error>
            if state == nil { state = vp_whisper_state_new(context) }
            if let state {
                let queued = ContinuousClock.now - taken.enqueued
                result = Result {
                    var decoding = try run(taken, threads: threads, state: state, abort: worker.abort)
                    decoding.queuedMs = Double(queued.components.seconds) * 1000 + Double(queued.components.attoseconds) / 1e15
                    return decoding
                }
            } else {
                result = .failure(NodeError(.whisperState, "whisper.cpp could not allocate a decoder for \(name) (out of memory?)"))
            }
            let allowed = budget.decodersAllowed
            var ending = WhisperSchedule<Job>.Ending.completed
            let actions = update { s in
                let (e, actions) = s.finished(worker: worker.index, allowed: allowed)
                ending = e
                return actions
            }
            if ending == .aborted, case .failure = result { result = entry.priority == .partial ? .success(nil) : .failure(CancellationError()) }
            taken.continuation.resume(with: result)
            perform(actions)
        }
    }

    /// Decodes a job: with the first context of its ladder, then, for a final whose result fails a check,
    /// with the next, up to the whole window. A partial gets one try.
    private func run(_ job: Job, threads: Int, state: OpaquePointer, abort: UnsafeMutablePointer<Int32>) throws -> WhisperDecoding {
        let started = ContinuousClock.now
        let durationMs = job.samples.count / 16
        let ladder = job.request.audioContext.ladder(samples: job.samples.count)
        var retries: [String] = []
        var rejected: [String] = []
        var decoding = WhisperDecoding(segments: [], language: nil, decodeMs: 0)
        // The mean log-probability of the last rung when it failed only the confidence check.
        var unsure: Double?
        for (index, audioContext) in ladder.enumerated() {
            let tryStarted = ContinuousClock.now
            decoding = try runOnce(job, threads: threads, audioContext: audioContext, durationMs: durationMs, state: state, abort: abort)
            decoding.audioContext = audioContext
            let last = index == ladder.count - 1
            guard !last else { break }
            let text = decoding.segments.map(\.text).joined(separator: " ")
            let failure = WhisperGuard.failure(text: text, tokensPerSegment: decoding.segments.map(\.rawTokenCount),
                                               durationMs: durationMs, meanLogProbability: decoding.meanLogProbability)
            guard let failure else { break }
            if job.request.quick {
                decoding.guarded = failure
                break
            }
            // A sentence said over: its first copy stands when it passes the checks on its own.
            if failure == "repetition" || failure == "token_limit" || failure == "length", let cut = Self.firstSentence(of: decoding),
               cut.meanLogProbability >= WhisperGuard.loopCutConfidence,
               WhisperGuard.failure(text: cut.segments.map(\.text).joined(separator: " "), tokensPerSegment: cut.segments.map(\.rawTokenCount),
                                    durationMs: durationMs, meanLogProbability: cut.meanLogProbability) == nil {
                decoding = cut
                decoding.loopCut = failure
                break
            }
            // Unsure twice: two reduced contexts that fail only the confidence check, the second at least as sure as
            // the first, keep the second instead of paying for the whole window (about ten times a reduced
            // context's cost, and measured no surer on the same audio: -0.65 and -0.53 where 512 frames already
            // had the words right). A decoding that loops, runs long or compresses still goes on to the window.
            if failure == "confidence", index == 1, ladder[index + 1] >= WhisperAudioContext.window,
               let previous = unsure, decoding.meanLogProbability >= previous {
                decoding.unsureKept = true
                break
            }
            unsure = failure == "confidence" ? decoding.meanLogProbability : nil
            retries.append(failure)
            let cost = (ContinuousClock.now - tryStarted).components
            let tokens = decoding.segments.map(\.rawTokenCount).reduce(0, +)
            rejected.append("audio_ctx \(audioContext): \(failure) after \(cost.seconds * 1000 + cost.attoseconds / 1_000_000_000_000_000) ms, "
                            + "\(tokens) tokens, mean log p \(String(format: "%.2f", decoding.meanLogProbability)), \"\(text.trimmingCharacters(in: .whitespaces).prefix(120))\"")
        }
        let elapsed = ContinuousClock.now - started
        decoding.decodeMs = Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15
        decoding.retries = retries
        decoding.rejected = rejected
        return decoding
    }

    /// The decoding cut after the first copy of a sentence it said over and over (``WhisperGuard/sentenceSaidOver(_:)``),
    /// or nil: one segment only, its text and tokens cut at the first copy's end.
    static func firstSentence(of decoding: WhisperDecoding) -> WhisperDecoding? {
        guard decoding.segments.count == 1, let segment = decoding.segments.first,
              let end = WhisperGuard.sentenceSaidOver(segment.text) else { return nil }
        var kept: [WhisperToken] = []
        var bytes = 0
        for token in segment.tokens {
            guard bytes + token.bytes.count <= end else { break }
            bytes += token.bytes.count
            kept.append(token)
        }
        guard !kept.isEmpty else { return nil }
        var cut = decoding
        cut.segments[0].text = String(decoding: Array(segment.text.utf8).prefix(end), as: UTF8.self)
        cut.segments[0].tokens = kept
        // The kept text tokens and the control tokens around them (start, timestamps, end).
        cut.segments[0].rawTokenCount = kept.count + 3
        return cut
    }

    private func runOnce(_ job: Job, threads: Int, audioContext: Int, durationMs: Int, state: OpaquePointer,
                         abort: UnsafeMutablePointer<Int32>) throws -> WhisperDecoding {
        let r = job.request
        var error = [CChar](repeating: 0, count: 512)
        // The token bound applies to a reduced context only, greedy at temperature 0: a loop there is caught by
        // the checks and decoded again with a larger context. The whole window, the last resort, decodes as
        // Whisper does (higher temperatures when the result looks like a loop).
        // A partial is always bounded: a loop there would cost as much as several finals.
        let maxTokens = r.quick || audioContext < WhisperAudioContext.window ? WhisperGuard.maxTokens(durationMs: durationMs) : 0
        let rc: Int32 = r.language.withCString { language in
            withOptionalCString(r.initialPrompt) { prompt in
                var request = vp_whisper_request(
                    n_threads: Int32(threads), beam_size: Int32(r.beamSize), translate: r.translate, language: language,
                    initial_prompt: prompt, token_timestamps: r.wordTimestamps && !r.quick, no_timestamps: r.quick,
                    single_segment: r.quick, max_tokens: Int32(maxTokens), temperature_fallback: !r.quick && audioContext >= WhisperAudioContext.window,
                    abort_flag: UnsafePointer(abort), audio_ctx: Int32(audioContext >= WhisperAudioContext.window ? 0 : audioContext))
                return job.samples.withUnsafeBufferPointer { samples in
                    vp_whisper_run(context, state, &request, samples.baseAddress, Int32(samples.count), &error, error.count)
                }
            }
        }
        guard rc == 0 else {
            throw NodeError(.whisperDecode, cString(error))
        }
        var segments: [WhisperSegment] = []
        for s in 0..<vp_whisper_n_segments(state) {
            var tokens: [WhisperToken] = []
            for t in 0..<vp_whisper_n_tokens(state, s) {
                let token = vp_whisper_get_token(context, state, s, t)
                guard !token.special, let text = token.text else { continue }
                let bytes = Array(UnsafeBufferPointer(start: UnsafeRawPointer(text).assumingMemoryBound(to: UInt8.self), count: strlen(text)))
                tokens.append(WhisperToken(bytes: bytes, probability: token.p, t0: token.t0, t1: token.t1))
            }
            segments.append(WhisperSegment(text: String(cString: vp_whisper_segment_text(state, s)),
                                           t0: vp_whisper_segment_t0(state, s), t1: vp_whisper_segment_t1(state, s),
                                           noSpeech: vp_whisper_segment_no_speech(state, s), tokens: tokens,
                                           rawTokenCount: Int(vp_whisper_n_tokens(state, s))))
        }
        let languageID = vp_whisper_detected_language(state)
        let language = languageID >= 0 ? String(cString: vp_whisper_lang_str(languageID)) : nil
        return WhisperDecoding(segments: segments, language: language, decodeMs: 0)
    }
}

private func withOptionalCString<T>(_ string: String?, _ body: (UnsafePointer<CChar>?) -> T) -> T {
    guard let string else { return body(nil) }
    return string.withCString { body($0) }
}

/// The text in a NUL-terminated buffer.
func cString(_ buffer: [CChar]) -> String {
    String(decoding: buffer.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self)
}
