import Foundation
import PipelineCore

/// `jsonl-sink`: writes events (and text frames) as JSON lines to a file or `-` for stdout:
/// `{"ts": <seconds since start>, "node": "<id>", "event": "<name>", ...}`.
public actor JSONLSinkNode: Node {
    let path: String

    init(configuration c: Configuration) { path = c.path }

    public func run(_ context: NodeContext) async throws {
        let handle: FileHandle
        if path == "-" {
            handle = FileHandle.standardOutput
        } else {
            guard FileManager.default.createFile(atPath: path, contents: nil), let h = FileHandle(forWritingAtPath: path) else {
                throw NodeError("file_unwritable", "\(path): cannot create file for writing")
            }
            handle = h
        }
        defer { if path != "-" { try? handle.close() } }
        for await frame in context.input() {
            let line: String
            switch frame.payload {
            case .event(let e): line = e.jsonLine()
            case .text(let t):
                line = Event("text", node: context.id, ts: context.elapsed, fields: [("text", .string(t))]).jsonLine()
            default: continue
            }
            try handle.write(contentsOf: Data((line + "\n").utf8))
        }
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
