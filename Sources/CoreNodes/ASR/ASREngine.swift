import PipelineCore

/// A speech recognition engine behind the `asr` node (PocketSphinx in-process, a cloud service
/// over the network, ...).
///
/// The node turns its input frames into a well-formed stream of ``ASRInput``s and hands it to
/// ``run(inputs:results:context:)``; the engine sends back ``ASRResult``s, which the node turns
/// into events and text frames.
///
/// Contract:
/// - `run` is called once per node run. It reads `inputs` until it returns `nil` (end of stream),
///   delivers every result still due, then returns. It may read inputs and send results from
///   different tasks (a network client reads server messages while it sends audio), but reads
///   `inputs` from one task at a time.
/// - Inputs are well formed: `.utteranceStart` and `.utteranceEnd` alternate, and every
///   started utterance is ended before the stream ends. `.audio` arrives between them, and also
///   outside utterances (silence between utterances, or all the audio when nothing marks
///   utterances and ``segmentsUnmarkedAudio`` is true).
/// - Audio is s16 in ``ASREngineConfiguration/inputFormat`` (the node converts when it differs).
/// - Per utterance, send `.utteranceStart`, any number of `.partial`s, one `.final`, then
///   `.utteranceEnd`, all with the same voice id and seq. An engine that segments by itself
///   (a server-side VAD) may report several utterances inside one input utterance, or
///   utterances where the input marks none.
/// - A recoverable problem (a server error code, a dropped connection that will be retried) is a
///   `.error` result; the pipeline goes on. Throw a `NodeError` for a fatal one (bad model path,
///   rejected credentials), which stops the pipeline naming the node.
/// - Blocking calls (a decoder) run on a thread of their own (``BlockingWorker``), never on the
///   cooperative pool. Time comes from `context.clock`. `context` also gives the logger and
///   counters (`context.count("dropped_audio")`); engines never read or write its ports and never
///   log secrets.
public protocol ASREngine: Sendable {
    /// True when the engine finds utterances in unmarked audio itself (e.g. the server's VAD).
    /// When false and the input carries no VAD or slicer marks, the node runs its own endpointer
    /// and sends `.utteranceStart` / `.utteranceEnd` around each utterance it finds.
    var segmentsUnmarkedAudio: Bool { get }

    /// Recognizes `inputs` until they end, sending results to `results`.
    func run(inputs: ASRInputs, results: ASRResults, context: NodeContext) async throws
}

/// What the node feeds an engine.
public enum ASRInput: Sendable {
    /// An utterance begins. `voiceID` comes from the slicer (or is made by the node);
    /// `seq` counts utterances of this node from 0; `startMs` is the media time of its first sample.
    case utteranceStart(voiceID: String, seq: Int, startMs: Int64)
    /// Audio, in order and without gaps (a gap shows as `marks.discontinuity`).
    case audio(ASRAudio)
    /// The open utterance ended (after its last audio).
    case utteranceEnd
}

/// A chunk of audio for an engine.
public struct ASRAudio: Sendable {
    /// s16 samples in the engine's input format.
    public var samples: [Int16]
    /// Their format.
    public var format: AudioFormat
    /// Media time of the first sample, in nanoseconds since the start of the stream.
    public var pts: Int64
    /// The markers of the frame the audio came from.
    public var marks: FrameMarks

    /// Creates a chunk.
    public init(samples: [Int16], format: AudioFormat, pts: Int64, marks: FrameMarks = .none) {
        self.samples = samples
        self.format = format
        self.pts = pts
        self.marks = marks
    }

    /// Media time of the first sample in milliseconds.
    public var startMs: Int64 { pts / 1_000_000 }
    /// Media time just after the last sample in milliseconds.
    public var endMs: Int64 {
        (pts + MediaTime.nanos(samples: Int64(samples.count / max(format.channels, 1)), rate: format.sampleRate)) / 1_000_000
    }
}

/// A recognized text: partial (speech goes on) or final (one per utterance).
public struct ASRTranscript: Sendable, Hashable {
    /// The text (empty when nothing was recognized).
    public var text: String
    /// The utterance's voice id.
    public var voiceID: String
    /// The utterance's sequence number.
    public var seq: Int
    /// Media time where the text begins, in milliseconds.
    public var startMs: Int64
    /// Media time where the text ends, in milliseconds.
    public var endMs: Int64
    /// Word timings, when the engine gives them (Tencent with `word_info`).
    public var words: [ASRWord]
    /// Other readings of a final result, best first (PocketSphinx with `alternatives: N`).
    public var alternatives: [ASRAlternative]
    /// The language the engine heard, when it says (Whisper: a code such as `en` or `zh`).
    public var language: String?
    /// Milliseconds the engine spent decoding a final (Whisper), when it says.
    public var decodeMs: Int64?
    /// Milliseconds a final waited for a decoder before its decoding began (Whisper), when the engine says.
    public var queuedMs: Int64?

