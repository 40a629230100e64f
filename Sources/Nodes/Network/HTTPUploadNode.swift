import AsyncHTTPClient
import BoundedTransport
import Foundation
import NIOCore
import NIOFoundationCompat
import NIOHTTP1
import PipelineCore
import Synchronization

/// `http-upload`: streams audio to an HTTP server while it is recorded — one POST per stream, or
/// per utterance with `per: utterance` (from the slicer's slice marks, or the VAD's speech marks)
/// — with chunked transfer encoding, so the server has the audio as it is produced.
///
/// The request body is bounded (`max_buffered_kb`): when the server reads more slowly than audio
/// comes, the node waits, and its input edge's overflow policy decides what happens to audio — no
/// buffer grows without bound. Each response comes back as an `upload_done` event (`status`,
/// `bytes`, and the server's answer kept whole: a text answer in `body`, a binary or long one in
/// a file named by `response_file`; beyond `response_limit_kb` the answer is cut, and
/// `response_truncated` says so — the upload still counts as done); a failed upload (connection
/// error or a non-2xx status) is an `error` event. With `spool_dir`, a copy of every upload is written to disk as it streams and kept
/// when the upload fails; it is retried with backoff (`retry_attempts`, `retry_backoff_ms`),
/// and files left by an earlier run are retried when the node starts.
///
/// ```yaml
/// up: { type: http-upload, url: "http://127.0.0.1:8080/audio", format: wav, per: utterance,
///       headers: { Authorization: "Bearer ${UPLOAD_TOKEN}" }, spool_dir: /var/spool/voicepipe }
/// ```
public actor HTTPUploadNode: Node {
    struct Settings: Sendable {
        var url: String
        var headers: [String: String]
        var contentType: String?
        var format: HTTPUploadFormat
        var perUtterance: Bool
        var spoolDir: String?
        var retryAttempts: Int
        var retryBackoff: Duration
        var maxBufferedBytes: Int
        var responseLimit: Int
        var responseDir: String?

        init(configuration c: Configuration) {
            url = c.url
            headers = c.headers ?? [:]
            contentType = c.contentType
            format = c.format
            perUtterance = c.per == .utterance
            spoolDir = c.spoolDir.flatMap { $0.isEmpty ? nil : $0 }
            retryAttempts = c.retryAttempts
            retryBackoff = .milliseconds(c.retryBackoffMs)
            maxBufferedBytes = c.maxBufferedKb * 1024
            responseLimit = c.responseLimitKb * 1024
            responseDir = c.responseDir ?? spoolDir
        }

        /// The URL without query or user info, fit for events and logs.
        var displayURL: String { HTTPUploadNode.redact(url) }
    }

    /// One upload being streamed: the body stream the HTTP client reads, and where its spooled
    /// copy ends up once recorded.
    final class Upload: Sendable {
        let index: Int
        let voiceID: String?
        let contentType: String
        let stream: BoundedByteStream
        let recorded: AsyncStream<String?>.Continuation
        let recordedPath: AsyncStream<String?>
        private let failedFlag = Atomic<Bool>(false)
        private let byteCount = Atomic<Int>(0)

        init(index: Int, voiceID: String?, contentType: String, capacity: Int) {
            self.index = index
            self.voiceID = voiceID
            self.contentType = contentType
            stream = BoundedByteStream(capacity: capacity)
            (recordedPath, recorded) = AsyncStream<String?>.makeStream(bufferingPolicy: .bufferingNewest(1))
        }

        /// True once the request failed: the body is no longer read, so nothing more is queued.
        var failed: Bool { failedFlag.load(ordering: .acquiring) }
        /// Bytes handed to the body.
        var bytes: Int { byteCount.load(ordering: .relaxed) }

        func markFailed() {
            failedFlag.store(true, ordering: .releasing)
            stream.abort()
        }

        /// Queues bytes for the request body, waiting while it holds its capacity.
        func send(_ bytes: [UInt8]) async {
            guard !bytes.isEmpty, !failed else { return }
            byteCount.add(bytes.count, ordering: .relaxed)
            await stream.send(ByteBuffer(bytes: bytes))
        }
    }

    let settings: Settings
    private var encoder: HTTPUploadEncoder
    private var current: Upload?
    private var spoolFile: HTTPUploadSpoolFile?
    private var uploads = 0

    init(configuration: Configuration) {
        settings = Settings(configuration: configuration)
        encoder = HTTPUploadEncoder(format: settings.format)
    }

    public func run(_ context: NodeContext) async throws {
        let spool = try settings.spoolDir.map { try HTTPUploadSpool(directory: $0) }
        counters = { name, n in context.count(name, by: n) }
        var configuration = HTTPClient.Configuration()
        configuration.timeout = .init(connect: .seconds(10), read: .seconds(60))
        let client = HTTPClient(eventLoopGroupProvider: .singleton, configuration: configuration)
        let (retries, retryQueue) = AsyncStream<String>.makeStream()
        do {
            try await withThrowingTaskGroup(of: Void.self) { outer in
                outer.addTask { try await self.retryLoop(retries, client: client, context: context) }
                for path in spool?.pending() ?? [] { retryQueue.yield(path) }
                try await withThrowingTaskGroup(of: Void.self) { streaming in
                    for await frame in context.input() {
                        // The request starts before its first bytes are queued, so the body's
                        // reader exists before the writer can wait for room.
                        if let upload = try await self.begin(frame, spool: spool) {
                            streaming.addTask { try await self.stream(upload, client: client, retryQueue: retryQueue, context: context) }
                        }
                        try await self.feed(frame)
                    }
                    try await self.finishCurrent()
                    try await streaming.waitForAll()
                }
                // Every streaming upload has finished (failures are queued): retries end the run.
                retryQueue.finish()
                try await outer.waitForAll()
            }
        } catch {
            retryQueue.finish()
            try? await client.shutdown()
            throw error
        }
        try await client.shutdown()
    }

    private var feedEnds = false
    private var feedSkip = true

    /// Opens an upload if `frame` begins one (the caller starts its request), ending the current
    /// one first if needed; ``feed(_:)`` then queues the frame's bytes.
    private func begin(_ frame: Frame, spool: HTTPUploadSpool?) async throws -> Upload? {
        feedSkip = true
        guard frame.kind == .audio || frame.kind == .encoded else { return nil }
        var starts = current == nil
        var ends = false
        var voiceID: String?
        if settings.perUtterance {
            if let slice = frame.marks.slice {
                starts = slice.isFirst
                ends = slice.isLast
                voiceID = slice.voiceID
            } else {
                starts = frame.marks.speechStart
                ends = frame.marks.speechEnd
            }
            if starts, current != nil { try await finishCurrent() }
            if current == nil && !starts { return nil }   // outside an utterance
        }
        feedSkip = false
        feedEnds = ends
        var begun: Upload?
        if current == nil {
            let format = frame.audio?.format ?? frame.encoded?.format
            let upload = Upload(index: uploads, voiceID: voiceID,
                                contentType: settings.contentType ?? settings.format.contentType(format: format),
                                capacity: settings.maxBufferedBytes)
            uploads += 1
            encoder = HTTPUploadEncoder(format: settings.format)
            spoolFile = try spool?.create(format: settings.format, index: upload.index)
            current = upload
            begun = upload
        }
        return begun
    }

    /// Queues the bytes of the frame ``begin(_:spool:)`` accepted (waiting while the body is full).
    private func feed(_ frame: Frame) async throws {
        guard !feedSkip, let upload = current else { return }
        let bytes = try encoder.encode(frame)
        try spoolFile?.write(bytes)
        let before = ContinuousClock.now
        await upload.send(bytes)
        let waited = ContinuousClock.now - before
        if waited > .milliseconds(50) {
            counters?("upload_wait_ms", UInt64(waited.components.seconds * 1000 + waited.components.attoseconds / 1_000_000_000_000_000))
        }
        if feedEnds { try await finishCurrent() }
    }

    private var counters: (@Sendable (String, UInt64) -> Void)?

    private func finishCurrent() async throws {
        guard let upload = current else { return }
        current = nil
        let tail = encoder.finish()
        try spoolFile?.write(tail)
        await upload.send(tail)
        upload.stream.finish()
        var path: String?
        if let f = spoolFile {
            spoolFile = nil
            try f.finish(audioFormat: encoder.audioFormat)
            path = f.path
        }
        upload.recorded.yield(path)
        upload.recorded.finish()
    }

    /// Streams one upload; on failure hands its spooled copy to the retry queue.
    private func stream(_ upload: Upload, client: HTTPClient, retryQueue: AsyncStream<String>.Continuation, context: NodeContext) async throws {
        var request = HTTPClientRequest(url: settings.url)
        request.method = .POST
        request.headers.add(name: "Content-Type", value: upload.contentType)
        if let v = upload.voiceID { request.headers.add(name: "X-Voicepipe-Voice-Id", value: v) }
        if settings.perUtterance { request.headers.add(name: "X-Voicepipe-Utterance", value: String(upload.index)) }
        for (k, v) in settings.headers { request.headers.replaceOrAdd(name: k, value: v) }
        request.body = .stream(upload.stream, length: .unknown)
        let outcome = await send(request, client: client, name: "response-\(upload.index)")
        if !outcome.ok { upload.markFailed() }
        var path: String?
        for await p in upload.recordedPath { path = p }   // wait until the recording is complete
        var fields: [(String, EventValue)] = [("url", .string(settings.displayURL))]
        if let s = outcome.status { fields.append(("status", .int(Int64(s)))) }
        fields += outcome.answerFields
        fields += [("bytes", .int(Int64(upload.bytes))), ("upload", .int(Int64(upload.index)))]
        if let v = upload.voiceID { fields.append(("voice_id", .string(v))) }
        if outcome.ok {
            if let path { try? FileManager.default.removeItem(atPath: path) }
            try await context.emit(.uploadDone, fields)
            return
        }
        if let path { fields.append(("file", .string(path))) }
        if outcome.status != nil { try await context.emit(.uploadDone, fields) }
        try await context.emitError(code: "upload_failed", message: "POST \(settings.displayURL) failed: \(outcome.problem)"
                                    + (path.map { "; kept \($0) for retry" } ?? "; no spool_dir, so this audio is not kept"))
        if let path { retryQueue.yield(path) }
    }

    struct Outcome: Sendable {
        var status: Int?
        var body: String
        var problem: String
        /// Where a binary or long answer was written.
        var file: String?
        var answerBytes = 0
        var truncated = false
        var ok: Bool { status.map { (200..<300).contains($0) } ?? false }

        /// The answer as event fields: `body` (text answers), `response_file`, `response_bytes`,
        /// `response_truncated`.
        var answerFields: [(String, EventValue)] {
            var f: [(String, EventValue)] = [("body", .string(body)), ("response_bytes", .int(Int64(answerBytes)))]
            if let file { f.append(("response_file", .string(file))) }
            if truncated { f.append(("response_truncated", .bool(true))) }
            return f
        }
    }

    /// Text answers up to this size go whole into the event; larger or binary ones into a file.
    static let inlineAnswerLimit = 64 * 1024

    /// Sends a request and keeps the server's answer whole, up to the response limit: a text
    /// answer in the event, a binary or long one in a file (`name` in the response directory).
    /// An answer over the limit is cut and reported, not treated as a failed upload.
    private nonisolated func send(_ request: HTTPClientRequest, client: HTTPClient, name: String) async -> Outcome {
        do {
            let response = try await client.execute(request, deadline: .distantFuture)
            var body = ByteBuffer()
            var total = 0
            var truncated = false
            for try await part in response.body {
                total += part.readableBytes
                let room = settings.responseLimit - body.readableBytes
                if room <= 0 { truncated = true; break }
                var p = part
                if p.readableBytes > room { truncated = true; p = p.getSlice(at: p.readerIndex, length: room) ?? p }
                body.writeImmutableBuffer(p)
            }
            let status = Int(response.status.code)
            let type = response.headers.first(name: "Content-Type")?.lowercased() ?? ""
            let bytes = Array(body.readableBytesView)
            let isText = (type.isEmpty || type.hasPrefix("text/") || type.contains("json") || type.contains("xml"))
                && !bytes.contains(0) && String(validating: bytes, as: UTF8.self) != nil
            var outcome = Outcome(status: status, body: "", problem: "", answerBytes: total, truncated: truncated)
            if isText && bytes.count <= Self.inlineAnswerLimit {
                outcome.body = String(decoding: bytes, as: UTF8.self)
            } else if !bytes.isEmpty {
                let dir = settings.responseDir ?? FileManager.default.temporaryDirectory.path
                let path = (dir as NSString).appendingPathComponent("\(name)-\(UInt32.random(in: 0...UInt32.max)).\(isText ? "txt" : "bin")")
                if FileManager.default.createFile(atPath: path, contents: Data(bytes)) {
                    outcome.file = path
                    outcome.body = isText ? String(decoding: bytes.prefix(1000), as: UTF8.self) : ""
                } else {
                    outcome.body = isText ? String(decoding: bytes.prefix(1000), as: UTF8.self) : ""
                    outcome.truncated = true
                }
            }
            if !(200..<300).contains(status) {
                outcome.problem = "HTTP \(status) \(response.status.reasonPhrase) \(TerminalText.escape(String(outcome.body.prefix(200))))"
            }
            return outcome
        } catch {
            return Outcome(status: nil, body: "", problem: Self.describe(error))
        }
    }

    /// Uploads spooled files again with backoff, until each succeeds or runs out of attempts.
    private func retryLoop(_ queue: AsyncStream<String>, client: HTTPClient, context: NodeContext) async throws {
        for await path in queue {
            var attempt = 0
            while attempt < settings.retryAttempts {
                attempt += 1
                try await context.clock.sleep(for: backoff(attempt))
                guard let data = FileManager.default.contents(atPath: path) else { break }
                var request = HTTPClientRequest(url: settings.url)
                request.method = .POST
                let format = HTTPUploadFormat.allCases.first { path.hasSuffix("." + $0.fileExtension) } ?? settings.format
                request.headers.add(name: "Content-Type", value: settings.contentType ?? format.contentType(format: nil))
                request.headers.add(name: "X-Voicepipe-Retry", value: String(attempt))
                for (k, v) in settings.headers { request.headers.replaceOrAdd(name: k, value: v) }
                request.body = .bytes(ByteBuffer(data: data))
                let o = await send(request, client: client, name: "response-retry")
                var fields: [(String, EventValue)] = [("url", .string(settings.displayURL))]
                if let s = o.status { fields.append(("status", .int(Int64(s)))) }
                fields += o.answerFields
                fields += [("bytes", .int(Int64(data.count))), ("file", .string(path)), ("attempt", .int(Int64(attempt)))]
                if o.ok {
                    try? FileManager.default.removeItem(atPath: path)
                    try await context.emit(.uploadDone, fields)
                    break
                }
                let last = attempt == settings.retryAttempts
                try await context.emitError(code: "upload_failed", message: "retry \(attempt) of \(settings.retryAttempts) of \(path) to \(settings.displayURL) failed: \(o.problem)"
                                            + (last ? "; giving up, the file stays in spool_dir" : ""))
            }
        }
    }

    private func backoff(_ attempt: Int) -> Duration {
        var d = settings.retryBackoff
        for _ in 1..<max(attempt, 1) { d = min(d * 2, .seconds(30)) }
        return d
    }

    static func describe(_ error: any Error) -> String {
        if let e = error as? HTTPClientError { return "\(e)" }
        return String(describing: error)
    }

    /// `scheme://host[:port]/path` without user info or query.
    static func redact(_ url: String) -> String {
        guard var c = URLComponents(string: url) else { return "(invalid url)" }
        c.user = nil
        c.password = nil
        c.query = nil
        c.fragment = nil
        return c.string ?? "(invalid url)"
    }

    /// Configuration of `http-upload`.
    public struct Configuration: NodeConfiguration {
        /// What each POST covers.
        public enum Per: String, Sendable, CaseIterable, Decodable {
            /// One POST for the whole stream.
            case stream
            /// One POST per utterance (slicer or VAD marks).
            case utterance
        }

        /// `http://` or `https://` URL to POST to.
        public var url: String
        /// Extra request headers (never logged).
        public var headers: [String: String]?
        /// Content-Type; `nil` = the one of ``format``.
        public var contentType: String?
        /// Body format.
        public var format: HTTPUploadFormat
        /// One POST per stream or per utterance.
        public var per: Per
        /// Where copies of uploads are kept (and failed ones retried from).
        public var spoolDir: String?
        /// Retries of a spooled upload.
        public var retryAttempts: Int
        /// Delay before the first retry, in milliseconds (doubles each time).
        public var retryBackoffMs: Int
        /// Request body held while the server reads, in KiB.
        public var maxBufferedKb: Int
        /// Largest answer kept, in KiB.
        public var responseLimitKb: Int
        /// Where binary or long answers are written.
        public var responseDir: String?
        /// The parameters of `http-upload`.
        public static let parameters = [
            ParamSpec("url", .string, required: true, doc: "http:// or https:// URL to POST to"),
            ParamSpec("headers", .stringMap, secret: true, doc: "extra request headers (e.g. Authorization); never logged"),
            ParamSpec("content_type", .string, doc: "Content-Type (default: audio/wav, audio/L16;rate=..., audio/ogg;codecs=opus)"),
            ParamSpec("format", .choice(HTTPUploadFormat.allCases.map(\.rawValue)), default: "wav", doc: "wav (streamed header), pcm (raw s16le) or opus (Ogg Opus from opus-encode frames)"),
            ParamSpec("per", .choice(Per.allCases.map(\.rawValue)), default: "stream", doc: "one POST per stream, or per utterance (slicer/VAD marks)"),
            ParamSpec("spool_dir", .string, doc: "keep a copy of each upload here; failed uploads stay and are retried"),
            ParamSpec("retry_attempts", .int(1...100), default: 5, doc: "retries of a spooled upload"),
            ParamSpec("retry_backoff_ms", .int(1...600_000), default: 500, doc: "delay before the first retry (doubles each time, up to 30 s)"),
            ParamSpec("max_buffered_kb", .int(16...1_048_576), default: 1024, doc: "request body held while the server reads slowly; beyond it the node waits and its input edge's overflow policy applies"),
            ParamSpec("response_limit_kb", .int(1...1_048_576), default: 1024, doc: "largest server answer kept; a longer one is cut and reported (response_truncated), the upload still done"),
            ParamSpec("response_dir", .string, doc: "where binary or long answers are written (default: spool_dir, else the temporary directory)"),
        ]

        /// The URL must be `http://` or `https://` with a host.
        public func problems() -> [String] {
            var problems: [String] = []
            let c = URLComponents(string: url)
            if !["http", "https"].contains(c?.scheme?.lowercased() ?? "") || (c?.host ?? "").isEmpty {
                problems.append("url \"\(HTTPUploadNode.redact(url))\": expected an http:// or https:// URL")
            }
            return problems
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "http-upload", summary: "Streams audio to an HTTP server as it is recorded (chunked POST per stream or utterance)",
        family: "sinks",
        inputs: [PortSpec("in", [.audio, .encoded], codecs: ["opus"], doc: "audio (wav, pcm) or Opus frames from opus-encode (opus)")],
        outputs: [.events],
        configuration: Configuration.self,
        format: .none,
        make: { c, _ in HTTPUploadNode(configuration: c) })
}
