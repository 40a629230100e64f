import Foundation
import PipelineCore
import Testing
@testable import CoreNodes
@testable import Nodes

@Suite("http-upload")
struct HTTPUploadTests {
    @Test func streamsTheBodyWhileTheSourceIsStillRecording() async throws {
        let server = try await HTTPTestServer.start()
        defer { Task { await server.shutdown() } }
        let events = try await runGraph("""
            version: 1
            name: upload
            nodes:
              tone: { type: tone-source, duration_ms: 2000, realtime: true, frame_ms: 20 }
              up: { type: http-upload, url: "\(server.url())", format: wav, headers: { X-Token: sekret } }
            links:
              - tone -> up
            """)
        let requests = server.requests
        try #require(requests.count == 1)
        let r = requests[0]
        #expect(r.method == "POST")
        #expect(r.header("Transfer-Encoding")?.lowercased() == "chunked")
        #expect(r.header("Content-Length") == nil)
        #expect(r.header("Content-Type") == "audio/wav")
        #expect(r.header("X-Token") == "sekret")
        #expect(r.body.count == 44 + 2 * 32000)
        #expect(r.bodyParts > 10)
        // The first audio reached the server long before the 2 s source finished.
        let first = try #require(r.firstBodyAt), end = try #require(r.endAt)
        #expect(first - r.headAt < .seconds(1))
        #expect(end - first > .seconds(1))
        // The streamed WAV (sizes unknown in its header) reads back as 2 s of audio.
        #expect(Array(r.body[4..<8]) == [0xFF, 0xFF, 0xFF, 0xFF])
        let path = temporaryPath("streamed.wav")
        try Data(r.body).write(to: URL(fileURLWithPath: path))
        let wav = try readWAV(path)
        #expect(wav.format == AudioFormat(sampleRate: 16000, channels: 1))
        #expect(wav.samples.count == 32000)
        let done = events.filter { $0.name == "upload_done" }
        #expect(done.count == 1)
        #expect(done.first?["status"] == .int(200))
        #expect(done.first?["bytes"] == .int(Int64(44 + 64000)))
        #expect(done.first?["body"]?.stringValue?.contains("\"ok\":true") == true)
        #expect(!events.contains { $0.name == "error" })
        #expect(!events.map { $0.jsonLine() }.joined().contains("sekret"))
    }

    @Test func onePostPerUtteranceFromSliceMarks() async throws {
        let server = try await HTTPTestServer.start()
        defer { Task { await server.shutdown() } }
        var registry = BuiltinNodes.registry()
        registry.register(MarkedSource.descriptor)
        let events = try await runGraph("""
            version: 1
            name: upload-utterances
            nodes:
              src: { type: test-marked-source }
              up: { type: http-upload, url: "\(server.url())", format: pcm, per: utterance }
            links:
              - src -> up
            """, registry: registry)
        // Uploads overlap, so they may reach the server in any order.
        let requests = server.requests.sorted { ($0.header("X-Voicepipe-Voice-Id") ?? "") < ($1.header("X-Voicepipe-Voice-Id") ?? "") }
        #expect(requests.count == 3)
        #expect(requests.map { $0.header("X-Voicepipe-Voice-Id") } == ["u0", "u1", "u2"])
        #expect(requests.allSatisfy { $0.body.count == MarkedSource.framesPerUtterance * 320 * 2 })
        #expect(requests.first?.header("Content-Type")?.hasPrefix("audio/L16;rate=16000;channels=1") == true)
        // Each body holds only its utterance's samples (the source numbers them by utterance).
        for (i, r) in requests.enumerated() {
            #expect(r.body.count >= 2 && Int16(r.body[0]) | Int16(r.body[1]) << 8 == Int16(100 + i))
        }
        #expect(events.filter { $0.name == "upload_done" }.compactMap { $0["voice_id"]?.stringValue }.sorted() == ["u0", "u1", "u2"])
    }

