import Foundation
import PipelineCore

/// `vad`: voice activity detection with hysteresis, marking speech in-band.
///
/// Each block of audio is classified by ``SpeechDetector`` (`engine: speex`: speexdsp denoise + VAD
/// probability, combined with energy above a tracked noise floor) or ``SileroDetector``
/// (`engine: silero`: the Silero neural VAD on ONNX Runtime, 32 ms windows, `threshold`);
/// ``VADStateMachine`` opens after `start_ms` of speech and closes after `stop_ms` of silence.
///
/// In-band marks (see `FrameMarks`): `speechStart` is set on the frame that begins the utterance's
/// audio — `pre_roll_ms` before the detected onset — and `speechEnd` on the frame during which the
/// `stop_ms` of silence completed, so the marked span holds the pre-roll, the speech and its
/// trailing silence, ready for a recognizer. To place the start mark on earlier audio, the node holds
/// back `start_ms + pre_roll_ms` (plus one 20 ms block) of audio while no speech is open; once speech
/// has started, audio passes at once, and the frame carrying the end mark leaves as soon as it is marked. Events on `events`:
/// `speech_start` with `media_ms` of the detected onset and `speech_ms` (the speech heard when it was
/// decided), `speech_end` with `media_ms` of the end of the last speech block and `silence_ms` (the
/// silence heard after it when the end was decided) and `reason` (see ``EndReason``: `silence`,
/// `turn_model` with `probability`, `end_on_silence`, `end_of_stream`), which also rides in-band on the
/// frame marked `speechEnd`.
///
/// `turn_model: smart-turn` asks an end-of-turn model (``SmartTurnModel``, on ONNX Runtime) once
/// `stop_ms` of silence (default 100 ms with a model) follows speech. `turn_policy: threshold` (default):
/// a complete turn (probability p ≥ `turn_threshold`) ends at once (reason `turn_model`), an incomplete
/// one is kept open until speech resumes or the pause reaches `max_pause_ms` (reason `silence`).
/// `turn_policy: scaled`: p sets the pause to wait out, `min_pause_ms + (max_pause_ms -
/// min_pause_ms)·(1 - p)`, and the turn ends then (reason `turn_model`) unless speech resumes first.
///
/// `gate: true` passes only the marked spans. `end_on_silence_ms > 0` ends the stream once that much
/// silence follows speech: the node delivers what it holds and returns, closing its outputs.
public actor VADNode: Node {
    struct Held {
        var frame: Frame
        var start: Int64
        var end: Int64
    }

    let startMs: Int
    let stopMs: Int
    let preRollMs: Int
    let gate: Bool
    let endOnSilenceMs: Int
    let thresholds: SpeechDetector.Thresholds
    let engine: Engine
    let threshold: Double
    let model: String?
    let turnModel: TurnModel
    let maxPauseMs: Int
    let turnThreshold: Double
    let turnPolicy: TurnPolicy
    let minPauseMs: Int
    let turnModelPath: String?

    private var held: [Held] = []
    private var position: Int64 = 0
    private var origin: Int64?
    private var rate = 16000
    private var gateOpen = false
    private var lastEndMarked: Int64 = 0
    private var turn: TurnAudio?

    /// The graph's environment variables (where the models and ONNX Runtime are found).
    let variables: [String: String]

    init(configuration c: Configuration, variables: [String: String] = [:]) {
        self.variables = variables
        startMs = c.startMs
        stopMs = c.closingMs
        preRollMs = c.preRollMs
        gate = c.gate
        endOnSilenceMs = c.endOnSilenceMs
        var t = SpeechDetector.Thresholds()
        t.marginDB = c.marginDb
        t.absoluteFloorDB = c.minDb
        thresholds = t
        engine = c.engine
        threshold = c.threshold
        model = c.model
        turnModel = c.turnModel
        maxPauseMs = c.maxPauseMs
        turnThreshold = c.turnThreshold
        turnPolicy = c.turnPolicy
        minPauseMs = c.minPauseMs
        turnModelPath = c.turnModelPath
    }

    public func run(_ context: NodeContext) async throws {
        let detector: any SpeechClassifier
        switch engine {
        case .speex:
            detector = try SpeechDetector(blockMs: 20, thresholds: thresholds)
        case .silero:
            guard let path = SileroFiles.model(model, variables) else {
                throw NodeError(.vadModelMissing, "no silero VAD model found (looked in \(SileroFiles.modelSearch)); run scripts/install-onnx.sh or set model")
            }
            detector = try SileroDetector(modelPath: path, threshold: threshold, variables: variables)
        }
        var judge: SmartTurnModel?
        if turnModel == .smartTurn {
            guard let path = SmartTurnFiles.model(turnModelPath, variables) else {
                throw NodeError(.turnModelMissing, "no smart-turn model found (looked in \(SmartTurnFiles.modelSearch)); run scripts/install-smart-turn.sh or set turn_model_path")
            }
            judge = try SmartTurnModel(modelPath: path, variables: variables)
            turn = TurnAudio()
        }
        var machine: VADStateMachine?
        let input = context.input()
        var ending = false
        var actions: [VADStateMachine.Action] = []
        while !ending, let frame = await input.next() {
            guard let audio = frame.audio else { try await context.send(frame); continue }
            if origin == nil { origin = frame.pts }
            if machine == nil || audio.format.sampleRate != rate {
                rate = audio.format.sampleRate
                let r = Int64(rate)
                machine = VADStateMachine(startSamples: Int64(startMs) * r / 1000, stopSamples: Int64(stopMs) * r / 1000,
                                          endOnSilenceSamples: Int64(endOnSilenceMs) * r / 1000,
                                          maxPauseSamples: judge == nil ? 0 : Int64(maxPauseMs) * r / 1000)
            }
            let n = Int64(audio.frameCount)
            held.append(Held(frame: frame, start: position, end: position + n))
            let at = position
            position += n
            if turn != nil { try turn!.append(audio, position: at) }
            actions.removeAll(keepingCapacity: true)
            try detector.feed(audio.samples, format: audio.format, position: at) { speech, from, to in
                actions.append(contentsOf: machine!.observe(speech: speech, from: from, to: to))
            }
            var index = 0
            while index < actions.count {
                let a = actions[index]
                index += 1
                if case .checkTurn(let end) = a, let judge, let turn {
                    let p = try judge.probability(turn.audio(since: turn.onset))
                    context.logger.debug("vad: smart-turn probability \(p) for the speech that ended at media_ms \(mediaMs(end))")
                    switch turnPolicy {
                    case .threshold:
                        actions.append(contentsOf: machine!.turnDecision(complete: p >= turnThreshold, probability: p))
                    case .scaled:
                        // The less sure the model is that the turn is over, the longer the pause it waits out.
                        let clamped = min(max(p, 0), 1)
                        let waitMs = Double(minPauseMs) + Double(max(maxPauseMs - minPauseMs, 0)) * (1 - clamped)
                        actions.append(contentsOf: machine!.turnWait(probability: p, waitSamples: Int64(waitMs * Double(rate) / 1000)))
                    }
                    continue
                }
                if try await perform(a, context: context) { ending = true }
            }
            if !ending {
                // Audio is held only so that a coming start mark can go back over the pre-roll. Inside
                // an utterance no start can come, and a start never goes before the last end mark:
                // speech and what ends it leave at once, so a recognizer is never behind by the hold.
                if machine?.inSpeech == true {
                    try await release(upTo: position, context: context)
                } else {
                    let hold = Int64(startMs + preRollMs + 40) * Int64(rate) / 1000
                    try await release(upTo: max(position - hold, lastEndMarked), context: context)
                }
            }
        }
        if !ending, var m = machine {
            for a in m.finish() { _ = try await perform(a, context: context) }
        }
        try await release(upTo: .max, context: context)
    }

    /// Performs one action; returns true at end of stream.
    private func perform(_ action: VADStateMachine.Action, context: NodeContext) async throws -> Bool {
        switch action {
        case .speechStart(let onset):
            let target = max(onset - Int64(preRollMs) * Int64(rate) / 1000, lastEndMarked)
            if let i = held.firstIndex(where: { $0.start >= lastEndMarked && $0.end > target }) ?? (held.isEmpty ? nil : held.count - 1) {
                held[i].frame.marks.speechStart = true
            }
            turn?.startTurn(at: max(0, onset - Int64(preRollMs) * Int64(rate) / 1000))
            try await context.emit(.speechStart, [("media_ms", .int(mediaMs(onset))), ("speech_ms", .int(spanMs(position - onset)))])
            return false
        case .speechEnd(let end, let reason):
            if !held.isEmpty {
                held[held.count - 1].frame.marks.speechEnd = true
                held[held.count - 1].frame.marks.endReason = reason
                lastEndMarked = held[held.count - 1].end
            }
            try await context.emit(.speechEnd, [("media_ms", .int(mediaMs(end))), ("silence_ms", .int(spanMs(position - end)))] + reason.fields)
            return false
        case .checkTurn:
            return false
        case .endOfStream:
            return true
        }
    }

    /// Milliseconds in `samples`.
    private func spanMs(_ samples: Int64) -> Int64 { max(0, samples) * 1000 / Int64(max(rate, 1)) }

    private func mediaMs(_ sample: Int64) -> Int64 {
        MediaTime.millis((origin ?? 0) + MediaTime.nanos(samples: sample, rate: rate))
    }

    /// Sends (or, gated, drops) every held frame that ends at or before `limit`.
    private func release(upTo limit: Int64, context: NodeContext) async throws {
        var count = 0
        for h in held {
            guard h.end <= limit else { break }
            count += 1
            let marks = h.frame.marks
            if marks.speechStart { gateOpen = true }
            if !gate || gateOpen { try await context.send(h.frame) }
            if marks.speechEnd { gateOpen = false }
        }
        if count > 0 { held.removeFirst(count) }
    }

    /// Configuration of `vad`.
    public struct Configuration: NodeConfiguration {
        public var startMs: Int
        /// As given; ``closingMs`` is the value used.
        public var stopMs: Int?
        public var preRollMs: Int
        public var gate: Bool
        public var endOnSilenceMs: Int
        public var marginDb: Double
        public var minDb: Double
        public var engine: Engine
        public var threshold: Double
        public var model: String?
        public var turnModel: TurnModel
        public var maxPauseMs: Int
        public var turnThreshold: Double
        public var turnPolicy: TurnPolicy
        public var minPauseMs: Int
        public var turnModelPath: String?
        public static let parameters: [ParamSpec] = [
            ParamSpec("engine", .choice(Engine.allCases.map(\.rawValue)), default: "speex",
                      doc: "speex: speexdsp's detector with a noise-floor energy test (margin_db, min_db); silero: the Silero neural VAD on ONNX Runtime (threshold, model; install with scripts/install-onnx.sh)"),
            ParamSpec("threshold", .double(0.05...0.95), default: 0.5, doc: "silero: speech probability that opens speech (it stays open down to threshold - 0.15)"),
            ParamSpec("model", .path, doc: "silero: the model file (default: .deps/onnx/share/silero-vad/silero_vad.onnx, or $VOICEPIPE_SILERO_MODEL)"),
            ParamSpec("start_ms", .int(10...10_000), default: 100, doc: "speech needed to open"),
            ParamSpec("stop_ms", .int(20...60_000),
                      doc: "silence needed to close (default 500); with turn_model, the silence after which the model is asked (default 100)"),
            ParamSpec("pre_roll_ms", .int(0...5_000), default: 300, doc: "audio kept before the onset (the start mark goes this far back)"),
            ParamSpec("gate", .bool, default: false, doc: "pass only speech (with pre-roll and trailing stop_ms)"),
            ParamSpec("end_on_silence_ms", .int(0...), default: 0, doc: "end the stream after this much silence following speech; 0 = never"),
            ParamSpec("turn_model", .choice(TurnModel.allCases.map(\.rawValue)), default: "none",
                      doc: "smart-turn: after stop_ms of silence (default 100) an end-of-turn model (Smart Turn v3.2 on ONNX Runtime; install with scripts/install-smart-turn.sh) decides how much longer to wait, by turn_policy, up to max_pause_ms"),
            ParamSpec("max_pause_ms", .int(100...60_000), default: 1500, doc: "turn_model: the longest pause inside a turn the model calls incomplete"),
            ParamSpec("turn_threshold", .double(0.05...0.95), default: 0.5, doc: "turn_model, turn_policy threshold: probability at which a turn is complete"),
            ParamSpec("turn_policy", .choice(TurnPolicy.allCases.map(\.rawValue)), default: "threshold",
                      doc: "turn_model: threshold: complete (probability ≥ turn_threshold) ends speech at once, incomplete waits up to max_pause_ms; scaled: the probability p sets the pause to wait out, min_pause_ms + (max_pause_ms - min_pause_ms)·(1 - p), ended sooner by nothing but speech"),
            ParamSpec("min_pause_ms", .int(0...60_000), default: 0, doc: "turn_policy scaled: the pause waited out when the model is sure the turn is over"),
            ParamSpec("turn_model_path", .path, doc: "turn_model: the model file (default: .deps/onnx/share/smart-turn/smart-turn-v3.2-cpu.onnx, or $VOICEPIPE_SMART_TURN_MODEL)"),
            ParamSpec("margin_db", .double(0...40), default: 6.0, doc: "speex: energy above the noise floor needed for speech"),
            ParamSpec("min_db", .double(-120...0), default: -55.0, doc: "speex: blocks quieter than this (dBFS) are silence"),
        ]

        /// The silence that closes speech, or with a turn model the silence after which the model is
        /// asked: `stop_ms` when given, else 500 ms, or 100 ms with a turn model (asked that early, the
        /// model ends complete turns sooner than a 350 ms VAD; see "End of turn" in BENCHMARKS.md).
        public var closingMs: Int { stopMs ?? (turnModel == .none ? 500 : 100) }

        /// A silero model given or found must exist (the library is checked when the node starts).
        public func problems() -> [String] { problems(environment: [:]) }

        public func problems(environment: [String: String]) -> [String] {
            var problems: [String] = []
            if turnModel == .smartTurn && turnPolicy == .scaled && minPauseMs > maxPauseMs {
                problems.append("turn_policy scaled: min_pause_ms (\(minPauseMs)) is longer than max_pause_ms (\(maxPauseMs))")
            }
            if turnModel == .smartTurn {
                if let turnModelPath {
                    if !FileManager.default.isReadableFile(atPath: turnModelPath) { problems.append("turn model \(turnModelPath) not found or not readable") }
                } else if SmartTurnFiles.model(nil, environment) == nil {
                    problems.append("turn_model smart-turn: no model found (looked in \(SmartTurnFiles.modelSearch)); run scripts/install-smart-turn.sh or set turn_model_path")
                }
            }
            return problems + sileroProblems(environment)
        }

        private func sileroProblems(_ environment: [String: String]) -> [String] {
            guard engine == .silero else { return [] }
            if let model {
                return FileManager.default.isReadableFile(atPath: model) ? [] : ["silero model \(model) not found or not readable"]
            }
            return SileroFiles.model(nil, environment) == nil
                ? ["engine silero: no model found (looked in \(SileroFiles.modelSearch)); run scripts/install-onnx.sh or set model"] : []
        }
    }

    /// The end-of-turn model, if any.
    public enum TurnModel: String, Sendable, Decodable, CaseIterable {
        /// Silence alone ends a turn.
        case none
        /// Smart Turn v3.2.
        case smartTurn = "smart-turn"
    }

    /// How the turn model's answer ends a turn.
    public enum TurnPolicy: String, Sendable, Decodable, CaseIterable {
        /// Complete (probability ≥ `turn_threshold`) ends it at once; incomplete waits up to `max_pause_ms`.
        case threshold
        /// The probability sets the pause to wait out, between `min_pause_ms` and `max_pause_ms`.
        case scaled
    }

    /// The classifier behind the node.
    public enum Engine: String, Sendable, Decodable, CaseIterable {
        /// speexdsp + energy.
        case speex
        /// Silero neural VAD.
        case silero
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "vad",
        summary: "Voice activity detection (speexdsp with a noise-floor energy test, or the Silero neural VAD; hysteresis); marks speechStart/speechEnd in-band, emits speech_start/speech_end",
        family: "DSP",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.audio], required: false, doc: "the audio, with speech marks (only speech with gate: true)"), .events],
        configuration: Configuration.self,
        format: .passthrough,
        make: { c, env in VADNode(configuration: c, variables: env.variables) })
}

/// A block classifier behind `vad`: feeds audio, calls back with speech or not per block.
protocol SpeechClassifier: AnyObject {
    func feed(_ samples: [Int16], format: AudioFormat, position: Int64,
              decide: (_ speech: Bool, _ from: Int64, _ to: Int64) throws -> Void) throws
}

extension SpeechDetector: SpeechClassifier {}
extension SileroDetector: SpeechClassifier {}
