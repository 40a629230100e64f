import Foundation
import PipelineCore

/// `wav-sink`: writes audio to a 16-bit PCM WAV file; the header is finalized at end of stream,
/// on shutdown and on failure, so the file is always playable.
///
/// `realtime: true` writes at the pace of a loudspeaker (1x), so the file stands in for a device in
/// tests of talking back: audio then waits on the input, an event on `interrupt` discards it and
/// `interrupted` tells what of the answer was written (see `alsa-sink`). `out` carries what was
/// written, as it is written.
public actor WAVSinkNode: Node {
    let path: String
    let realtime: Bool
    private var ledger = PlaybackLedger()
    private var rate = 16000
    private var lastTurn: Int64?

    init(configuration c: Configuration) {
        path = c.path
        realtime = c.realtime
    }

    public func run(_ context: NodeContext) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            if context.connectedInputs.contains("interrupt") {
                group.addTask {
                    for await frame in context.input("interrupt") where frame.event != nil {
                        try await self.interrupt(context: context)
                    }
                }
            }
            try await write(context)
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    private func write(_ context: NodeContext) async throws {
        var writer: WAVWriter?
        defer { try? writer?.close() }
        let out = context.output("out")
        let pacer = context.makePacer()
        var written: Int64 = 0
        for await frame in context.input() {
            guard let audio = frame.audio else { continue }
            if ledger.isCut(frame.marks) { context.count("interrupted_frames"); continue }
            if writer == nil { writer = try WAVWriter(path: path, format: audio.format); rate = audio.format.sampleRate }
            guard audio.format == writer!.format else {
                throw NodeError(.formatChanged, "\(path): audio format changed from \(writer!.format) to \(audio.format) mid-stream; add a `resample` node")
            }
            if let turn = frame.marks.caption?.turn, turn != lastTurn {
                lastTurn = turn
                try await context.emit(.playbackStart, [("delay_ms", .int(0)), ("text", .string(frame.marks.caption!.text)),
                                                          ("turn_ms", .int(MediaTime.millis(turn)))])
            }
            if realtime {
                // Written when a loudspeaker would play it: a frame's audio may go ahead of the clock by its own length.
                let at = Duration.nanoseconds(MediaTime.nanos(samples: written, rate: audio.format.sampleRate))
                let idle = pacer.elapsed - at
                if idle > .milliseconds(100) {
                    // Nothing was playing: the timeline restarts now.
                    written = Int64((Double(audio.format.sampleRate) * (pacer.elapsed / .seconds(1))).rounded())
                } else {
                    try await pacer.wait(until: at)
                }
                if ledger.isCut(frame.marks) { context.count("interrupted_frames"); continue }
            }
            try writer!.write(audio.samples)
            written += Int64(audio.frameCount)
            ledger.queued(frame.marks, samples: audio.frameCount)
            ledger.played(through: ledger.queued)
            if out.isConnected { try await out.send(frame) }
        }
        if writer == nil {
            // No audio arrived: still leave a valid (empty) file.
            writer = try WAVWriter(path: path, format: AudioFormat(sampleRate: 16000, channels: 1))
        }
        try writer?.close()
    }

    /// An event on `interrupt`: the audio waiting on the input is discarded; `interrupted` tells what
    /// of the answer was written.
    private func interrupt(context: NodeContext) async throws {
        var flushed: [(FrameMarks, Int)] = []
        let n = context.input().flush(where: { f in
            guard let a = f.audio else { return false }
            flushed.append((f.marks, a.frameCount))
            return true
        })
        if n > 0 { context.count("interrupted_frames", by: UInt64(n)) }
        for (m, c) in flushed { ledger.queued(m, samples: c) }
        lastTurn = nil
        guard let heard = ledger.interrupt(rate: rate) else { return }
        context.count("interruptions")
        var fields: [(String, EventValue)] = [("text", .string(heard.text)), ("heard_ms", .int(Int64(heard.samples * 1000 / max(rate, 1)))),
                                              ("discarded_ms", .int(Int64(heard.discarded * 1000 / max(rate, 1))))]
        if let turn = heard.turn { fields.append(("turn_ms", .int(MediaTime.millis(turn)))) }
        try await context.emit(.interrupted, fields)
    }

    /// Configuration of `wav-sink` (`device`, `rate`, `channels`, `frame_ms`, `latency_ms`, `drift_compensation`, `on_device_lost` are accepted
    /// and ignored, so a playback node can be swapped for a file).
    public struct Configuration: NodeConfiguration {
        public var path: String
        public var realtime: Bool
        public static let parameters: [ParamSpec] = [
            ParamSpec("path", .string, required: true, doc: "output file"),
            ParamSpec("realtime", .bool, default: false, doc: "write at the pace of a loudspeaker (1x), so an interruption finds audio not yet written"),
            ParamSpec("device", .string, ignored: true, doc: "ignored (accepted so a playback node can be swapped for a file)"),
            ParamSpec("rate", .int, ignored: true, doc: "ignored (the file takes the incoming format)"),
            ParamSpec("channels", .int, ignored: true, doc: "ignored (the file takes the incoming format)"),
            ParamSpec("frame_ms", .int, ignored: true, doc: "ignored"),
            ParamSpec("latency_ms", .int, ignored: true, doc: "ignored"),
            ParamSpec("drift_compensation", .bool, ignored: true, doc: "ignored"),
            ParamSpec("on_device_lost", .string, ignored: true, doc: "ignored (a file is never lost)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "wav-sink", summary: "Writes audio to a 16-bit PCM WAV file",
        family: "sinks", inputs: [PortSpec("in", [.audio]),
                                   .interrupt("any event discards the audio waiting; `interrupted` tells what of the answer was written")],
        outputs: [PortSpec("out", [.audio], doc: "what was written, as it is written (an echo canceller's reference)"), .events],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in WAVSinkNode(configuration: c) })
}
