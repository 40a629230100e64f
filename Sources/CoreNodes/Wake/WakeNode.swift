import Foundation
import PipelineCore

/// `wake`: wake word detection on TensorFlow Lite loaded at run time, with openWakeWord's models
/// (``OpenWakeWord``: `alexa`, `hey_jarvis`, `hey_mycroft`, `hey_rhasspy`, `okay_nabu` from the
/// `pyopen-wakeword` wheel) or microWakeWord's (``MicroWakeWord``: `alexa`, `hey_jarvis`,
/// `hey_mycroft`, `okay_nabu` from the `pymicro-wakeword` wheel); `scripts/install-wake.sh` installs
/// both and the library. `engine` picks per word (`auto`: see ``WakeEngines``).
///
/// A word whose score passes its threshold emits `wake` (`word`, `score`, `engine`, `media_ms` of the
/// audio analysed when it fired) and marks the next frame with `FrameMarks.wake`, where the `slicer`
/// starts a flow; the same word does not fire again within `refractory_ms`.
///
/// `gate: true` passes audio only while listening: from a detection until the VAD says the speech
/// ended (its events linked back into `listen`: `vad.events -> wake.listen`). When no `speech_start`
/// comes within `listen_timeout_ms` of the detection (or, without a `listen` link, once that much time
/// has passed) the frame there is marked `speechEnd` with reason `wake_timeout`, which ends the flow,
/// and `listen_end` (`media_ms`, `reason: wake_timeout`) is emitted.
/// `gate: false` passes everything and only marks.
///
/// ```yaml
/// wake: { type: wake, words: [hey_jarvis], gate: true, listen_timeout_ms: 5000 }
/// ```
public actor WakeNode: Node {
    let words: [String]
    let engine: String
    let threshold: Double?
    let refractoryMs: Int
    let gate: Bool
    let listenTimeoutMs: Int
    let models: String?
    let hopMs: Int
    let denoise: Bool

    private var listening = false
    private var heardSpeech = false
    private var speechOver = false

    /// The graph's environment variables (where the models and TensorFlow Lite are found).
    let variables: [String: String]

    init(configuration c: Configuration, variables: [String: String] = [:]) {
        self.variables = variables
        words = c.words
        engine = c.engine
        threshold = c.threshold
        refractoryMs = c.refractoryMs
        gate = c.gate
        listenTimeoutMs = c.listenTimeoutMs
        models = c.models
        hopMs = c.hopMs
        denoise = c.denoise
    }

    public func run(_ context: NodeContext) async throws {
        let plan = try WakeEngines.plan(words: words, engine: engine, models: models, variables: variables)
        let detector = try WakeDetector(plan: plan, threshold: threshold, hopFrames: hopMs / 10, denoise: denoise, variables: variables)
        let linked = context.connectedInputs.contains("listen")
        try await withThrowingTaskGroup(of: Void.self) { group in
            if linked {
                group.addTask {
                    for await frame in context.input("listen") {
                        if let e = frame.event { await self.heard(e.name) }
                    }
                }
            }
            try await detect(detector, linked: linked, context: context)
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// The VAD's events: speech after a wake word, and its end.
    private func heard(_ name: EventName) {
        guard listening else { return }
        if name == .speechStart { heardSpeech = true }
        if name == .speechEnd && heardSpeech { speechOver = true }
    }

    private func detect(_ detector: WakeDetector, linked: Bool, context: NodeContext) async throws {
        let analysis = AudioFormat(sampleRate: 16000, channels: 1)
        var converter: AudioConverter?
        var inputFormat: AudioFormat?
        var lastFired: [String: Int64] = [:]
        var analysed: Int64 = 0
        var origin: Int64?
        var markNext: WakeMark?
        var listenStart: Int64 = 0
        for await frame in context.input() {
            guard let audio = frame.audio else { try await context.send(frame); continue }
            if origin == nil { origin = frame.pts }
            if audio.format != inputFormat {
                inputFormat = audio.format
                converter = audio.format == analysis ? nil : try AudioConverter(from: audio.format, to: analysis, quality: 3)
            }
            let samples = converter?.convert(audio.samples) ?? audio.samples
            let fired = try detector.feed(samples)
            analysed += Int64(samples.count)
            let nowMs = analysed / 16 + MediaTime.millis(origin ?? 0)
            var out = frame
            if let m = markNext { out.marks.wake = m; markNext = nil }
            if gate && listening {
                let timedOut = nowMs - listenStart >= Int64(listenTimeoutMs) && (!heardSpeech || !linked)
                if speechOver || timedOut {
                    listening = false
                    if timedOut {
                        out.marks.speechEnd = true
                        out.marks.endReason = .wakeTimeout
                        try await context.emit(.listenEnd, [("media_ms", .int(nowMs))] + EndReason.wakeTimeout.fields)
                    }
                    try await context.send(out)
                    continue
                }
            }
            if !gate || listening || out.marks.wake != nil { try await context.send(out) }
            if let f = fired, nowMs - (lastFired[f.word] ?? Int64.min / 2) >= Int64(refractoryMs) {
                lastFired[f.word] = nowMs
                try await context.emit(.wake, [("word", .string(f.word)), ("score", .double((f.score * 1000).rounded() / 1000)),
                                                 ("engine", .string(f.engine.rawValue)), ("media_ms", .int(nowMs))])
                markNext = WakeMark(word: f.word, score: f.score)
                if gate {
                    listening = true
                    heardSpeech = false
                    speechOver = false
                    listenStart = nowMs
                }
            }
        }
    }

    /// Configuration of `wake`.
    public struct Configuration: NodeConfiguration {
        public var words: [String]
        public var engine: String
        public var threshold: Double?
        public var refractoryMs: Int
        public var gate: Bool
        public var listenTimeoutMs: Int
        public var models: String?
        public var hopMs: Int
        public var denoise: Bool
        public static let parameters: [ParamSpec] = [
            ParamSpec("words", .stringList, default: .list([.string("hey_jarvis")]), doc: "the wake words: model names (alexa, hey_jarvis, hey_mycroft, okay_nabu from either engine; hey_rhasspy from openWakeWord)"),
            ParamSpec("engine", .choice(WakeEngines.choices), default: "auto", doc: "which models: microwakeword, openwakeword, or auto (each word from the engine measured better for it when installed, see WakeEngines)"),
            ParamSpec("threshold", .double(0.05...0.999), doc: "score a word must pass to fire (default: 0.5 for openWakeWord, each microWakeWord model's own probability_cutoff)"),
            ParamSpec("refractory_ms", .int(0...60_000), default: 2000, doc: "a word does not fire again within this time"),
            ParamSpec("gate", .bool, default: false, doc: "pass audio only from a detection until the VAD's speech_end (linked into listen) or listen_timeout_ms without speech; false: pass everything"),
            ParamSpec("listen_timeout_ms", .int(100...600_000), default: 8000, doc: "gate: with no speech_start this long after the wake word, end the flow with reason wake_timeout"),
            ParamSpec("hop_ms", .int(10...80), default: 20, doc: "how often the word classifiers judge the audio: 80 is openWakeWord's own step; shorter judges more alignments of a phrase (each 80 ms apart within itself) and finds more, at a cost in CPU (20: four times the embedding work)"),
            ParamSpec("denoise", .bool, default: true, doc: "openWakeWord hears the audio through speexdsp's noise suppression (as openWakeWord's option does); the audio passed on is untouched (microWakeWord's own front end reduces noise)"),
            ParamSpec("models", .path, doc: "folder with openWakeWord's melspectrogram.tflite, embedding_model.tflite and <word>.tflite, and/or microWakeWord's <word>.json with its model (default: .deps/wake/models and .deps/wake/micro, or $VOICEPIPE_WAKE_MODELS)"),
        ]

        public func problems() -> [String] { problems(environment: [:]) }

        public func problems(environment: [String: String]) -> [String] {
            if words.isEmpty { return ["give at least one wake word"] }
            if ![10, 20, 40, 80].contains(hopMs) { return ["hop_ms \(hopMs): give 10, 20, 40 or 80 (a whole number of 10 ms mel frames dividing openWakeWord's 80 ms step)"] }
            do {
                _ = try WakeEngines.plan(words: words, engine: engine, models: models, variables: environment)
                return []
            } catch let e as NodeError {
                return [e.message]
            } catch {
                return ["\(error)"]
            }
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "wake",
        summary: "Wake words (microWakeWord and openWakeWord models on TensorFlow Lite); emits wake, marks the next frame so the slicer starts a flow; gate passes audio only while listening",
        family: "Wake",
        inputs: [PortSpec("in", [.audio]),
                 PortSpec("listen", [.event], required: false, feedback: true, doc: "the VAD's events (speech_start / speech_end) closing the gate")],
        outputs: [PortSpec("out", [.audio], required: false, doc: "the audio (only while listening with gate: true), the frame after a detection marked wake"), .events],
        configuration: Configuration.self,
        format: .passthrough,
        make: { c, env in WakeNode(configuration: c, variables: env.variables) })
}

/// The `wake` family.
enum WakeNodes {
    static let all: [NodeDescriptor] = [WakeNode.descriptor]
}

/// speexdsp's noise suppression on 10 ms blocks of 16 kHz audio, for what openWakeWord hears.
/// Samples that do not fill a block wait for the next call.
final class WakeDenoiser {
    static let block = 160
    private let denoiser: SpeexDenoiser
    private var pending: [Int16] = []

    init() throws { denoiser = try SpeexDenoiser(blockSamples: Self.block, code: .wakeFailed) }

    /// The denoised samples of every whole block now available.
    func process(_ samples: [Int16]) -> [Int16] {
        pending.append(contentsOf: samples)
        let whole = pending.count / Self.block * Self.block
        guard whole > 0 else { return [] }
        var out = Array(pending[0..<whole])
        out.withUnsafeMutableBufferPointer { buffer in
            guard let base = buffer.baseAddress else { return }
            for start in stride(from: 0, to: whole, by: Self.block) { denoiser.run(base + start) }
        }
        pending.removeFirst(whole)
        return out
    }
}
