import CWhisper
import Foundation
import PipelineCore
import Synchronization

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

    /// The library file to load, or the bare name for the dynamic loader.
    static func library(_ variables: [String: String]) -> String {
        if let env = variables["VOICEPIPE_WHISPER_LIBRARY"], !env.isEmpty { return env }
        for p in prefixes where FileManager.default.fileExists(atPath: p + "/lib/" + libraryName) { return p + "/lib/" + libraryName }
        return libraryName
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

    private static let loaded = Mutex<String?>(nil)

    /// Loads the library (once); throws naming the file and what went wrong.
    static func load(_ variables: [String: String]) throws {
        try loaded.withLock { (state: inout String?) throws in
            if state != nil { return }
            let path = WhisperFiles.library(variables)
            var message = [CChar](repeating: 0, count: 512)
            guard vp_whisper_load(path, &message, message.count) == 0 else {
                let why = cString(message)
                throw NodeError(.whisperLibraryMissing,
                                "asr engine whisper needs whisper.cpp's libwhisper, which could not be loaded from \(path) (\(why)); run scripts/install-whisper.sh, or set VOICEPIPE_WHISPER_LIBRARY to a libwhisper.so.1")
            }
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
    /// Decoding threads for this model.
    let pool: WhisperDecoderPool

    private init(pointer: OpaquePointer, path: String) {
        self.pointer = pointer
        self.path = path
        multilingual = vp_whisper_model_is_multilingual(pointer) != 0
        type = String(cString: vp_whisper_model_type(pointer))
        pool = WhisperDecoderPool(name: (path as NSString).lastPathComponent, context: pointer)
    }

    private static let models = Mutex<[String: WhisperModel]>([:])

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
    /// Partials: one segment, no timestamps, a bounded number of tokens.
    var quick: Bool
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
}

/// What a decoding produced.
struct WhisperDecoding: Sendable {
    var segments: [WhisperSegment]
    var language: String?
    /// Wall time the decoder spent, in milliseconds.
    var decodeMs: Double
}

/// A bounded pool of decoder threads for one model.
///
/// Every `asr` node and `serve` session that uses the model submits its utterances here; each thread
/// owns one whisper.cpp decoder state (its buffers) and decodes one request at a time, so memory and
/// threads grow with the pool, not with the number of sessions. Finals go before partials; at most
/// one partial per session waits (a newer one replaces it); when a final arrives and every thread is
/// busy, a thread decoding a partial is told to abort, so partials never hold up a final for longer
/// than whisper.cpp takes to notice (it polls between layers).
final class WhisperDecoderPool: @unchecked Sendable {
    enum Priority { case final, partial }

    /// A queued or running request; its mutable parts are the pool's, under `condition`.
    private final class Job: @unchecked Sendable {
        let id: UInt64
        let session: UInt64
        let priority: Priority
        let samples: [Float]
        let request: WhisperRequest
        let continuation: CheckedContinuation<WhisperDecoding?, any Error>
        init(id: UInt64, session: UInt64, priority: Priority, samples: [Float], request: WhisperRequest,
             continuation: CheckedContinuation<WhisperDecoding?, any Error>) {
            self.id = id
            self.session = session
            self.priority = priority
            self.samples = samples
            self.request = request
            self.continuation = continuation
        }
    }

    /// One decoder thread; `running` is read and written under the pool's `condition`, `abort` is
    /// polled by whisper.cpp without the lock (a word-sized flag).
    private final class Worker: @unchecked Sendable {
        let abort = UnsafeMutablePointer<Int32>.allocate(capacity: 1)
        var running: Job?
        init() { abort.initialize(to: 0) }
    }

    let name: String
    /// The model's whisper.cpp context (never freed: models live as long as the process).
    private let context: OpaquePointer
    // Everything below is guarded by `condition`.
    private let condition = NSCondition()
    private var finals: [Job] = []
    private var partials: [Job] = []
    private var workers: [Worker] = []
    private var nextID: UInt64 = 0
    private var stats = (decoded: 0, aborted: 0, replaced: 0)

    init(name: String, context: OpaquePointer) {
        self.name = name
        self.context = context
    }

    /// A new session key.
    func newSession() -> UInt64 {
        condition.lock(); defer { condition.unlock() }
        nextID += 1
        return nextID
    }

    /// Grows the pool to at least `count` threads (it never shrinks).
    func ensureWorkers(_ count: Int) {
        condition.lock(); defer { condition.unlock() }
        while workers.count < count {
            let worker = Worker()
            workers.append(worker)
            let thread = Thread { [self] in self.loop(worker) }
            thread.name = "whisper-\(workers.count)"
            thread.stackSize = 1 << 23
            thread.start()
        }
    }

    /// True when no final waits and a thread is free or only decoding a partial (which a final
    /// aborts): work done ahead then delays no one's final.
    var isIdle: Bool {
        condition.lock(); defer { condition.unlock() }
        return finals.isEmpty && workers.contains { $0.running == nil || $0.running?.priority == .partial }
    }

    /// True when a thread is free and nothing waits: a partial started now delays no one.
    var hasFreeThread: Bool {
        condition.lock(); defer { condition.unlock() }
        return finals.isEmpty && partials.isEmpty && workers.contains { $0.running == nil }
    }

    /// Threads in the pool.
    var workerCount: Int { condition.lock(); defer { condition.unlock() }; return workers.count }

    /// Decodes `samples`; nil when a partial was replaced by a newer one or aborted for a final.
    /// Cancelling the calling task removes the job, or aborts it if it is running.
    func decode(_ samples: [Float], request: WhisperRequest, priority: Priority, session: UInt64) async throws -> WhisperDecoding? {
        let id: UInt64 = { condition.lock(); defer { condition.unlock() }; nextID += 1; return nextID }()
        return try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<WhisperDecoding?, any Error>) in
                let job = Job(id: id, session: session, priority: priority, samples: samples, request: request, continuation: continuation)
                var replaced: Job?
                condition.lock()
                if Task.isCancelled {
                    condition.unlock()
                    continuation.resume(throwing: CancellationError())
                    return
                }
                switch priority {
                case .final:
                    finals.append(job)
                    // A partial of this session is now useless; a running partial of anyone yields
                    // its thread when no thread is free.
                    if let i = partials.firstIndex(where: { $0.session == session }) { replaced = partials.remove(at: i) }
                    if !workers.contains(where: { $0.running == nil }) {
                        let busyWithPartial = workers.filter { $0.running?.priority == .partial }
                        let finalsWaiting = finals.count
                        for worker in busyWithPartial.prefix(finalsWaiting) { worker.abort.pointee = 1 }
                    }
                case .partial:
                    if let i = partials.firstIndex(where: { $0.session == session }) { replaced = partials.remove(at: i) }
                    partials.append(job)
                }
                if replaced != nil { stats.replaced += 1 }
                condition.signal()
                condition.unlock()
                replaced?.continuation.resume(returning: nil)
            }
        } onCancel: {
            var removed: Job?
            condition.lock()
            if let i = finals.firstIndex(where: { $0.id == id }) { removed = finals.remove(at: i) }
            else if let i = partials.firstIndex(where: { $0.id == id }) { removed = partials.remove(at: i) }
            else if let worker = workers.first(where: { $0.running?.id == id }) { worker.abort.pointee = 1 }
            condition.unlock()
            removed?.continuation.resume(throwing: CancellationError())
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
                                            temperature_fallback: false, abort_flag: nil)
            _ = "en".withCString { language in
                warmup.language = language
                return silence.withUnsafeBufferPointer { vp_whisper_run(context, state, &warmup, $0.baseAddress, Int32($0.count), &error, error.count) }
            }
        }
        while true {
            condition.lock()
            while finals.isEmpty && partials.isEmpty { condition.wait() }
            let job = finals.isEmpty ? partials.removeFirst() : finals.removeFirst()
            worker.running = job
            worker.abort.pointee = 0
            condition.unlock()

            var result: Result<WhisperDecoding?, any Error>
            if state == nil { state = vp_whisper_state_new(context) }
            if let state {
                result = Result { try run(job, state: state, abort: worker.abort) }
            } else {
                result = .failure(NodeError(.whisperState, "whisper.cpp could not allocate a decoder for \(name) (out of memory?)"))
            }

            condition.lock()
            let aborted = worker.abort.pointee != 0
            worker.running = nil
            worker.abort.pointee = 0
            if aborted { stats.aborted += 1 } else { stats.decoded += 1 }
            condition.unlock()
            if aborted, case .failure = result { result = job.priority == .partial ? .success(nil) : .failure(CancellationError()) }
            job.continuation.resume(with: result)
        }
    }

    private func run(_ job: Job, state: OpaquePointer, abort: UnsafeMutablePointer<Int32>) throws -> WhisperDecoding {
        let r = job.request
        let started = ContinuousClock.now
        var error = [CChar](repeating: 0, count: 512)
        let rc: Int32 = r.language.withCString { language in
            withOptionalCString(r.initialPrompt) { prompt in
                var request = vp_whisper_request(
                    n_threads: Int32(r.threads), beam_size: Int32(r.beamSize), translate: r.translate, language: language,
                    initial_prompt: prompt, token_timestamps: r.wordTimestamps && !r.quick, no_timestamps: r.quick,
                    single_segment: r.quick, max_tokens: r.quick ? 96 : 0, temperature_fallback: !r.quick,
                    abort_flag: UnsafePointer(abort))
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
                                           noSpeech: vp_whisper_segment_no_speech(state, s), tokens: tokens))
        }
        let languageID = vp_whisper_detected_language(state)
        let language = languageID >= 0 ? String(cString: vp_whisper_lang_str(languageID)) : nil
        let elapsed = ContinuousClock.now - started
        return WhisperDecoding(segments: segments, language: language,
                               decodeMs: Double(elapsed.components.seconds) * 1000 + Double(elapsed.components.attoseconds) / 1e15)
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
