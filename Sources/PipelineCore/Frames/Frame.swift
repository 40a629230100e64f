/// The kinds of frames that flow along edges.
public enum FrameKind: String, Sendable, Hashable, CaseIterable, Codable {
    /// Signed 16-bit interleaved PCM with a sample rate and channel count.
    case audio
    /// Codec payloads (`opus`, `pcm-s16le`, `base64-pcm`, ...).
    case encoded
    /// UTF-8 text, such as a final transcript.
    case text
    /// A named event with fields.
    case event
}

/// Sample rate and channel count of PCM audio.
public struct AudioFormat: Sendable, Hashable, CustomStringConvertible {
    /// Samples per second, per channel.
    public var sampleRate: Int
    /// Interleaved channels.
    public var channels: Int

    /// Creates a format.
    public init(sampleRate: Int, channels: Int) {
        self.sampleRate = sampleRate
        self.channels = channels
    }

    /// Bytes per second of s16 interleaved audio in this format.
    public var bytesPerSecond: Int { sampleRate * channels * 2 }

    /// Samples per channel in `ms` milliseconds.
    public func frames(ms: Int) -> Int { sampleRate * ms / 1000 }

    public var description: String { "\(sampleRate) Hz \(channels == 1 ? "mono" : channels == 2 ? "stereo" : "\(channels) ch")" }
}

/// The slice a frame belongs to, set by the `slicer` in utterance mode (and kept by encoders).
public struct SliceInfo: Sendable, Hashable {
    /// Identifier of the utterance (flow); a new one per utterance.
    public var voiceID: String
    /// Index of the slice within its utterance, from 0.
    public var seq: Int
    /// True on the first slice of an utterance.
    public var isFirst: Bool
    /// True on the last slice of an utterance.
    public var isLast: Bool

    /// Creates slice information.
    public init(voiceID: String, seq: Int, isFirst: Bool, isLast: Bool) {
        self.voiceID = voiceID
        self.seq = seq
        self.isFirst = isFirst
        self.isLast = isLast
    }
}

/// In-band markers carried by audio and encoded frames, so a plain chain needs no extra links.
public struct FrameMarks: Sendable, Hashable {
    /// Speech begins within (at the start of) this frame; set by the `vad`.
    public var speechStart: Bool = false
    /// Speech has ended at the end of this frame; set by the `vad`.
    public var speechEnd: Bool = false
    /// Why speech ended, alongside `speechEnd` (and on a flow's last slice); nil = not said (`silence`).
    public var endReason: EndReason? = nil
    /// A wake word was heard just before this frame; set by `wake`.
    public var wake: WakeMark? = nil
    /// Utterance slice identity; set by the `slicer`.
    public var slice: SliceInfo? = nil
    /// A gap precedes this frame (lost packets, a device overrun); set by sources and the jitter buffer.
    public var discontinuity: Bool = false
    /// The text this audio speaks; set by `tts`, so a sink can tell what was heard when it is interrupted.
    public var caption: Caption? = nil

    /// No markers.
    public static let none = FrameMarks()

    /// Creates markers.
    public init(speechStart: Bool = false, speechEnd: Bool = false, slice: SliceInfo? = nil, discontinuity: Bool = false,
                caption: Caption? = nil) {
        self.speechStart = speechStart
        self.speechEnd = speechEnd
        self.slice = slice
        self.discontinuity = discontinuity
        self.caption = caption
    }

    /// True when no marker is set.
    public var isEmpty: Bool { !speechStart && !speechEnd && slice == nil && !discontinuity && caption == nil && endReason == nil && wake == nil }
}

/// What a stretch of synthesized audio says: set by `tts` on every frame it sends.
public struct Caption: Sendable, Hashable {
    /// The text (one sentence) the audio speaks.
    public var text: String
    /// The answer the text belongs to: the `pts` of the text frame that asked for it (a responder gives
    /// every sentence of one answer the pts of the question), so a sink can tell answers apart.
    public var turn: Int64
    /// Ordinal of the text at its `tts` node: tells two equal sentences apart.
    public var index: Int
    /// Samples (per channel) of this text's audio before this frame.
    public var offset: Int
    /// Samples (per channel) of this text's whole audio, when known (the engine finished it).
    public var total: Int?

    /// Creates a caption.
    public init(text: String, turn: Int64, index: Int, offset: Int, total: Int? = nil) {
        self.text = text
        self.turn = turn
        self.index = index
        self.offset = offset
        self.total = total
    }
}

/// PCM audio: signed 16-bit interleaved samples.
public struct AudioBuffer: Sendable {
    /// Sample rate and channel count.
    public var format: AudioFormat
    /// Interleaved samples; `samples.count` is a multiple of `format.channels`.
    public var samples: [Int16]

