import PipelineCore

/// The recent audio of a turn for the end-of-turn model: a 16 kHz mono copy (converted when the
/// input differs) of the last 8 s, addressed by input sample positions.
struct TurnAudio {
    static let rate = 16000
    static let keep = 8 * 16000
    private var converter: AudioConverter?
    private var format: AudioFormat?
    private var samples: [Int16] = []
    /// Analysis samples appended so far (the buffer holds the last of them).
    private var total: Int64 = 0
    /// Input position of analysis sample 0.
    private var origin: Int64 = 0
    /// Analysis sample where the current turn starts.
    private(set) var onset: Int64 = 0

    /// Appends input audio whose first sample is input sample `position`.
    mutating func append(_ audio: AudioBuffer, position: Int64) throws {
        if audio.format != format {
            format = audio.format
            let target = AudioFormat(sampleRate: Self.rate, channels: 1)
            converter = audio.format == target ? nil : try AudioConverter(from: audio.format, to: target, quality: 3)
            origin = position - total * Int64(audio.format.sampleRate) / Int64(Self.rate)
        }
        let converted = converter?.convert(audio.samples) ?? audio.samples
        samples.append(contentsOf: converted)
        total += Int64(converted.count)
        if samples.count > 2 * Self.keep { samples.removeFirst(samples.count - Self.keep) }
    }

    /// Marks input sample `position` as the start of a turn.
    mutating func startTurn(at position: Int64) {
        let r = Int64(format?.sampleRate ?? Self.rate)
        onset = max(0, (position - origin) * Int64(Self.rate) / r)
    }

    /// The audio from analysis sample `start` to now (at most the last 8 s).
    func audio(since start: Int64) -> ArraySlice<Int16> {
        let first = total - Int64(samples.count)
        let from = max(start, first, total - Int64(Self.keep))
        return samples[Int(from - first)...]
    }
}