    /// Creates a transcript.
    public init(text: String, voiceID: String, seq: Int, startMs: Int64, endMs: Int64, words: [ASRWord] = [],
                alternatives: [ASRAlternative] = [], language: String? = nil) {
        self.text = text
        self.voiceID = voiceID
        self.seq = seq
        self.startMs = startMs
        self.endMs = endMs
        self.words = words
        self.alternatives = alternatives
        self.language = language
    }
}

/// One reading of an utterance with the engine's confidence in it (0...1).
public struct ASRAlternative: Sendable, Hashable {
    /// The text.
    public var text: String
    /// Confidence, 0...1.
    public var confidence: Double

    /// Creates an alternative.
    public init(text: String, confidence: Double) {
        self.text = text
        self.confidence = confidence
    }
}

/// One recognized word with its media times.
public struct ASRWord: Sendable, Hashable {
    /// The word.
    public var word: String
    /// Media time where it begins, in milliseconds.
    public var startMs: Int64
    /// Media time where it ends, in milliseconds.
    public var endMs: Int64
    /// False while the engine may still change it.
    public var stable: Bool

    /// Creates a word.
    public init(word: String, startMs: Int64, endMs: Int64, stable: Bool) {
        self.word = word
        self.startMs = startMs
        self.endMs = endMs
        self.stable = stable
    }
}

/// What an engine reports. These mirror a recognizer SDK's callbacks.
public enum ASRResult: Sendable {
    /// An utterance (sentence) begins.
    case utteranceStart(voiceID: String, seq: Int)
    /// A hypothesis while speech goes on (event `transcript` with `final: false`).
    case partial(ASRTranscript)
    /// The utterance's result (event `transcript` with `final: true`, and a frame on `text`).
    case final(ASRTranscript)
    /// The utterance ended.
    case utteranceEnd(voiceID: String, seq: Int)
    /// A recoverable error (event `error`); `code` is stable (`server_error_4002`, `reconnecting`, ...).
    case error(code: String, message: String, voiceID: String? = nil)
}

/// Where an engine sends its results. Safe to call from any task; results are handled in the
/// order the calls complete.
public struct ASRResults: Sendable {
    private let deliver: @Sendable (ASRResult) async throws -> Void

    /// Creates a sink that calls `deliver` for every result (tests collect them this way).
    public init(_ deliver: @escaping @Sendable (ASRResult) async throws -> Void) {
        self.deliver = deliver
    }

    /// Sends a result.
    public func send(_ result: ASRResult) async throws {
        try await deliver(result)
    }
}

/// The input stream of an engine. Read it from one task at a time; `nil` means end of stream:
/// flush, deliver what is due and return.
public final class ASRInputs: AsyncSequence, Sendable {
    public typealias Element = ASRInput
    private let source: @Sendable () async -> ASRInput?

    /// Creates a stream that calls `next` for each input (tests feed scripted inputs this way).
    public init(_ next: @escaping @Sendable () async -> ASRInput?) {
        self.source = next
    }

    /// A stream of fixed inputs.
    public convenience init(_ inputs: [ASRInput]) {
        let box = ASRInputList(inputs)
        self.init { await box.next() }
    }

    /// The next input, or `nil` at end of stream.
    public func next() async -> ASRInput? { await source() }

    /// Iterator over the inputs.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let inputs: ASRInputs
        public mutating func next() async -> ASRInput? { await inputs.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(inputs: self) }
}

/// A fixed list of inputs handed out one at a time.
private actor ASRInputList {
    private var items: [ASRInput]
    private var index = 0
    init(_ items: [ASRInput]) { self.items = items }
    func next() -> ASRInput? {
        guard index < items.count else { return nil }
        defer { index += 1 }
        return items[index]
    }
}

/// The typed parameters of one ``ASREngine``: the `asr` node parameters that only this engine uses,
/// decoded from the node's parameters when the engine is the one selected.
///
/// ``NodeConfiguration/parameters`` lists these parameters; they become part of the `asr` node's
/// parameters and carry no default there (the engine applies its own), so that giving one while
/// another engine is selected is reported at validation. ``NodeConfiguration/problems()`` reports
/// the engine's own problems (conflicting options, unreadable files).
public protocol ASREngineConfiguration: NodeConfiguration {
    /// The audio format the engine takes (16 kHz mono unless the engine says otherwise).
    var inputFormat: AudioFormat { get }
}

extension ASREngineConfiguration {
    /// 16 kHz mono.
    public var inputFormat: AudioFormat { AudioFormat(sampleRate: 16000, channels: 1) }
}
