import Foundation
import PipelineCore

/// `file-source`: reads a WAV (PCM 8/16/24/32-bit integer, 32/64-bit float), a compressed audio file
/// (M4A/AAC, MP3, Ogg Opus/Vorbis, FLAC and whatever else FFmpeg decodes) or raw PCM and
/// delivers s16 frames of `frame_ms`, converted to `rate`/`channels` when given; `realtime: true`
/// paces at 1x on the injected clock, `loop: true` starts over at the end.
public actor FileSourceNode: Node {
    let path: String
    let frameMs: Int
    let realtime: Bool
    let loop: Bool
    let target: (rate: Int?, channels: Int?)
    let raw: (format: AudioFormat, encoding: PCMEncoding)?

    init(configuration c: Configuration) {
        path = c.path
        frameMs = c.frameMs
        realtime = c.realtime
        loop = c.loop
        target = (c.rate, c.channels)
        raw = c.raw.map { ($0.format, $0.encoding) }
    }

    public func run(_ context: NodeContext) async throws {
        do {
            try await read(context)
        } catch {
            if started {
                try? await context.emit(CaptureEvents.stopped(device: path, reason: error is CancellationError ? "stopped" : "error",
                                                              message: (error as? NodeError)?.message ?? "\(error)"))
            }
            throw error
        }
        if started {
            try? await context.emit(CaptureEvents.stopped(device: path, reason: Task.isCancelled || context.isStopping ? "stopped" : "end_of_stream"))
        }
    }

    private var started = false

    private func announce(_ context: NodeContext, format: AudioFormat) async throws {
        started = true
        try await context.emit(CaptureEvents.started(backend: "file", device: path, format: format, frameMs: frameMs))
    }

    private func read(_ context: NodeContext) async throws {
        let kind = try FileKind.of(path)
        if kind == .stream {
            guard let raw else {
                throw NodeError(.notARegularFile, "\(path): a pipe or device cannot be read as WAV (the header is read with seeks); give `raw: { rate: 16000, channels: 1 }` to stream raw PCM from it")
            }
            guard !loop else { throw NodeError(.notARegularFile, "\(path): a pipe or device cannot be looped; remove `loop: true`") }
            try await streamRaw(context, format: raw.format, encoding: raw.encoding)
            return
        }
        if raw == nil, !Self.looksLikeWAV(path) {
            try await readCompressed(context)
            return
        }
        let header: WAVHeader
        if let raw {
            guard let attrs = try? FileManager.default.attributesOfItem(atPath: path), let size = attrs[.size] as? UInt64 else {
                throw NodeError(.fileNotFound, noSuchFileMessage(path))
            }
            let frame = UInt64(raw.encoding.bytes * raw.format.channels)
            header = WAVHeader(format: raw.format, encoding: raw.encoding, dataOffset: 0, dataBytes: size - size % frame)
        } else {
            header = try WAVHeader.read(path: path)
        }
        if header.dataBytes == 0 {
            if loop { throw NodeError(.noSamples, "\(path): the file holds no audio samples, so there is nothing to loop") }
            context.logger.warning("\(path): the file holds no audio samples; the source ends at once")
            context.count("empty_input")
            return
        }
        let outFormat = AudioFormat(sampleRate: target.rate ?? header.format.sampleRate, channels: target.channels ?? header.format.channels)
        let converter = try AudioConverter(from: header.format, to: outFormat, quality: 5)
        try await announce(context, format: outFormat)
        guard let handle = FileHandle(forReadingAtPath: path) else { throw NodeError(.fileUnreadable, "\(path): cannot open") }
        defer { try? handle.close() }

        let out = context.output()
        let outFrame = samplesPerFrame(outFormat)
        let inFrameBytes = header.encoding.bytes * header.format.channels
        let chunkBytes = max(1, header.format.frames(ms: frameMs)) * inFrameBytes
        var pending: [Int16] = []
        pending.reserveCapacity(outFrame * 2)
                let pacer = context.makePacer()
        let total = header.duration

        repeat {
            try handle.seek(toOffset: header.dataOffset)
            var remaining = header.dataBytes
            while remaining > 0 {
                try Task.checkCancellation()
                let want = Int(min(UInt64(chunkBytes), remaining))
                guard let data = try handle.read(upToCount: want), !data.isEmpty else {
                    throw NodeError(.truncatedWav, "\(path): file ended \(remaining) bytes early (was it truncated while reading?)")
                }
                remaining -= UInt64(data.count)
                var decoded: [Int16] = []
                data.withUnsafeBytes { header.encoding.decode($0, into: &decoded) }
                pending += converter.convert(decoded)
                try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
                context.reportProgress(position: total - Double(remaining) / Double(header.format.bytesPerSecond * header.encoding.bytes / 2), total: total)
            }
        } while loop && !Task.isCancelled
        pending += converter.flush()
        try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
        if !pending.isEmpty { try await emit(context: context, out: out, pacer: pacer, format: outFormat, pending) }   // the last, shorter frame
    }

    private var sampleIndex: Int64 = 0

    /// A RIFF/RF64 header: the WAV reader (and its messages) takes it. A file too short to tell by
    /// its bytes goes by its name: `.wav` (or no extension) to the WAV reader, `memo.mp3` to FFmpeg's,
    /// so that a tiny `.mp3` is not called too short for a WAV header.
    private static func looksLikeWAV(_ path: String) -> Bool {
        guard let h = FileHandle(forReadingAtPath: path) else { return true }
        defer { try? h.close() }
        let head = (try? h.read(upToCount: 12)) ?? Data()   // nil for an empty file
        if head.count == 12 { return head.prefix(4) == Data("RIFF".utf8) || head.prefix(4) == Data("RF64".utf8) }
        return ["", "wav", "wave", "rf64", "bwf"].contains((path as NSString).pathExtension.lowercased())
    }

    /// A compressed file, decoded by FFmpeg as it is read.
    private func readCompressed(_ context: NodeContext) async throws {
        let file = try CompressedAudioFile(path: path)
        context.logger.info("\(path): \(file.description), \(file.format)")
        let outFormat = AudioFormat(sampleRate: target.rate ?? file.format.sampleRate, channels: target.channels ?? file.format.channels)
        let converter = try AudioConverter(from: file.format, to: outFormat, quality: 5)
        let out = context.output()
        let outFrame = samplesPerFrame(outFormat)
        let chunk = max(1, file.format.frames(ms: frameMs))
        let pacer = context.makePacer()
        var pending: [Int16] = []
        var announced = false
        var reported = 0
        repeat {
            var decodedFrames = 0
            while true {
                try Task.checkCancellation()
                let decoded: [Int16]
                do {
                    decoded = try file.read(frames: chunk)
                } catch {
                    try? await reportDamage(file, reported: &reported, context: context)
                    throw error
                }
                if file.damage.frames > reported { try await reportDamage(file, reported: &reported, context: context) }
                if decoded.isEmpty { break }
                if !announced {
                    announced = true
                    try await announce(context, format: outFormat)
                }
                decodedFrames += decoded.count / file.format.channels
                pending += converter.convert(decoded)
                try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
                let position = Double(decodedFrames) / Double(file.format.sampleRate)
                context.reportProgress(position: position, total: file.duration ?? position)
            }
            if decodedFrames == 0 {
                if loop { throw NodeError(.noSamples, "\(path): the file holds no audio samples, so there is nothing to loop") }
                context.logger.warning("\(path): the file holds no audio samples; the source ends at once")
                context.count("empty_input")
                return
            }
            if loop && !Task.isCancelled { try file.rewind(); reported = 0 }
        } while loop && !Task.isCancelled
        pending += converter.flush()
        try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
        if !pending.isEmpty { try await emit(context: context, out: out, pacer: pacer, format: outFormat, pending) }
    }

    /// Interleaved samples in one frame of `frame_ms`: at least one sample per channel, so a very low
    /// rate (a 40 Hz file at 20 ms) never makes empty frames that would be sent without end.
    private func samplesPerFrame(_ format: AudioFormat) -> Int {
        max(1, format.frames(ms: frameMs)) * format.channels
    }

    /// Damage read past (frames skipped or undecodable): said once per damaged stretch, as an `error`
    /// event (`damaged_audio`) and a warning on stderr, with the count and the media time.
    private func reportDamage(_ file: CompressedAudioFile, reported: inout Int, context: NodeContext) async throws {
        let d = file.damage
        guard d.frames > reported else { return }
        let new = d.frames - reported
        reported = d.frames
        let span = d.first == d.last ? String(format: "at %.2f s", d.last) : String(format: "at %.2f s to %.2f s", d.first, d.last)
        let at = new == d.frames ? span : String(format: "at %.2f s", d.last) + " (\(d.frames) in all, \(span))"
        let message = "\(path): \(new) damaged audio frame\(new == 1 ? "" : "s") skipped \(at)"
        context.logger.warning("\(message)")
        context.count("damaged_frames", by: UInt64(new))
        try await context.emitError(code: "damaged_audio", message: message)
    }

    /// Emits every whole frame in `pending`, keeping the remainder (one copy, not one per frame).
    private func emitWhole(_ pending: inout [Int16], frame: Int, context: NodeContext, out: OutputPort, pacer: Pacer, format: AudioFormat) async throws {
        precondition(frame > 0, "a frame holds at least one sample")
        var start = 0
        while pending.count - start >= frame {
            try Task.checkCancellation()
            try await emit(context: context, out: out, pacer: pacer, format: format, Array(pending[start..<start + frame]))
            start += frame
        }
        if start > 0 { pending.removeFirst(start) }
    }

    /// Raw PCM from a pipe or device: read as it comes, waiting without blocking a thread, so a
    /// pipe with no writer yet still stops on the first SIGINT.
    private func streamRaw(_ context: NodeContext, format rawFormat: AudioFormat, encoding: PCMEncoding) async throws {
        let fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC)
        guard fd >= 0 else { throw NodeError(.fileUnreadable, "\(path): cannot open for reading: \(String(cString: strerror(errno)))") }
        defer { close(fd) }
        let outFormat = AudioFormat(sampleRate: target.rate ?? rawFormat.sampleRate, channels: target.channels ?? rawFormat.channels)
        let converter = try AudioConverter(from: rawFormat, to: outFormat, quality: 5)
        try await announce(context, format: outFormat)
        let out = context.output()
        let pacer = context.makePacer()
        let outFrame = samplesPerFrame(outFormat)
        let inFrameBytes = encoding.bytes * rawFormat.channels
        var carry: [UInt8] = []
        var pending: [Int16] = []
        var buffer = [UInt8](repeating: 0, count: 64 * 1024)
        var writerSeen = false
        var total: UInt64 = 0
        while true {
            try Task.checkCancellation()
            if context.isStopping { break }
            let n = buffer.withUnsafeMutableBytes { Glibc.read(fd, $0.baseAddress!, $0.count) }
            if n < 0 {
                if errno == EAGAIN || errno == EINTR { writerSeen = true; try await Task.sleep(for: .milliseconds(10)); continue }
                throw NodeError(.readFailed, "\(path): read failed: \(String(cString: strerror(errno)))")
            }
            if n == 0 {
                // End of file once a writer has come and gone; before any writer, keep waiting.
                if writerSeen || total > 0 { break }
                try await Task.sleep(for: .milliseconds(10))
                continue
            }
            writerSeen = true
            total += UInt64(n)
            carry += buffer[0..<n]
            let whole = carry.count - carry.count % inFrameBytes
            var decoded: [Int16] = []
            carry.withUnsafeBytes { encoding.decode(UnsafeRawBufferPointer(rebasing: $0[0..<whole]), into: &decoded) }
            carry.removeFirst(whole)
            pending += converter.convert(decoded)
            try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
        }
        pending += converter.flush()
        try await emitWhole(&pending, frame: outFrame, context: context, out: out, pacer: pacer, format: outFormat)
        if !pending.isEmpty { try await emit(context: context, out: out, pacer: pacer, format: outFormat, pending) }   // the last, shorter frame
        if total == 0 {
            context.logger.warning("\(path): the stream ended without audio samples")
            context.count("empty_input")
        }
    }

    private func emit(context: NodeContext, out: OutputPort, pacer: Pacer, format: AudioFormat, _ samples: [Int16]) async throws {
        let frame = Frame.audio(samples, format: format, sampleIndex: sampleIndex)
        sampleIndex += Int64(samples.count / format.channels)
        if realtime {
            // Deliver each frame when its last sample would have been captured.
            let due = Duration.nanoseconds(MediaTime.nanos(samples: sampleIndex, rate: format.sampleRate))
            try await pacer.wait(until: due)
            // A frame delivered more than a frame length after its due time is late (the process is overloaded).
            if pacer.elapsed - due > .milliseconds(frameMs) { context.count("late_frames") }
        }
        try await out.send(frame)
    }

    /// Configuration of `file-source`.
    public struct Configuration: NodeConfiguration {
        public var path: String
        public var realtime: Bool
        public var frameMs: Int
        public var loop: Bool
        public var rate: Int?
        public var channels: Int?
        public var raw: RawPCM?
        public var device: String?
        public var latencyMs: Int?
        public var onDeviceLost: String?
        public static let parameters: [ParamSpec] = [
            ParamSpec("path", .path, required: true, doc: "WAV file (PCM 8/16/24/32-bit int, 32/64-bit float), compressed audio (M4A/AAC, MP3, Ogg Opus/Vorbis, FLAC; FFmpeg) or raw PCM with `raw`"),
            ParamSpec("realtime", .bool, default: false, doc: "pace frames at 1x real time instead of as fast as possible"),
            ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "frame length in milliseconds"),
            ParamSpec("loop", .bool, default: false, doc: "start over at the end of the file"),
            ParamSpec("rate", .int(1000...384_000), doc: "deliver at this sample rate, resampling (default: the file's)"),
            ParamSpec("channels", .int(1...8), doc: "deliver this many channels, mixing (default: the file's)"),
            ParamSpec("raw", .map, doc: "raw PCM: { rate: 16000, channels: 1, encoding: s16le|s24le|s32le|f32le|f64le|u8 }"),
            ParamSpec("device", .string, doc: "ignored (accepted so a capture node can be swapped for a file)"),
            ParamSpec("latency_ms", .int, doc: "ignored (accepted so a capture node can be swapped for a file)"),
            ParamSpec("on_device_lost", .string, doc: "ignored (accepted so a capture node can be swapped for a file)"),
        ]

        /// Paced at 1x, the source is timing-critical; read as fast as possible, it is bulk work.
        public var executor: ExecutorClass? { realtime ? .realtime : .bulk }

        /// The format delivered, when known before the file is opened.
        var outputFormat: AudioFormat? {
            guard let r = rate ?? raw?.format.sampleRate, let ch = channels ?? raw?.format.channels else { return nil }
            return AudioFormat(sampleRate: r, channels: ch)
        }
    }

    /// `raw: { rate, channels, encoding }`: how to read a headerless PCM file.
    public struct RawPCM: Decodable, Sendable {
        public var format: AudioFormat
        public var encoding: PCMEncoding

        public init(from decoder: any Decoder) throws {
            guard case .map(let m) = try ParamValue(from: decoder) else { throw ConfigurationError("raw: expected a mapping") }
            var problems: [String] = []
            var rate = 16000, channels = 1, encoding = PCMEncoding.s16le
            for k in m.keys.sorted() {
                let v = m[k]!
                switch (k, v) {
                case ("rate", .int(let r)) where (1000...384_000).contains(r): rate = r
                case ("channels", .int(let n)) where (1...8).contains(n): channels = n
                case ("rate", _): problems.append("raw.rate: expected an integer in 1000...384000")
                case ("channels", _): problems.append("raw.channels: expected an integer in 1...8")
                case ("encoding", _):
                    if let e = PCMEncoding(rawValue: v.description) { encoding = e } else {
                        problems.append("raw.encoding: expected one of \(PCMEncoding.allCases.map(\.rawValue).joined(separator: ", "))")
                    }
                default: problems.append("raw: unknown key '\(k)'; expected rate, channels, encoding")
                }
            }
            if !problems.isEmpty { throw ConfigurationError(problems.joined(separator: "; ")) }
            self.format = AudioFormat(sampleRate: rate, channels: channels)
            self.encoding = encoding
        }
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "file-source", summary: "Reads a WAV, compressed (M4A/AAC, MP3, Ogg, FLAC) or raw PCM file as s16 audio frames",
        family: "sources", inputs: [], outputs: [PortSpec("out", [.audio]), .events],
        configuration: Configuration.self,
        format: .typed(Configuration.self, output: { c, _ in c.outputFormat }),
        executor: .realtime,
        make: { c, _ in FileSourceNode(configuration: c) })
}

/// What kind of file a source path names, checked before anything is opened.
enum FileKind: Equatable {
    /// A regular file: read with seeks, sized in advance.
    case regular
    /// A pipe, socket or character device: read as it comes.
    case stream

    static func of(_ path: String) throws -> FileKind {
        var st = stat()
        guard stat(path, &st) == 0 else {
            let e = errno
            if e == ENOENT { throw NodeError(.fileNotFound, noSuchFileMessage(path)) }
            throw NodeError(.fileUnreadable, "\(path): \(String(cString: strerror(e)))")
        }
        switch st.st_mode & S_IFMT {
        case S_IFREG: return .regular
        case S_IFDIR: throw NodeError(.pathIsDirectory, "\(path): is a directory; give the path of an audio file")
        case S_IFIFO, S_IFCHR, S_IFSOCK: return .stream
        default: throw NodeError(.notARegularFile, "\(path): not a regular file")
        }
    }
}
