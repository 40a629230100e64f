import Foundation
import PipelineCore

/// openWakeWord's streaming detector: 16 kHz audio in steps of 80 ms (1280 samples) → a mel
/// spectrogram model (the last 1760 samples → 8 frames of 32 mels, scaled as mel / 10 + 2) → an
/// embedding model (the last 76 mel frames → 96 features) → one classifier per word (its last N
/// embeddings → a score in 0...1). Samples go in as raw 16-bit values (not scaled to ±1). The buffers
/// start as they would after 8 s of silence, as openWakeWord's own front end does.
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
    private var embeddings: [[Float]] = []

    /// Loads the front end and the classifiers of `words` (file names without `.tflite`) from `folder`.
    init(folder: String, words names: [String]) throws {
        mel = try TFLiteModel(path: folder + "/melspectrogram.tflite", inputShape: [1, Int32(Self.melSamples)])
        embedding = try TFLiteModel(path: folder + "/embedding_model.tflite",
                                    inputShape: [1, Int32(Self.embeddingFrames), Int32(Self.melBins), 1])
        words = try names.map { name in
            let path = folder + "/" + name + ".tflite"
            guard FileManager.default.fileExists(atPath: path) else {
                throw NodeError("wake_model_missing", "no model for wake word \(name) (\(path)); the installed ones are \(Self.available(folder).joined(separator: ", "))")
            }
            let m = try TFLiteModel(path: path)
            return Word(name: name, model: m, windows: max(1, m.inputShape.count > 1 ? m.inputShape[1] : 16))
        }
        // Warm up on 8 s of silence so the first real audio sees full buffers.
        for _ in 0..<(8 * 16000 / Self.step) { _ = try process(chunk: [Float](repeating: 0, count: Self.step)) }
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

    private func process(chunk: [Float]) throws -> [Float] {
        audio.removeFirst(Self.step)
        audio.append(contentsOf: chunk)
        let m = try mel.run(audio)
        let frames = m.count / Self.melBins
        for f in 0..<frames { mels.append((0..<Self.melBins).map { m[f * Self.melBins + $0] / 10 + 2 }) }
        if mels.count > Self.embeddingFrames { mels.removeFirst(mels.count - Self.embeddingFrames) }
        guard mels.count == Self.embeddingFrames else { return words.map { _ in 0 } }
        let e = try embedding.run(mels.flatMap { $0 })
        embeddings.append(Array(e.prefix(Self.features)))
        let longest = words.map(\.windows).max() ?? 16
        if embeddings.count > longest { embeddings.removeFirst(embeddings.count - longest) }
        return try words.map { w in
            guard embeddings.count >= w.windows else { return 0 }
            return try w.model.run(embeddings.suffix(w.windows).flatMap { $0 }).first ?? 0
        }
    }
}