    @Test func aFailedUploadIsSpooledAndRetried() async throws {
        let server = try await HTTPTestServer.start(statuses: [503, 200])
        defer { Task { await server.shutdown() } }
        let spool = (temporaryPath("spool") as NSString).deletingLastPathComponent + "/spool"
        let events = try await runGraph("""
            version: 1
            name: upload-retry
            nodes:
              tone: { type: tone-source, duration_ms: 500, realtime: false }
              up: { type: http-upload, url: "\(server.url())", spool_dir: "\(spool)", retry_backoff_ms: 50 }
            links:
              - tone -> up
            """)
        let errors = events.filter { $0.name == "error" }
        #expect(errors.count == 1)
        #expect(errors.first?["code"] == .string("upload_failed"))
        #expect(errors.first?["message"]?.stringValue?.contains("kept") == true)
        let done = events.filter { $0.name == "upload_done" }
        #expect(done.map { $0["status"] } == [.int(503), .int(200)])
        #expect(done.last?["attempt"] == .int(1))
        let requests = server.requests
        try #require(requests.count == 2)
        #expect(requests[1].header("Content-Length") == String(44 + 16000))
        #expect(requests[1].header("X-Voicepipe-Retry") == "1")
        #expect(Array(requests[1].body[44...]) == Array(requests[0].body[44...]))
        #expect(Array(requests[1].body[40..<44]) == [0x80, 0x3E, 0, 0])   // the spooled WAV has its real size
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
    }

    @Test func spooledAudioSurvivesAnOutageAndIsSentByTheNextRun() async throws {
        let server = try await HTTPTestServer.start(statuses: [503])
        defer { Task { await server.shutdown() } }
        let spool = (temporaryPath("spool") as NSString).deletingLastPathComponent + "/spool"
        func graph(_ ms: Int) -> String {
            """
            version: 1
            name: upload-outage
            nodes:
              tone: { type: tone-source, duration_ms: \(ms), realtime: false }
              up: { type: http-upload, url: "\(server.url())", spool_dir: "\(spool)", retry_attempts: 2, retry_backoff_ms: 20 }
            links:
              - tone -> up
            """
        }
        let failed = try await runGraph(graph(500))
        #expect(failed.filter { $0.name == "error" }.count == 3)   // the upload and two retries
        let kept = try FileManager.default.contentsOfDirectory(atPath: spool)
        try #require(kept.count == 1)
        #expect(kept[0].hasSuffix(".wav"))
        let header = try WAVHeader.read(path: spool + "/" + kept[0])
        #expect(header.duration == 0.5)

        server.setStatuses([200])
        let recovered = try await runGraph(graph(100))
        let done = recovered.filter { $0.name == "upload_done" }
        #expect(done.count == 2)
        #expect(done.allSatisfy { $0["status"] == .int(200) })
        #expect(done.contains { $0["file"]?.stringValue?.hasSuffix(kept[0]) == true })
        #expect(try FileManager.default.contentsOfDirectory(atPath: spool).isEmpty)
        #expect(server.requests.contains { $0.status == 200 && $0.body.count == 44 + 16000 })
    }

    @Test(.enabled(if: haveTool("gst-launch-1.0")))
    func opusFramesAreUploadedAsOggOpus() async throws {
        let server = try await HTTPTestServer.start()
        defer { Task { await server.shutdown() } }
        _ = try await runGraph("""
            version: 1
            name: upload-opus
            nodes:
              tone: { type: tone-source, duration_ms: 1000, realtime: false, rate: 48000 }
              enc: { type: opus-encode }
              up: { type: http-upload, url: "\(server.url())", format: opus }
            links:
              - tone -> enc -> up
            """)
        let r = try #require(server.requests.first)
        #expect(r.header("Content-Type") == "audio/ogg;codecs=opus")
        #expect(Array(r.body.prefix(4)) == Array("OggS".utf8))
        // An independent decoder reads it back.
        let ogg = temporaryPath("up.opus"), wav = temporaryPath("decoded.wav")
        try Data(r.body).write(to: URL(fileURLWithPath: ogg))
        let g = try shell("gst-launch-1.0", ["-q", "filesrc", "location=\(ogg)", "!", "oggdemux", "!", "opusdec", "!",
                                             "audioconvert", "!", "audio/x-raw,format=S16LE", "!", "wavenc", "!", "filesink", "location=\(wav)"])
        #expect(g.status == 0, "\(g.error)")
        let decoded = try readWAV(wav)
        let seconds = Double(decoded.samples.count / decoded.format.channels) / Double(decoded.format.sampleRate)
        #expect(abs(seconds - 1.0) < 0.05)
        #expect(Signal.dbfs(Array(decoded.samples.dropFirst(4800))) > -26)
    }

