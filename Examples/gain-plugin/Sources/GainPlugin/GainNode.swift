import Foundation
import PipelineCore

/// `gain`: multiplies every sample by a factor given in dB; samples that would overflow are
/// saturated and counted (`clipped` in `--stats`, and in the `gain_done` event at end of stream).
public actor GainNode: FrameProcessor {
    let factor: Double
    var clipped: UInt64 = 0

    /// Creates the node from its configuration.
    public init(configuration: Configuration) { factor = pow(10, configuration.db / 20) }

    public func process(_ frame: Frame, context: NodeContext) async throws {
        guard var audio = frame.audio else { return try await context.send(frame) }
        for i in audio.samples.indices {
            let v = (Double(audio.samples[i]) * factor).rounded()
            if v > 32767 || v < -32768 { clipped += 1 }
            audio.samples[i] = Int16(max(-32768, min(32767, v)))
        }
        var out = frame
        out.payload = .audio(audio)
        try await context.send(out)
    }

    public func finish(context: NodeContext) async throws {
        context.count("clipped", by: clipped)
        try await context.emit("gain_done", [("clipped", .int(Int64(clipped)))])
    }

    /// The node's configuration, decoded once when the graph is validated.
    public struct Configuration: NodeConfiguration {
        /// Gain in dB.
        public var db: Double
        public static let parameters: [ParamSpec] = [
            ParamSpec("db", .double(-96...48), default: 0.0, doc: "gain in dB"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "gain", summary: "Amplifies or attenuates audio by a number of dB", family: "DSP",
        inputs: [PortSpec("in", [.audio])],
        outputs: [PortSpec("out", [.audio]), .events],
        configuration: Configuration.self,
        fusable: true,
        make: { c, _ in GainNode(configuration: c) })
}
