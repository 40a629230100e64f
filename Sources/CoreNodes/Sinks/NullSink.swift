import PipelineCore

/// `null-sink`: consumes and counts every frame (for benchmarks and to terminate branches).
public final class NullSinkNode: Node {
    init() {}

    public func run(_ context: NodeContext) async throws {
        var frames: UInt64 = 0
        let input = context.input()
        while await input.next() != nil { frames += 1 }
        context.count("frames", by: frames)
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "null-sink", summary: "Discards frames (counting them)",
        family: "sinks", inputs: [PortSpec("in", Set(FrameKind.allCases))], outputs: [],
        configuration: NoConfiguration.self, format: .none, make: { _, _ in NullSinkNode() })
}
