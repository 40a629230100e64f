import PipelineCore

/// What a WebSocket session has yet to write to its client, in order: text messages (the graph's
/// events, the protocol's notes), which are never dropped, and the answer's audio (binary little-endian
/// s16 PCM), of which at most `capacityNanos` waits — when more arrives the oldest waiting audio is
/// dropped and counted, so a client that reads slowly (or not at all) neither holds up the graph nor
/// makes the server's memory grow.
///
/// A pure state machine: the session holds it under its lock, adds to it as the graph produces, and
/// takes messages with ``next()`` only while the connection can take them (NIO's writability).
///
/// Protocol notes it writes around the audio (text messages, `type` rather than `event`):
/// - `{"type":"audio_format","rate":R,"channels":C,"encoding":"s16le"}` before the first audio, and again
///   if the format changes;
/// - `{"type":"audio_start"}` before the audio of a frame marked `speechStart` (a `tts` text's first),
///   `{"type":"audio_end"}` after one marked `speechEnd` (its last);
/// - `{"type":"audio_flush","flushed_ms":N}` when an interrupt discarded the audio not yet sent (the
///   client should stop playing what it holds);
/// - `{"type":"audio_stats",...}` (``statsNote``) as the session's last message.
struct SessionOutbox: Sendable {
    /// One WebSocket message.
    enum Message: Sendable, Equatable {
        case text(String)
        case audio([UInt8], nanos: Int64)
    }

    /// Audio counters: what was sent, dropped (the client fell behind), flushed (interrupts).
    struct Counts: Sendable, Equatable {
        var sentMessages = 0
        var sentNanos: Int64 = 0
        var droppedMessages = 0
        var droppedNanos: Int64 = 0
        var flushedMessages = 0
        var flushedNanos: Int64 = 0
    }

    /// Most audio waiting to be written, in nanoseconds of media.
    let capacityNanos: Int64
    private var queue: [Message] = []
    private var head = 0
    private var queuedAudioNanos: Int64 = 0
    private var queuedAudioMessages = 0
    private var announced: AudioFormat?
    private(set) var counts = Counts()

    init(capacityMs: Int) {
        capacityNanos = Int64(max(capacityMs, 1)) * 1_000_000
    }

    /// Nothing waits.
    var isEmpty: Bool { head == queue.count }
    /// Messages waiting.
    var count: Int { queue.count - head }
    /// Audio waiting, in nanoseconds.
    var waitingAudioNanos: Int64 { queuedAudioNanos }
    /// True once any answer audio was queued.
    var hasAnswered: Bool { announced != nil }

    /// Queues a text message (never dropped).
    mutating func text(_ text: String) {
        queue.append(.text(text))
    }

    /// Queues one frame of answer audio with its notes (format, start, end). Returns how many audio
    /// messages were dropped to make room (oldest first).
    @discardableResult
    mutating func audio(_ buffer: AudioBuffer, marks: FrameMarks = .none) -> (messages: Int, nanos: Int64) {
        if announced != buffer.format {
            announced = buffer.format
            text(Self.formatNote(buffer.format))
        }
        if marks.speechStart { text(#"{"type":"audio_start"}"#) }
        let nanos = buffer.durationNanos
        var dropped = (messages: 0, nanos: Int64(0))
        if !buffer.samples.isEmpty {
            while queuedAudioMessages > 0 && queuedAudioNanos + nanos > capacityNanos {
                let d = dropOldestAudio()
                dropped.messages += 1
                dropped.nanos += d
            }
            queue.append(.audio(Self.littleEndian(buffer.samples), nanos: nanos))
            queuedAudioNanos += nanos
            queuedAudioMessages += 1
        }
        if marks.speechEnd { text(#"{"type":"audio_end"}"#) }
        counts.droppedMessages += dropped.messages
        counts.droppedNanos += dropped.nanos
        return dropped
    }

    /// An interrupt: every audio message not yet written is discarded (counted as flushed) and the
    /// client is told with `audio_flush`. Returns what was discarded.
    @discardableResult
    mutating func flushAudio() -> (messages: Int, nanos: Int64) {
        let removed = removeAllAudio()
        counts.flushedMessages += removed.messages
        counts.flushedNanos += removed.nanos
        text(#"{"type":"audio_flush","flushed_ms":\#(removed.nanos / 1_000_000)}"#)
        return removed
    }

    /// At the end of a session whose client no longer takes anything: the audio still waiting is
    /// dropped (counted); the text messages stay. Returns what was dropped.
    @discardableResult
    mutating func dropWaitingAudio() -> (messages: Int, nanos: Int64) {
        let removed = removeAllAudio()
        counts.droppedMessages += removed.messages
        counts.droppedNanos += removed.nanos
        return removed
    }

    /// The next message to write, in order.
    mutating func next() -> Message? {
        guard head < queue.count else { return nil }
        let m = queue[head]
        head += 1
        if head > 256 && head * 2 > queue.count {
            queue.removeFirst(head)
            head = 0
        }
        if case .audio(_, let nanos) = m {
            queuedAudioNanos -= nanos
            queuedAudioMessages -= 1
            counts.sentMessages += 1
            counts.sentNanos += nanos
        }
        return m
    }

    /// Forgets everything waiting (the connection is gone), without counting it.
    mutating func removeAll() {
        queue.removeAll()
        head = 0
        queuedAudioNanos = 0
        queuedAudioMessages = 0
    }

    /// `{"type":"audio_stats",...}`: the session's answer audio sent, dropped and flushed.
    var statsNote: String {
        let c = counts
        return #"{"type":"audio_stats","sent_messages":\#(c.sentMessages),"sent_ms":\#(c.sentNanos / 1_000_000),"#
            + #""dropped_messages":\#(c.droppedMessages),"dropped_ms":\#(c.droppedNanos / 1_000_000),"#
            + #""flushed_messages":\#(c.flushedMessages),"flushed_ms":\#(c.flushedNanos / 1_000_000)}"#
    }

    static func formatNote(_ f: AudioFormat) -> String {
        #"{"type":"audio_format","rate":\#(f.sampleRate),"channels":\#(f.channels),"encoding":"s16le"}"#
    }

    static func littleEndian(_ samples: [Int16]) -> [UInt8] {
        var bytes = [UInt8](repeating: 0, count: samples.count * 2)
        for (i, s) in samples.enumerated() {
            let u = UInt16(bitPattern: s)
            bytes[2 * i] = UInt8(u & 0xFF)
            bytes[2 * i + 1] = UInt8(u >> 8)
        }
        return bytes
    }

    private mutating func dropOldestAudio() -> Int64 {
        for i in head..<queue.count {
            if case .audio(_, let nanos) = queue[i] {
                queue.remove(at: i)
                queuedAudioNanos -= nanos
                queuedAudioMessages -= 1
                return nanos
            }
        }
        return 0
    }

    private mutating func removeAllAudio() -> (messages: Int, nanos: Int64) {
        guard queuedAudioMessages > 0 else { return (0, 0) }
        let removed = (messages: queuedAudioMessages, nanos: queuedAudioNanos)
        queue = queue[head...].filter { if case .text = $0 { true } else { false } }
        head = 0
        queuedAudioNanos = 0
        queuedAudioMessages = 0
        return removed
    }
}
