import CPocketSphinx
import Foundation
import PipelineCore

/// Settings of a PocketSphinx decoder, resolved once from ``PocketSphinxEngine/Configuration``.
struct PocketSphinxSettings: Sendable, Hashable {
    /// What the decoder searches for.
    enum Search: Sendable, Hashable {
        /// Free speech with an n-gram language model.
        case languageModel(String)
        /// Only sentences a JSGF grammar allows.
        case grammar(String)
        /// One key phrase, with its detection threshold.
        case keyphrase(String, threshold: Double)
        /// A key phrase list file.
        case keyphraseList(String)
    }

    var acousticModel: String
    var dictionary: String
    var search: Search

    static let modelRoot = "/usr/share/pocketsphinx/model"

    init(acousticModel: String, dictionary: String, search: Search) {
        self.acousticModel = acousticModel
        self.dictionary = dictionary
        self.search = search
    }

    /// The language when `language` is not given.
    static let defaultLanguage = "en-us"
    /// The keyphrase detection threshold when `kws_threshold` is not given.
    static let defaultKeyphraseThreshold = 1e-20

    /// Settings from the engine's parameters (Debian's en-us model by default).
    init(configuration c: PocketSphinxEngine.Configuration) {
        let language = c.language ?? Self.defaultLanguage
        let root = Self.modelRoot + "/" + language
        acousticModel = c.modelDir ?? root + "/" + language
        dictionary = c.dict ?? root + "/cmudict-" + language + ".dict"
        if let jsgf = c.jsgf {
            search = .grammar(jsgf)
        } else if let phrase = c.keyphrase {
            search = .keyphrase(phrase, threshold: c.kwsThreshold ?? Self.defaultKeyphraseThreshold)
        } else if let list = c.kws {
            search = .keyphraseList(list)
        } else {
            search = .languageModel(c.lm ?? root + "/" + language + ".lm.bin")
        }
    }

    /// Problems found without loading anything: missing files, conflicting searches.
    static func check(_ c: PocketSphinxEngine.Configuration) -> [String] {
        var problems: [String] = []
        let searches = [("jsgf", c.jsgf), ("keyphrase", c.keyphrase), ("kws", c.kws)].filter { $0.1 != nil }.map(\.0)
        if searches.count > 1 {
            problems.append("give only one of jsgf, keyphrase, kws (got \(searches.joined(separator: ", ")))")
        }
        if c.lm != nil && !searches.isEmpty {
            problems.append("lm is used for free speech; it cannot be combined with \(searches[0])")
        }
        if c.kwsThreshold != nil && c.keyphrase == nil {
            problems.append("kws_threshold applies to keyphrase (a kws file gives thresholds per line)")
        }
        let settings = PocketSphinxSettings(configuration: c)
        var files: [(String, String)] = [("dict", settings.dictionary)]
        switch settings.search {
        case .languageModel(let p): files.append(("lm", p))
        case .grammar(let p): files.append(("jsgf", p))
        case .keyphraseList(let p): files.append(("kws", p))
        case .keyphrase: break
        }
        var isDir: ObjCBool = false
        if !FileManager.default.fileExists(atPath: settings.acousticModel, isDirectory: &isDir) || !isDir.boolValue {
            let hint = c.modelDir != nil ? "" : " (install pocketsphinx-en-us, or set model_dir)"
            problems.append("acoustic model directory \(settings.acousticModel) not found\(hint)")
        }
        for (name, path) in files where !FileManager.default.fileExists(atPath: path) {
            problems.append("\(name): \(path) not found")
        }
        return problems
    }

    /// Decoder arguments (`-name value` pairs).
    var arguments: [String] {
        // No `-logfn`: the library's log is silenced once for the process (see PocketSphinxDecoder.quiet).
        var args = ["-hmm", acousticModel, "-dict", dictionary, "-samprate", "16000"]
        switch search {
        case .languageModel(let p): args += ["-lm", p]
        case .grammar(let p): args += ["-jsgf", p]
        case .keyphrase(let phrase, let threshold): args += ["-keyphrase", phrase, "-kws_threshold", String(threshold)]
        case .keyphraseList(let p): args += ["-kws", p]
        }
        return args
    }
}

/// One PocketSphinx decoder: 16 kHz mono s16 in, hypotheses out.
///
/// `@unchecked Sendable` is safe because the decoder is confined to one thread: the engine
/// creates it, uses it and frees it only inside jobs of its own ``BlockingWorker``, which runs
/// them one at a time on a single thread. It is never touched from any other task.
final class PocketSphinxDecoder: @unchecked Sendable {
    private let decoder: OpaquePointer
    private var inUtterance = false

