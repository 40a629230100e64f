import Foundation
import PipelineCore
#if canImport(Glibc)
import Glibc
#endif

/// `text-source`: text in from a file or standard input (`path: -`), one text frame per line, so that
/// `echo "Hello" | voicepipe run say.yaml` speaks.
///
/// - Lines end at `\n` (a `\r` before it is dropped); the last line needs no line break. Lines that
///   are empty or only white space are skipped. Bytes that are not UTF-8 become U+FFFD.
/// - A line longer than `max_line_bytes` is sent in parts of at most that many bytes (cut between
///   words when it can be): a megabyte with no line break neither waits for its end nor takes a
///   megabyte of one frame.
/// - `interval_ms` waits that long between lines (as a person typing, or a feed paced for a test).
/// - Reads run on a thread of their own and wait at most 200 ms at a time, so a standard input that
///   stays open does not hold the pipeline when it stops. The end of the file (or of standard input)
///   ends the stream.
/// - Each frame's `pts` is its line's number times a millisecond (distinct, increasing: the `tts`
///   node treats each line as an answer of its own).
public actor TextSourceNode: Node {
    let configuration: Configuration

    init(configuration: Configuration) {
        self.configuration = configuration
    }

    public func run(_ context: NodeContext) async throws {
        let fd: Int32
        if configuration.path == "-" {
            fd = 0
        } else {
            fd = open(configuration.path, O_RDONLY | O_CLOEXEC)
            guard fd >= 0 else {
                throw NodeError(.fileNotFound, "text-source: cannot open \(configuration.path): \(String(cString: strerror(errno)))")
            }
        }
        defer { if fd != 0 { close(fd) } }
        let worker = BlockingWorker(name: "text-\(context.id)")
        defer { worker.shutdown() }
        let out = context.output()
        var splitter = LineSplitter(maxLineBytes: configuration.maxLineBytes)
        while !Task.isCancelled && !context.isStopping {
            let chunk = try await worker.run { Self.readChunk(fd) }
            switch chunk {
            case .bytes(let bytes): try await send(splitter.add(bytes), to: out, context: context)
            case .waiting: continue
            case .end:
                try await send(splitter.finish(), to: out, context: context)
                return
            case .failed(let why):
                try await send(splitter.finish(), to: out, context: context)
                throw NodeError(.readFailed, "text-source: reading \(configuration.path == "-" ? "standard input" : configuration.path): \(why)")
            }
        }
    }

    /// Lines sent so far.
    private var number: Int64 = 0

    /// Sends the lines that have something in them, `interval_ms` apart.
    private func send(_ lines: [String], to out: OutputPort, context: NodeContext) async throws {
        for line in lines where line.contains(where: { !$0.isWhitespace }) {
            if number > 0, configuration.intervalMs > 0 { try await context.clock.sleep(for: .milliseconds(configuration.intervalMs)) }
            number += 1
            try await out.send(.text(line, pts: number * 1_000_000))
            context.count("lines")
        }
    }

    /// What one read brought.
    enum Chunk: Sendable {
        case bytes([UInt8])
        case waiting
        case end
        case failed(String)
    }

    /// Waits up to 200 ms for `fd` to be readable, then reads what is there. Blocking.
    static func readChunk(_ fd: Int32) -> Chunk {
        var p = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
        let ready = poll(&p, 1, 200)
        if ready == 0 { return .waiting }
        if ready < 0 { return errno == EINTR ? .waiting : .failed(String(cString: strerror(errno))) }
        var buffer = [UInt8](repeating: 0, count: 65536)
        let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress, $0.count) }
        if n < 0 { return errno == EINTR || errno == EAGAIN ? .waiting : .failed(String(cString: strerror(errno))) }
        if n == 0 { return .end }
        return .bytes(Array(buffer[0..<n]))
    }

    /// Configuration of `text-source`.
    public struct Configuration: NodeConfiguration {
        /// The file to read, or `-` for standard input.
        public var path: String
        /// Pause between lines, ms.
        public var intervalMs: Int
        /// Longest text frame, bytes.
        public var maxLineBytes: Int

        public static let parameters: [ParamSpec] = [
            ParamSpec("path", .path, required: true, doc: "the text file to read, one text frame per line; - = standard input"),
            ParamSpec("interval_ms", .int(0...3_600_000), default: 0, doc: "pause between lines, ms"),
            ParamSpec("max_line_bytes", .int(16...16_777_216), default: 65536,
                      doc: "a longer line is sent in parts of at most this many bytes, cut between words where it can be"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "text-source", summary: "Reads text from a file or standard input, one text frame per line",
        family: "sources", inputs: [], outputs: [PortSpec("out", [.text], doc: "one text frame per non-blank line")],
        configuration: Configuration.self,
        defaultOverflow: .block,
        executor: .bulk,
        make: { c, _ in TextSourceNode(configuration: c) })
}

/// Cuts bytes into lines: `\n` ends a line (a `\r` before it is dropped), a line longer than
/// `maxLineBytes` is cut (between words when a space is in its second half, never inside a UTF-8
/// character). A pure value.
struct LineSplitter {
    let maxLineBytes: Int
    private var pending: [UInt8] = []

    init(maxLineBytes: Int) { self.maxLineBytes = max(16, maxLineBytes) }

    /// The lines `bytes` completes.
    mutating func add(_ bytes: [UInt8]) -> [String] {
        var lines: [String] = []
        var start = 0
        for (i, b) in bytes.enumerated() where b == 0x0A {
            pending += bytes[start..<i]
            lines += cut(&pending, all: true)
            pending = []
            start = i + 1
        }
        pending += bytes[start...]
        lines += cut(&pending, all: false)
        return lines
    }

    /// What is left, at the end of the input.
    mutating func finish() -> [String] {
        let lines = cut(&pending, all: true)
        pending = []
        return lines
    }

    /// Takes whole parts of at most `maxLineBytes` off `line`; with `all`, the rest too.
    private func cut(_ line: inout [UInt8], all: Bool) -> [String] {
        var parts: [String] = []
        while line.count > maxLineBytes {
            var end = maxLineBytes
            if let space = line[maxLineBytes / 2..<maxLineBytes].lastIndex(of: 0x20) {
                end = space + 1
            } else {
                // Not inside a UTF-8 character: back up over continuation bytes.
                while end > 1, line[end] & 0xC0 == 0x80 { end -= 1 }
            }
            parts.append(Self.text(line[0..<end]))
            line.removeFirst(end)
        }
        if all, !line.isEmpty { parts.append(Self.text(line[...])) }
        return parts
    }

    private static func text(_ bytes: ArraySlice<UInt8>) -> String {
        var b = bytes
        if b.last == 0x0D { b.removeLast() }
        return String(decoding: b, as: UTF8.self)
    }
}
