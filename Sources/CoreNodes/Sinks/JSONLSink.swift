import Foundation
import PipelineCore

/// `jsonl-sink`: writes events (and text frames) as JSON lines to a file or `-` for stdout:
/// `{"ts": <seconds since start>, "node": "<id>", "event": "<name>", ...}`.
public actor JSONLSinkNode: Node {
    let path: String

    init(configuration c: Configuration) { path = c.path }

    public func run(_ context: NodeContext) async throws {
        let output = try FileOutput(path: path)
        defer { try? output.close() }
        var readerGone = false
        for await frame in context.input() {
            let line: String
            switch frame.payload {
            case .event(let e): line = e.jsonLine()
            case .text(let t):
                line = Event(.text, node: context.id, ts: context.elapsed, fields: [("text", .string(t))]).jsonLine()
            default: continue
            }
            if readerGone {
                context.count("lines_not_written")
                continue
            }
            do {
                try output.write(Data((line + "\n").utf8))
            } catch let e as NodeError where e.code == "output_closed" && path == "-" {
                // `voicepipe run … | head`: the reader has what it wanted. Stop the pipeline the way
                // SIGINT does, so every other sink still finalizes its file; what is left is counted.
                readerGone = true
                context.count("lines_not_written")
                context.logger.notice("standard output closed by its reader; stopping the pipeline")
                context.requestPipelineStop()
            }
        }
        try output.close()
    }

    /// Configuration of `jsonl-sink`.
    public struct Configuration: NodeConfiguration {
        public var path: String
        public static let parameters: [ParamSpec] = [ParamSpec("path", .string, default: "-", doc: "output file, or - for standard output")]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "jsonl-sink", summary: "Writes events and text as JSON lines (`-` = stdout)",
        family: "sinks", inputs: [PortSpec("in", [.event, .text])], outputs: [],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in JSONLSinkNode(configuration: c) })
}