    /// Loads the models. Slow (hundreds of milliseconds); call it on the worker thread.
    init(_ settings: PocketSphinxSettings) throws {
        if let problem = libraryProblem({ vp_pocketsphinx_load($0, $1) }) { throw NodeError(.engineUnavailable, problem) }
        Self.quiet
        var cstrings = settings.arguments.map { strdup($0) }
        defer { cstrings.forEach { free($0) } }
        let config = cstrings.withUnsafeMutableBufferPointer { buf in
            vp_ps_config(Int32(buf.count), buf.baseAddress)
        }
        guard let config else {
            throw NodeError(.asrConfig, "pocketsphinx refused its configuration: \(settings.arguments.joined(separator: " "))")
        }
        defer { cmd_ln_free_r(config) }
        guard let decoder = ps_init(config) else {
            throw NodeError(.asrModel, "pocketsphinx could not load its models (acoustic model \(settings.acousticModel), dictionary \(settings.dictionary)); check the paths and that the grammar or keyphrase words are in the dictionary")
        }
        self.decoder = decoder
    }

    /// The library logs to stderr until told otherwise: its log is silenced once, process-wide, before
    /// the first configuration is parsed.
    ///
    /// Decoders are created, used and freed on as many threads at once as there are sessions. Under
    /// valgrind's helgrind, concurrent `ps_init` calls of Debian's libpocketsphinx3 share only two static
    /// integers that every call sets to the same value (the debug level and the frequency-warping
    /// parameters); the heap corruption once seen with concurrent sessions came from `-logfn`, which made
    /// every `ps_init` replace and fclose the process-wide log FILE while other decoders wrote to it
    /// (bench/pocketsphinx-threads reproduces it).
    static let quiet: Void = vp_ps_quiet()

    /// The library's process-wide log stream (nil while silenced): creating a decoder leaves it alone.
    static var libraryLogStream: UnsafeMutablePointer<FILE>? { vp_ps_logfp() }

    deinit {
        ps_free(decoder)
    }

    /// Begins an utterance.
    func start() throws {
        if inUtterance { _ = ps_end_utt(decoder) }
        guard ps_start_utt(decoder) >= 0 else { throw NodeError(.asrDecoder, "pocketsphinx could not start an utterance") }
        inUtterance = true
    }

    /// Decodes samples of the open utterance.
    func process(_ samples: [Int16]) throws {
        guard inUtterance, !samples.isEmpty else { return }
        let r = samples.withUnsafeBufferPointer { ps_process_raw(decoder, $0.baseAddress, $0.count, 0, 0) }
        guard r >= 0 else { throw NodeError(.asrDecoder, "pocketsphinx failed decoding audio") }
    }

    /// The current best hypothesis ("" when none).
    func hypothesis() -> String {
        guard let hyp = ps_get_hyp(decoder, nil) else { return "" }
        return Self.clean(String(cString: hyp))
    }

    /// Ends the utterance and returns its final hypothesis.
    func end() -> String {
        guard inUtterance else { return "" }
        _ = ps_end_utt(decoder)
        inUtterance = false
        return hypothesis()
    }

    /// Up to `limit` distinct hypotheses of the utterance just ended, best first, each with its share
    /// of the probability mass of the hypotheses found (PocketSphinx's n-best list from the lattice;
    /// paths differing only in silences and fillers count once). Empty when there is no lattice
    /// (keyword spotting, an empty utterance).
    func alternatives(_ limit: Int) -> [ASRAlternative] {
        guard limit > 0, var nbest = ps_nbest(decoder) else { return [] }
        var found: [(text: String, score: Int32)] = []
        var seen: Set<String> = []
        var examined = 0
        // Paths that differ only in fillers repeat a text; look a little further than `limit`.
        while examined < limit * 8 {
            var score: Int32 = 0
            if let hyp = ps_nbest_hyp(nbest, &score) {
                let text = Self.clean(String(cString: hyp))
                if !text.isEmpty, seen.insert(text).inserted { found.append((text, score)) }
            }
            examined += 1
            if found.count == limit { break }
            guard let next = ps_nbest_next(nbest) else { return Self.normalize(found, decoder) }
            nbest = next
        }
        ps_nbest_free(nbest)
        return Self.normalize(found, decoder)
    }

    private static func normalize(_ found: [(text: String, score: Int32)], _ decoder: OpaquePointer) -> [ASRAlternative] {
        guard let best = found.map(\.score).max(), let logmath = ps_get_logmath(decoder) else { return [] }
        let weights = found.map { logmath_exp(logmath, $0.score - best) }
        let total = weights.reduce(0, +)
        return zip(found, weights)
            .map { ASRAlternative(text: $0.0.text, confidence: total > 0 ? ($0.1 / total * 1000).rounded() / 1000 : 0) }
            .sorted { $0.confidence > $1.confidence }
    }

    /// Collapses whitespace (keyword spotting separates detections with several spaces).
    static func clean(_ s: String) -> String {
        s.split(whereSeparator: \.isWhitespace).joined(separator: " ")
    }
}
