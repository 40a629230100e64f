import AsyncHTTPClient
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
/// Each response comes back as an `upload_done` event (`status`, `body` truncated to 1,000
/// characters, `bytes`); a failed upload (connection error or a non-2xx status) is an `error`
/// event. With `spool_dir`, a copy of every upload is written to disk as it streams and kept
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

        init(configuration c: Configuration) {
            url = c.url
            headers = c.headers ?? [:]
            contentType = c.contentType
            format = c.format
            perUtterance = c.per == .utterance
            spoolDir = c.spoolDir.flatMap { $0.isEmpty ? nil : $0 }
            retryAttempts = c.retryAttempts
            retryBackoff = .milliseconds(c.retryBackoffMs)
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
        let body: AsyncStream<ByteBuffer>.Continuation
        let stream: AsyncStream<ByteBuffer>
        let recorded: AsyncStream<String?>.Continuation
        let recordedPath: AsyncStream<String?>
        private let failedFlag = Atomic<Bool>(false)
        private let byteCount = Atomic<Int>(0)

        init(index: Int, voiceID: String?, contentType: String) {
            self.index = index
            self.voiceID = voiceID
            self.contentType = contentType
            (stream, body) = AsyncStream<ByteBuffer>.makeStream()
            (recordedPath, recorded) = AsyncStream<String?>.makeStream(bufferingPolicy: .bufferingNewest(1))
        }

        /// True once the request failed: the body is no longer read, so nothing more is queued.
        var failed: Bool { failedFlag.load(ordering: .acquiring) }
        /// Bytes handed to the body.
        var bytes: Int { byteCount.load(ordering: .relaxed) }

        func markFailed() {
            failedFlag.store(true, ordering: .releasing)
            body.finish()
        }

        func send(_ bytes: [UInt8]) {
            guard !bytes.isEmpty, !failed else { return }
            byteCount.add(bytes.count, ordering: .relaxed)
            body.yield(ByteBuffer(bytes: bytes))
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
                        if let upload = try self.handle(frame, spool: spool) {
                            streaming.addTask { try await self.stream(upload, client: client, retryQueue: retryQueue, context: context) }
                        }
                    }
                    try self.finishCurrent()
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

    /// Feeds one frame; returns an upload that has just begun (its request is started by the caller).
    private func handle(_ frame: Frame, spool: HTTPUploadSpool?) throws -> Upload? {
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
            if starts, current != nil { try finishCurrent() }
            if current == nil && !starts { return nil }   // outside an utterance
        }
        var begun: Upload?
        if current == nil {
            let format = frame.audio?.format ?? frame.encoded?.format
            let upload = Upload(index: uploads, voiceID: voiceID,
                                contentType: settings.contentType ?? settings.format.contentType(format: format))
            uploads += 1
            encoder = HTTPUploadEncoder(format: settings.format)
            spoolFile = try spool?.create(format: settings.format, index: upload.index)
            current = upload
            begun = upload
        }
        let bytes = try encoder.encode(frame)
        try spoolFile?.write(bytes)
        current?.send(bytes)
        if ends { try finishCurrent() }
        return begun
    }

    private func finishCurrent() throws {
        guard let upload = current else { return }
        current = nil
        let tail = encoder.finish()
        try spoolFile?.write(tail)
        upload.send(tail)
        upload.body.finish()
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
        let outcome = await send(request, client: client)
        if !outcome.ok { upload.markFailed() }
        var path: String?
        for await p in upload.recordedPath { path = p }   // wait until the recording is complete
        var fields: [(String, EventValue)] = [("url", .string(settings.displayURL))]
        if let s = outcome.status { fields.append(("status", .int(Int64(s)))) }
        fields += [("body", .string(outcome.body)), ("bytes", .int(Int64(upload.bytes))), ("upload", .int(Int64(upload.index)))]
        if let v = upload.voiceID { fields.append(("voice_id", .string(v))) }
        if outcome.ok {
            if let path { try? FileManager.default.removeItem(atPath: path) }
            try await context.emit("upload_done", fields)
            return
        }
        if let path { fields.append(("file", .string(path))) }
        if outcome.status != nil { try await context.emit("upload_done", fields) }
        try await context.emitError(code: "upload_failed", message: "POST \(settings.displayURL) failed: \(outcome.problem)"
                                    + (path.map { "; kept \($0) for retry" } ?? "; no spool_dir, so this audio is not kept"))
        if let path { retryQueue.yield(path) }
    }

    struct Outcome: Sendable {
        var status: Int?
        var body: String
        var problem: String
        var ok: Bool { status.map { (200..<300).contains($0) } ?? false }
    }

    /// Sends a request; the response body is kept up to 1,000 characters.
    private nonisolated func send(_ request: HTTPClientRequest, client: HTTPClient) async -> Outcome {
        do {
            let response = try await client.execute(request, deadline: .distantFuture)
            let body = try await response.body.collect(upTo: 1 << 20)
            let text = String(decoding: body.readableBytesView.prefix(1000), as: UTF8.self)
            let status = Int(response.status.code)
            return Outcome(status: status, body: text,
                           problem: (200..<300).contains(status) ? "" : "HTTP \(status) \(response.status.reasonPhrase) \(text.prefix(200))")
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
                let o = await send(request, client: client)
                var fields: [(String, EventValue)] = [("url", .string(settings.displayURL))]
                if let s = o.status { fields.append(("status", .int(Int64(s)))) }
                fields += [("body", .string(o.body)), ("bytes", .int(Int64(data.count))), ("file", .string(path)), ("attempt", .int(Int64(attempt)))]
                if o.ok {
                    try? FileManager.default.removeItem(atPath: path)
                    try await context.emit("upload_done", fields)
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
