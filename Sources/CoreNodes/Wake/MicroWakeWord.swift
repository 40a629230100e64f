import Foundation
import PipelineCore

/// microWakeWord's streaming detector: 16 kHz audio → ``MicroFrontend`` (40 channels every 10 ms) →
/// one streaming model per word, fed `stride` feature frames at a time (3, so every 30 ms) as an int8
/// tensor; the model keeps its own state between calls and answers a uint8 probability. A word's score
/// is the mean of its last `window` probabilities (0 until that many have been computed), and it fires
/// above its `cutoff`. Each model comes with a JSON file beside it (`<word>.json`, as the
/// `pymicro-wakeword` wheel ships them) giving the cutoff and the window.
///
/// Not thread-safe: one detector belongs to one node.
final class MicroWakeWord {
    /// A model's settings file.
    struct Settings: Decodable {
        struct Micro: Decodable {
            var probability_cutoff: Double
            var sliding_window_size: Int
            var feature_step_size: Int?
        }
        var type: String?
        var wake_word: String?
        var model: String
        var micro: Micro
    }

    /// One word: its model, settings and recent probabilities.
    final class Word {
        let name: String
        let model: TFLiteModel
        let cutoff: Double
        let window: Int
        let stride: Int
        var frames: [Float] = []
        var probabilities: [Float] = []

        init(name: String, model: TFLiteModel, cutoff: Double, window: Int, stride: Int) {
            self.name = name
            self.model = model
            self.cutoff = cutoff
            self.window = window
            self.stride = stride
        }
    }

    /// The frontend's output scaled to the features the models were trained on.
    static let featureScale: Float = 0.0390625

    private let frontend = MicroFrontend()
    private(set) var words: [Word]

    /// The settings of `name` in `folder`, or nil when `<name>.json` is not a microWakeWord model.
    static func settings(_ folder: String, _ name: String) -> Settings? {
        guard let s = try? readSettings(folder, name), s.type == nil || s.type == "micro" else { return nil }
        return s
    }

    /// `<name>.json` in `folder`; throws naming the file when it is there but not a model's settings.
    static func readSettings(_ folder: String, _ name: String) throws -> Settings? {
        let path = folder + "/" + name + ".json"
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        do {
            return try JSONDecoder().decode(Settings.self, from: data)
        } catch {
            throw NodeError(.wakeModel, "\(path) is not a microWakeWord model's settings (expected \"model\" and \"micro\": { probability_cutoff, sliding_window_size }): \(error)")
        }
    }

    /// The microWakeWord models in `folder`.
    static func available(_ folder: String) -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: folder)) ?? [])
            .filter { $0.hasSuffix(".json") }.map { String($0.dropLast(5)) }
            .filter { settings(folder, $0) != nil }.sorted()
    }

    /// Loads the models of `names` from `folder`.
    init(folder: String, words names: [String], variables: [String: String] = [:]) throws {
        words = try names.map { name in
            guard let s = Self.settings(folder, name) else {
                throw NodeError(.wakeModelMissing, "no microWakeWord model \(name) in \(folder) (looked for \(name).json; installed: \(Self.available(folder).joined(separator: ", ")))")
            }
            let path = s.model.hasPrefix("/") ? s.model : folder + "/" + s.model
            let model = try TFLiteModel(path: path, variables: variables)
            let shape = model.inputShape
            guard shape.count == 3, shape[2] == MicroFrontend.channels, model.inputType != .float32, model.outputType != .float32 else {
                throw NodeError(.wakeModel, "\(path) is not a microWakeWord model: its input is \(shape), 8-bit [1, stride, \(MicroFrontend.channels)] expected")
            }
            return Word(name: name, model: model, cutoff: s.micro.probability_cutoff,
                        window: max(1, s.micro.sliding_window_size), stride: max(1, shape[1]))
        }
    }

    /// Feeds 16 kHz mono samples; calls `score` after every 10 ms feature frame with each word's
    /// current score.
    func feed(_ samples: [Int16], score: (_ scores: [Float]) throws -> Void) throws {
        try frontend.process(samples) { features in
            for w in words {
                w.frames.append(contentsOf: features.map { Float($0) * Self.featureScale })
                guard w.frames.count == w.stride * MicroFrontend.channels else { continue }
                let p = try w.model.runQuantized(w.frames).first ?? 0
                w.frames.removeAll(keepingCapacity: true)
                w.probabilities.append(p)
                if w.probabilities.count > w.window { w.probabilities.removeFirst() }
            }
            try score(words.map { w in
                w.probabilities.count < w.window ? 0 : w.probabilities.reduce(0, +) / Float(w.window)
            })
        }
    }
}