    /// A server that accepts the connection and never reads: the body stays within its bound,
    /// the node waits, and the input edge's drop-oldest policy takes over (counted).
    @Test func aServerThatStopsReadingBacksUpToTheInputEdge() async throws {
        let listener = SilentListener(receiveBuffer: 4096)   // connections complete in the backlog; nobody reads
        let port = listener.port
        // 20 minutes of audio (38 MB) offered as fast as possible.
        let pipeline = try Pipeline(yaml: """
            version: 1
            nodes:
              tone: { type: tone-source, duration_ms: 1200000, frame_ms: 20, realtime: false }
              up: { type: http-upload, url: "http://127.0.0.1:\(port)/audio", format: pcm, max_buffered_kb: 64 }
            links:
              - { from: tone, to: up, capacity: 8, overflow: drop-oldest }
            """, registry: BuiltinNodes.registry())
        _ = try await runPipeline(pipeline, timeout: .seconds(4))
        let edge = try #require(pipeline.edgeStats.first)
        let upStats = try #require(pipeline.nodeStats.first { $0.id == "up" })
        // Only what the body, the socket buffers and the edge hold was taken; the rest was
        // dropped by the edge's policy and counted, not buffered in memory.
        let taken = (edge.sent - edge.dropped) * 640
        #expect(edge.dropped * 2 > edge.sent, "offered \(edge.sent), dropped \(edge.dropped)")
        #expect(taken < 12_000_000, "the node took \(taken) bytes")
        #expect(upStats.counters["upload_wait_ms", default: 0] > 0)
    }

    @Test func theServersAnswerIsKeptWhole() async throws {
        let long = String(repeating: "transcript line. ", count: 5000)   // 85 KB of text
        let server = try await HTTPTestServer.start(answer: ("text/plain; charset=utf-8", Array(long.utf8)))
        defer { Task { await server.shutdown() } }
        let dir = temporaryPath("answers")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let events = try await runGraph("""
            version: 1
            nodes:
              tone: { type: tone-source, duration_ms: 200, frame_ms: 20 }
              up: { type: http-upload, url: "\(server.url())", format: wav, response_dir: "\(dir)" }
            links:
              - tone -> up
            """)
        let done = try #require(events.first { $0.name == "upload_done" })
        #expect(done["response_bytes"] == .int(Int64(long.utf8.count)))
        let file = try #require(done["response_file"]?.stringValue)
        #expect(try String(contentsOfFile: file, encoding: .utf8) == long, "a long answer is written whole to a file")
        #expect(done["response_truncated"] == nil)
        #expect(!events.contains { $0.name == "error" })
    }