    /// Creates a buffer.
    public init(format: AudioFormat, samples: [Int16]) {
        self.format = format
        self.samples = samples
    }

    /// Samples per channel.
    public var frameCount: Int { samples.count / max(format.channels, 1) }
    /// Duration in nanoseconds.
    public var durationNanos: Int64 { Int64(frameCount) * 1_000_000_000 / Int64(max(format.sampleRate, 1)) }
}

/// A codec payload.
public struct EncodedBuffer: Sendable {
    /// Codec name: `opus`, `pcm-s16le`, `base64-pcm`, ...
    public var codec: String
    /// Payload bytes.
    public var payload: [UInt8]
    /// Duration of the audio the payload represents, in nanoseconds.
    public var durationNanos: Int64
    /// Format of the audio the payload decodes to, when known.
    public var format: AudioFormat?

    /// Creates an encoded buffer.
    public init(codec: String, payload: [UInt8], durationNanos: Int64, format: AudioFormat? = nil) {
        self.codec = codec
        self.payload = payload
        self.durationNanos = durationNanos
        self.format = format
    }
}

/// What a frame carries.
public enum Payload: Sendable {
    case audio(AudioBuffer)
    case encoded(EncodedBuffer)
    case text(String)
    case event(Event)

    /// The kind of this payload.
    public var kind: FrameKind {
        switch self {
        case .audio: .audio
        case .encoded: .encoded
        case .text: .text
        case .event: .event
        }
    }
}

/// The unit that flows along an edge.
///
/// Every frame has a media timestamp derived from sample counts (not the wall clock)
/// and a sequence number stamped by the output port that sent it.
public struct Frame: Sendable {
    /// Sequence number, per output port, from 0; stamped when the frame is sent.
    public var seq: UInt64
    /// Media time of the first sample, in nanoseconds since the start of the stream.
    public var pts: Int64
    /// The content.
    public var payload: Payload
    /// In-band markers.
    public var marks: FrameMarks
    /// When the media in this frame was captured or created, on the pipeline's clock (time since the
    /// pipeline started). Stamped by the runtime: a source's audio and encoded frames get the
    /// instant they are sent; a frame a node derives from its input inherits the input's instant.
    /// The runtime measures each frame's age — now minus this — at every edge.
    public var created: Duration?

    /// Creates a frame.
    public init(payload: Payload, pts: Int64 = 0, seq: UInt64 = 0, marks: FrameMarks = .none) {
        self.payload = payload
        self.pts = pts
        self.seq = seq
        self.marks = marks
    }

    /// An audio frame.
    public static func audio(_ buffer: AudioBuffer, pts: Int64, marks: FrameMarks = .none) -> Frame {
        Frame(payload: .audio(buffer), pts: pts, marks: marks)
    }

    /// An audio frame whose timestamp is computed from the index of its first sample (per channel).
    public static func audio(_ samples: [Int16], format: AudioFormat, sampleIndex: Int64, marks: FrameMarks = .none) -> Frame {
        Frame(payload: .audio(AudioBuffer(format: format, samples: samples)),
              pts: MediaTime.nanos(samples: sampleIndex, rate: format.sampleRate), marks: marks)
    }

    /// A text frame.
    public static func text(_ text: String, pts: Int64 = 0) -> Frame { Frame(payload: .text(text), pts: pts) }

    /// An event frame.
    public static func event(_ event: Event, pts: Int64 = 0) -> Frame { Frame(payload: .event(event), pts: pts) }

    /// The kind of this frame.
    public var kind: FrameKind { payload.kind }

    /// The audio buffer, if this is an audio frame.
    public var audio: AudioBuffer? { if case .audio(let a) = payload { a } else { nil } }
    /// The encoded buffer, if this is an encoded frame.
    public var encoded: EncodedBuffer? { if case .encoded(let e) = payload { e } else { nil } }
    /// The text, if this is a text frame.
    public var text: String? { if case .text(let t) = payload { t } else { nil } }
    /// The event, if this is an event frame.
    public var event: Event? { if case .event(let e) = payload { e } else { nil } }

    /// Duration in nanoseconds (0 for text and events).
    public var durationNanos: Int64 {
        switch payload {
        case .audio(let a): a.durationNanos
        case .encoded(let e): e.durationNanos
        default: 0
        }
    }
}

/// Conversions between sample counts and media time.
public enum MediaTime {
    /// Nanoseconds for `samples` samples (per channel) at `rate`.
    @inlinable public static func nanos(samples: Int64, rate: Int) -> Int64 {
        rate > 0 ? samples * 1_000_000_000 / Int64(rate) : 0
    }
    /// Milliseconds for a nanosecond timestamp.
    @inlinable public static func millis(_ nanos: Int64) -> Int64 { nanos / 1_000_000 }
}
