import CPocketSphinx
import Foundation
import PipelineCore

/// `engine: pocketsphinx`: the embedded CMU PocketSphinx decoder.
public struct PocketSphinxEngine: ASREngine {
    public var segmentsUnmarkedAudio: Bool { false }

    public func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws {
        for await _ in inputs {}
    }

    /// Engine registration.
    public static let descriptor = ASREngineDescriptor(
        name: "pocketsphinx", summary: "embedded CMU PocketSphinx (Debian's pocketsphinx-en-us model)",
        parameters: ["model_dir", "dict", "lm", "jsgf", "keyphrase", "kws", "kws_threshold"],
        make: { _ in PocketSphinxEngine() })
}
