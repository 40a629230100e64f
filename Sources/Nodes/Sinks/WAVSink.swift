import Foundation
import PipelineCore

/// `wav-sink`: writes audio to a 16-bit PCM WAV file; the header is finalized at end of stream,
/// on shutdown and on failure, so the file is always playable.
public actor WAVSinkNode: Node {
    let path: String

    init(configuration c: Configuration) { path = c.path }

    public func run(_ context: NodeContext) async throws {
        var writer: WAVWriter?
        defer { try? writer?.close() }
        for await frame in context.input() {
            guard let audio = frame.audio else { continue }
            if writer == nil { writer = try WAVWriter(path: path, format: audio.format) }
            guard audio.format == writer!.format else {
                throw NodeError("format_changed", "\(path): audio format changed from \(writer!.format) to \(audio.format) mid-stream; add a `resample` node")
            }
            try writer!.write(audio.samples)
        }
        if writer == nil {
            // No audio arrived: still leave a valid (empty) file.
            writer = try WAVWriter(path: path, format: AudioFormat(sampleRate: 16000, channels: 1))
        }
        try writer?.close()
    }

    /// Configuration of `wav-sink` (`device`, `rate`, `channels`, `frame_ms`, `latency_ms`, `drift_compensation`, `on_device_lost` are accepted
    /// and ignored, so a playback node can be swapped for a file).
    public struct Configuration: NodeConfiguration {
        public var path: String
        public static let parameters: [ParamSpec] = [
            ParamSpec("path", .string, required: true, doc: "output file"),
            ParamSpec("device", .string, doc: "ignored (accepted so a playback node can be swapped for a file)"),
            ParamSpec("rate", .int, doc: "ignored (the file takes the incoming format)"),
            ParamSpec("channels", .int, doc: "ignored (the file takes the incoming format)"),
            ParamSpec("frame_ms", .int, doc: "ignored"),
            ParamSpec("latency_ms", .int, doc: "ignored"),
            ParamSpec("drift_compensation", .bool, doc: "ignored"),
            ParamSpec("on_device_lost", .string, doc: "ignored (a file is never lost)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "wav-sink", summary: "Writes audio to a 16-bit PCM WAV file",
        family: "sinks", inputs: [PortSpec("in", [.audio])], outputs: [],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in WAVSinkNode(configuration: c) })
}
