import Foundation
import PipelineCore

extension ASRNode {
    /// Configuration of `asr`: the parameters common to every engine, and the selected engine's own
    /// (decoded by that engine, see ``ASREngineConfiguration``).
    public struct Configuration: NodeConfiguration {
        /// The recognizer (`engine`): the name of one of ``ASREngines/all``.
        public var engine: String
        /// Audio between partial hypotheses while speech goes on, in milliseconds.
        public var partialIntervalMs: Int
        /// Silence that ends an utterance found by the node's own endpointer, in milliseconds.
        public var endpointSilenceMs: Int
        /// Readings of each final result to report as `alternatives` (0 = none).
        public var alternatives: Int
        /// The selected engine's configuration (of the engine's type, e.g. ``PocketSphinxEngine/Configuration``).
        public var engineConfiguration: any ASREngineConfiguration
        /// The engine to use when the selected one cannot run here (its library or model is missing).
        public var fallback: String?
        /// The fallback engine's configuration, decoded from the same parameters.
        public var fallbackConfiguration: (any ASREngineConfiguration)?
        /// The engine-specific parameters that were given, whichever engine they belong to.
        var givenParameters: Set<String>

        /// Every parameter of the `asr` node: the common ones, then each engine's (in the order of
        /// ``ASREngines/all``). Engine-specific ones have no default here (their engine applies it),
        /// so validation can tell when one is given to another engine.
        public static let parameters: [ParamSpec] = [
            ParamSpec("engine", .choice(ASREngines.all.map(\.name)), default: .string(ASREngines.defaultName),
                      doc: "recognizer: " + ASREngines.all.map { "\($0.name) (\($0.summary))" }.joined(separator: "; ")),
            ParamSpec("partial_interval_ms", .int(20...10_000), default: 300,
                      doc: "audio between partial hypotheses while speech goes on"),
            ParamSpec("endpoint_silence_ms", .int(100...10_000), default: 600,
                      doc: "with no vad/slicer marks upstream (and an engine that does not segment itself): silence that ends an utterance"),
            ParamSpec("fallback", .choice(ASREngines.all.map(\.name)),
                      doc: "engine to use, with one line on stderr saying why, when `engine` cannot run here (its library or model files are missing): e.g. engine: whisper, fallback: pocketsphinx"),
            ParamSpec("alternatives", .int(0...20), default: 0,
                      doc: "final transcripts carry up to N distinct readings as alternatives: [{text, confidence}], best first; confidence is each reading's share among them (pocketsphinx: its n-best list; engines that return one reading give none)"),
        ] + ASREngines.sharedParameters

        enum CodingKeys: String, CodingKey {
            case engine, partialIntervalMs, endpointSilenceMs, alternatives, fallback
        }

        /// Any parameter name, to see which engine-specific parameters were given.
        private struct AnyKey: CodingKey {
            var stringValue: String
            var intValue: Int? { nil }
            init(stringValue: String) { self.stringValue = stringValue }
            init?(intValue: Int) { nil }
        }

        /// Decodes the common parameters, then the selected engine's configuration from the same values.
        public init(from decoder: any Decoder) throws {
            let c = try decoder.container(keyedBy: CodingKeys.self)
            engine = try c.decode(String.self, forKey: .engine)
            partialIntervalMs = try c.decode(Int.self, forKey: .partialIntervalMs)
            endpointSilenceMs = try c.decode(Int.self, forKey: .endpointSilenceMs)
            alternatives = try c.decode(Int.self, forKey: .alternatives)
            guard let descriptor = ASREngines.descriptor(engine) else {
                throw ConfigurationError("asr: unknown engine '\(engine)'; expected one of \(ASREngines.all.map(\.name).joined(separator: ", "))")
            }
            engineConfiguration = try descriptor.decode(decoder)
            fallback = try c.decodeIfPresent(String.self, forKey: .fallback)
            if let fallback {
                guard let other = ASREngines.descriptor(fallback) else {
                    throw ConfigurationError("asr: unknown fallback engine '\(fallback)'")
                }
                fallbackConfiguration = try other.decode(decoder)
            }
            let all = try decoder.container(keyedBy: AnyKey.self)
            let engineParameters = Set(ASREngines.all.flatMap { $0.parameters.map(\.name) })
            givenParameters = Set(try all.allKeys.filter { try !all.decodeNil(forKey: $0) }.map(\.stringValue))
                .intersection(engineParameters)
        }

        /// The selected engine's descriptor.
        public var engineDescriptor: ASREngineDescriptor? { ASREngines.descriptor(engine) }

        /// The audio format the selected engine takes.
        public var inputFormat: AudioFormat { engineConfiguration.inputFormat }

        /// Why the selected engine cannot run here, when a fallback is given and the engine's files are
        /// missing (its own problems); nil when it can.
        public func unavailable(_ environment: [String: String]) -> String? {
            guard fallback != nil else { return nil }
            let problems = engineConfiguration.problems(environment: environment)
            return problems.isEmpty ? nil : problems.joined(separator: "; ")
        }

        /// Parameters given for another engine, then the engine's own problems (with a fallback whose
        /// engine would run instead, the fallback's).
        public func problems() -> [String] { problems(environment: [:]) }

        /// The same, with the graph's environment variables (where an engine's files are found).
        public func problems(environment: [String: String]) -> [String] {
            guard let selected = engineDescriptor else { return [] }
            var own = Set(selected.parameters.map(\.name))
            if let fallback, let other = ASREngines.descriptor(fallback) {
                // A fallback that is the engine itself (`--set asr.engine=` on a graph that names
                // one) has nothing else to run: it is no fallback.
                if fallback != engine { own.formUnion(other.parameters.map(\.name)) }
            }
            var problems: [String] = []
            for other in ASREngines.all where other.name != engine {
                for p in other.parameters.map(\.name) where givenParameters.contains(p) && !own.contains(p) {
                    problems.append("parameter '\(p)' belongs to engine \(other.name), but engine is \(engine)")
                }
            }
            if unavailable(environment) != nil, let fallbackConfiguration {
                return problems + fallbackConfiguration.problems(environment: environment).map { "fallback \(fallback ?? ""): \($0)" }
            }
            return problems + engineConfiguration.problems(environment: environment)
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "asr", summary: "Speech recognition: utterances in, transcripts out (engines: \(ASREngines.all.map(\.name).joined(separator: ", ")))",
        family: "services",
        inputs: [PortSpec("in", [.audio], doc: "audio; utterances from vad/slicer marks, else found by the node or the engine")],
        outputs: [PortSpec.events, PortSpec("text", [.text], required: false, doc: "each final transcript")],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { _, _ in nil }, accepts: { c, format in
            let wanted = c.inputFormat
            guard format != wanted else { return nil }
            return "engine \(c.engine) takes \(wanted) audio, got \(format); put a resample node before asr ({ type: resample, rate: \(wanted.sampleRate), channels: \(wanted.channels) })"
        }),
        make: { c, env in try ASRNode(configuration: c, environment: env) })
}
