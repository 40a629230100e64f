import Foundation
import PipelineCore

/// openWakeWord's streaming detector: 16 kHz audio in steps of 80 ms (1280 samples) → a mel
/// spectrogram model (the last 1760 samples → 8 frames of 32 mels, scaled as mel / 10 + 2) → an
/// embedding model (the last 76 mel frames → 96 features) → one classifier per word (its last N
/// embeddings → a score in 0...1). Samples go in as raw 16-bit values (not scaled to ±1). The buffers
/// start as they would after 8 s of silence, as openWakeWord's own front end does.
///
/// openWakeWord computes one embedding every 80 ms, so a phrase is judged on one of eight possible
/// 10 ms alignments, and scores move a lot with it (the same phrase can score 0.37 or 0.93). With
/// `hopFrames` under 8, embeddings are computed at several alignments 10·hopFrames ms apart, each keeping
/// its own history at the trained 80 ms spacing; a word's score is the highest over them.
///
/// Not thread-safe: one detector belongs to one node.
final class OpenWakeWord {
    static let step = 1280
    static let melSamples = 1760
    static let melBins = 32
    static let embeddingFrames = 76
    static let features = 96

    /// A word's classifier and its recent embeddings.
    struct Word {
        let name: String
        let model: TFLiteModel
        let windows: Int
    }

    private let mel: TFLiteModel
    private let embedding: TFLiteModel
    private(set) var words: [Word]
    private var audio = [Float](repeating: 0, count: OpenWakeWord.melSamples)
    private var pending: [Float] = []
    private var mels: [[Float]] = []
    /// Offsets (in mel frames back from the newest) of the embedding windows, and their histories.
    private let offsets: [Int]
    private var embeddings: [[[Float]]]

    /// Loads the front end and the classifiers of `words` (file names without `.tflite`) from `folder`;
    /// embeddings every `hopFrames` mel frames (10 ms each; 8 is openWakeWord's own 80 ms).
    init(folder: String, words names: [String], hopFrames: Int = 2, variables: [String: String] = [:]) throws {
        let hop = min(max(hopFrames, 1), 8)
        offsets = Array(stride(from: 8 - hop, through: 0, by: -hop))
        embeddings = Array(repeating: [], count: offsets.count)
        mel = try TFLiteModel(path: folder + "/melspectrogram.tflite", inputShape: [1, Int32(Self.melSamples)], variables: variables)
        embedding = try TFLiteModel(path: folder + "/embedding_model.tflite",
                                    inputShape: [1, Int32(Self.embeddingFrames), Int32(Self.melBins), 1], variables: variables)
        words = try names.map { name in
            let path = folder + "/" + name + ".tflite"
            guard FileManager.default.fileExists(atPath: path) else {
                throw NodeError(.wakeModelMissing, "no model for wake word \(name) (\(path)); the installed ones are \(Self.available(folder).joined(separator: ", "))")
            }
            let m = try TFLiteModel(path: path, variables: variables)
            return Word(name: name, model: m, windows: max(1, m.inputShape.count > 1 ? m.inputShape[1] : 16))
        }
        // Warm up on 8 s of silence so the first real audio sees full buffers (embeddings only where the
        // classifiers' histories will still hold them).
        let steps = 8 * 16000 / Self.step
        let longest = words.map(\.windows).max() ?? 16
        for i in 0..<steps { _ = try process(chunk: [Float](repeating: 0, count: Self.step), warmUp: i < steps - longest) }
    }

    /// The word models in `folder`.
    static func available(_ folder: String) -> [String] {
        let skip: Set<String> = ["melspectrogram", "embedding_model"]
        return ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [])
            .filter { $0.hasSuffix(".tflite") }.map { String($0.dropLast(7)) }.filter { !skip.contains($0) }.sorted()
    }

    /// Feeds 16 kHz mono samples; calls `score` with each word's score for every completed 80 ms
    /// step (`end` = samples fed up to the end of that step).
    func feed(_ samples: [Int16], score: (_ step: Int, _ scores: [Float]) throws -> Void) throws {
        for s in samples { pending.append(Float(s)) }
        var offset = 0
        var index = 0
        while pending.count - offset >= Self.step {
            let chunk = Array(pending[offset..<(offset + Self.step)])
            offset += Self.step
            let scores = try process(chunk: chunk)
            try score(index, scores)
            index += 1
        }
        if offset > 0 { pending.removeFirst(offset) }
    }

    private func process(chunk: [Float], warmUp: Bool = false) throws -> [Float] {
        audio.removeFirst(Self.step)
        audio.append(contentsOf: chunk)
        let m = try mel.run(audio)
        let frames = m.count / Self.melBins
        for f in 0..<frames { mels.append((0..<Self.melBins).map { m[f * Self.melBins + $0] / 10 + 2 }) }
        let kept = Self.embeddingFrames + (offsets.first ?? 0)
        if mels.count > kept { mels.removeFirst(mels.count - kept) }
        guard mels.count == kept, !warmUp else { return words.map { _ in 0 } }
        let longest = words.map(\.windows).max() ?? 16
        var best = words.map { _ in Float(0) }
        for (k, offset) in offsets.enumerated() {
            let end = mels.count - offset
            let e = try embedding.run(mels[(end - Self.embeddingFrames)..<end].flatMap { $0 })
            embeddings[k].append(Array(e.prefix(Self.features)))
            if embeddings[k].count > longest { embeddings[k].removeFirst(embeddings[k].count - longest) }
            for (i, w) in words.enumerated() where embeddings[k].count >= w.windows {
                best[i] = max(best[i], try w.model.run(embeddings[k].suffix(w.windows).flatMap { $0 }).first ?? 0)
            }
        }
        return best
    }
}