    @Test func anAnswerOverTheLimitIsCutAndReportedNotResent() async throws {
        let binary = (0..<300_000).map { UInt8(truncatingIfNeeded: $0 &* 7) }
        let server = try await HTTPTestServer.start(answer: ("application/octet-stream", binary))
        defer { Task { await server.shutdown() } }
        let dir = temporaryPath("answers-cut")
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let events = try await runGraph("""
            version: 1
            nodes:
              tone: { type: tone-source, duration_ms: 200, frame_ms: 20 }
              up: { type: http-upload, url: "\(server.url())", format: wav, response_dir: "\(dir)", response_limit_kb: 100 }
            links:
              - tone -> up
            """)
        let done = try #require(events.first { $0.name == "upload_done" })
        #expect(done["response_truncated"] == .bool(true))
        let file = try #require(done["response_file"]?.stringValue)
        let kept = try Data(contentsOf: URL(fileURLWithPath: file))
        #expect(kept.count == 100 * 1024 && Array(kept) == Array(binary.prefix(100 * 1024)))
        #expect(server.requests.count == 1, "a long answer is not a failed upload: the audio is not sent again")
        #expect(!events.contains { $0.name == "error" })
    }

    @Test func checksTheURLAtValidation() throws {
        #expect(throws: (any Error).self) {
            _ = try Pipeline(yaml: """
                version: 1
                name: bad
                nodes:
                  tone: { type: tone-source }
                  up: { type: http-upload, url: "ftp://example.com/x" }
                links:
                  - tone -> up
                """, registry: BuiltinNodes.registry())
        }
    }

    @Test func oggPagesCarryValidChecksums() {
        var w = OggOpusWriter(channels: 1, inputRate: 16000, serial: 7)
        var bytes = w.add(packet: [UInt8](repeating: 1, count: 300), durationNanos: 20_000_000)
        bytes += w.add(packet: [2, 3], durationNanos: 20_000_000)
        bytes += w.finish()
        // Walk the pages: each CRC (computed bit by bit here) matches, and the flags are BOS ... EOS.
        var offset = 0
        var flags: [UInt8] = []
        while offset < bytes.count {
            #expect(Array(bytes[offset..<offset + 4]) == Array("OggS".utf8))
            let segments = Int(bytes[offset + 26])
            let body = bytes[(offset + 27)..<(offset + 27 + segments)].reduce(0) { $0 + Int($1) }
            let length = 27 + segments + body
            var page = Array(bytes[offset..<offset + length])
            let stored = page[22..<26].enumerated().reduce(UInt32(0)) { $0 | UInt32($1.element) << (8 * UInt32($1.offset)) }
            page.replaceSubrange(22..<26, with: [0, 0, 0, 0])
            var crc: UInt32 = 0
            for b in page {
                crc ^= UInt32(b) << 24
                for _ in 0..<8 { crc = crc & 0x8000_0000 != 0 ? (crc << 1) ^ 0x04C1_1DB7 : crc << 1 }
            }
            #expect(crc == stored)
            flags.append(bytes[offset + 5])
            offset += length
        }
        #expect(flags == [2, 0, 0, 4])
    }
}

/// A source that emits three utterances (slice-marked, numbered 100, 101, 102) with unmarked
/// frames before, between and after them.
actor MarkedSource: Node {
    static let framesPerUtterance = 5
    static let format = AudioFormat(sampleRate: 16000, channels: 1)

    func run(_ context: NodeContext) async throws {
        var index: Int64 = 0
        func frame(_ value: Int16, marks: FrameMarks = .none) -> Frame {
            defer { index += 320 }
            return .audio([Int16](repeating: value, count: 320), format: Self.format, sampleIndex: index, marks: marks)
        }
        for u in 0..<3 {
            try await context.send(frame(0))
            for k in 0..<Self.framesPerUtterance {
                let slice = SliceInfo(voiceID: "u\(u)", seq: k, isFirst: k == 0, isLast: k == Self.framesPerUtterance - 1)
                try await context.send(frame(Int16(100 + u), marks: FrameMarks(slice: slice)))
            }
        }
        try await context.send(frame(0))
    }

    static let descriptor = NodeDescriptor(
        type: "test-marked-source", summary: "utterances with slice marks, for tests", family: "sources",
        inputs: [], outputs: [PortSpec("out", [.audio])],
        format: FormatRule(output: { _, _ in MarkedSource.format }),
        make: { _ in MarkedSource() })
}
