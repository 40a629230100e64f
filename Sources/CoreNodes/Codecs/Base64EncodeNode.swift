import Foundation
import PipelineCore

/// `base64-encode`: s16 little-endian PCM to base64, for JSON APIs. Each audio frame becomes one
/// encoded frame (codec `base64-pcm`, payload = the ASCII base64 text of the frame's bytes, same
/// pts, duration, format and marks).
public actor Base64EncodeNode: FrameProcessor {
    init() {}

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        try await context.send(Frame(payload: .encoded(Self.encode(audio)), pts: frame.pts, marks: frame.marks))
    }

    /// The encoded buffer for `audio`.
    static func encode(_ audio: AudioBuffer) -> EncodedBuffer {
        let data = audio.samples.withUnsafeBufferPointer { p -> Data in
            #if _endian(little)
            return Data(buffer: p)
            #else
            var d = Data(capacity: p.count * 2)
            for v in p { withUnsafeBytes(of: v.littleEndian) { d.append(contentsOf: $0) } }
            return d
            #endif
        }
        return EncodedBuffer(codec: "base64-pcm", payload: Array(data.base64EncodedData()),
                             durationNanos: audio.durationNanos, format: audio.format)
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "base64-encode",
        summary: "Encodes s16le PCM frames as base64 text (encoded frames, codec base64-pcm); marks preserved",
        family: "codecs",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.encoded], codecs: ["base64-pcm"], doc: "payload = ASCII base64 of the s16le bytes")],
        configuration: NoConfiguration.self,
        format: .none,
        fusable: true,
        make: { _, _ in Base64EncodeNode() })
}
