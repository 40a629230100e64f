// voicepipe-fuzz: fuzz targets for the parsers that read untrusted input — graph files (YAML loader
// and validator), WAV headers, audio files through FFmpeg, RTP and RFC 3640 packets, multicast DNS,
// Wyoming, NATS, the Tencent ASR and digital-human server messages, and the HTTP and WebSocket framing
// of `serve`. Two drivers share the targets:
//
// - built with `-sanitize=fuzzer,address -D VOICEPIPE_LIBFUZZER` (bench/libfuzz), `libfuzzer TARGET`
//   hands the target to libFuzzer: coverage-guided, under AddressSanitizer, with the seed corpus in
//   bench/fuzz-corpus/TARGET;
// - in any build, a target name runs a built-in mutation fuzzer for a bounded time (bench/fuzz).
//
// An input that traps (a crash) or runs longer than the hang limit is written to the crash directory
// and the run exits non-zero. Errors thrown by the parsers are the expected outcome for bad input.
//
//   voicepipe-fuzz all --seconds 20 --crash-dir .build/fuzz-crashes
//   voicepipe-fuzz yaml --seconds 60 --seed 7
//   voicepipe-fuzz replay wav crash-wav-000.bin
//   voicepipe-fuzz seeds bench/fuzz-corpus          (writes each target's seeds, one file each)
//   voicepipe-fuzz libfuzzer rtp -max_total_time=30 .build/libfuzzer-corpus/rtp bench/fuzz-corpus/rtp
import DigitalHuman
import Foundation
import NATSClient
import NIOCore
import NIOEmbedded
import NIOHTTP1
import NIOWebSocket
import Nodes
import PipelineCore
import ServiceDiscovery
import TencentASR
import Wyoming

// MARK: - Crash and hang capture

/// The input being tried, kept where a signal handler can reach it without allocating.
nonisolated(unsafe) var currentInput = UnsafeMutableRawBufferPointer.allocate(byteCount: 1 << 20, alignment: 1)
nonisolated(unsafe) var currentLength = 0
nonisolated(unsafe) var crashPath: UnsafeMutablePointer<CChar>?
nonisolated(unsafe) var inputStarted: UInt64 = 0   // monotonic ns; 0 = idle

func monotonicNanos() -> UInt64 {
    var ts = timespec()
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return UInt64(ts.tv_sec) * 1_000_000_000 + UInt64(ts.tv_nsec)
}

func dumpCurrentInput() {
    guard let path = crashPath else { return }
    let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
    if fd >= 0 {
        _ = write(fd, currentInput.baseAddress!, currentLength)
        close(fd)
    }
}

func installCrashHandlers() {
    for sig in [SIGILL, SIGTRAP, SIGSEGV, SIGBUS, SIGABRT, SIGFPE] {
        var action = sigaction()
        action.__sigaction_handler.sa_handler = { sig in
            dumpCurrentInput()
            // Only async-signal-safe calls here: a fixed message, then the default action.
            _ = "voicepipe-fuzz: CRASH; the input is saved in the crash directory\n".withCString { write(2, $0, strlen($0)) }
            signal(sig, SIG_DFL)
            raise(sig)
        }
        sigemptyset(&action.sa_mask)
        action.sa_flags = 0
        sigaction(sig, &action, nil)
    }
}

func startHangWatchdog(limit: Double) {
    let thread = Thread {
        while true {
            usleep(100_000)
            let started = inputStarted
            if started != 0, Double(monotonicNanos() &- started) / 1e9 > limit {
                dumpCurrentInput()
                FileHandle.standardError.write(Data("voicepipe-fuzz: HANG (one input ran over \(limit) s); input saved\n".utf8))
                _exit(3)
            }
        }
    }
    thread.start()
}

// MARK: - Targets

struct Target {
    var name: String
    var text: Bool
    var dictionary: [String]
    var seeds: () -> [[UInt8]]
    var run: ([UInt8]) -> Void
}

let registry = BuiltinNodes.registry()
let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("voicepipe-fuzz-\(getpid())").path
try? FileManager.default.createDirectory(atPath: scratch, withIntermediateDirectories: true)

func repoFile(_ relative: String) -> String {
    var dir = URL(fileURLWithPath: CommandLine.arguments[0]).resolvingSymlinksInPath().deletingLastPathComponent()
    for _ in 0..<6 {
        let candidate = dir.appendingPathComponent(relative).path
        if FileManager.default.fileExists(atPath: candidate) { return candidate }
        dir = dir.deletingLastPathComponent()
    }
    return FileManager.default.currentDirectoryPath + "/" + relative
}

/// Test signals for seeds.
enum SeedSignal {
    /// A 440 Hz tone at -12 dBFS (48 kHz), interleaved channels treated alike.
    static func tone(samples: Int) -> [Int16] {
        (0..<samples).map { Int16(8000 * sin(2 * Double.pi * 440 * Double($0) / 48000)) }
    }
}

/// The files of bench/fuzz-corpus/NAME (for seeds that are whole media files, made by independent encoders).
func corpusFiles(_ name: String) -> [[UInt8]] {
    let dir = repoFile("bench/fuzz-corpus/\(name)")
    let files = ((try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []).sorted()
    return files.compactMap { FileManager.default.contents(atPath: dir + "/" + $0).map { Array($0) } }
}

func wav(rate: UInt32, channels: UInt16, bits: UInt16, tag: UInt16, samples: Int) -> [UInt8] {
    var d: [UInt8] = []
    func u32(_ v: UInt32) { d += withUnsafeBytes(of: v.littleEndian, Array.init) }
    func u16(_ v: UInt16) { d += withUnsafeBytes(of: v.littleEndian, Array.init) }
    let dataBytes = UInt32(samples) * UInt32(channels) * UInt32(bits / 8)
    d += Array("RIFF".utf8); u32(36 + dataBytes); d += Array("WAVE".utf8)
    d += Array("fmt ".utf8); u32(16); u16(tag); u16(channels); u32(rate)
    u32(rate * UInt32(channels) * UInt32(bits / 8)); u16(channels * bits / 8); u16(bits)
    d += Array("data".utf8); u32(dataBytes)
    d += (0..<Int(dataBytes)).map { UInt8(truncatingIfNeeded: $0 &* 37) }
    return d
}

let targets: [Target] = [
    Target(name: "yaml", text: true,
           dictionary: ["&a ", "*a", "<<: *a", "{", "}", "[", "]", ": ", "\n  ", "\n    ", "- ", "type: ", "version: 1", "nodes:", "links:",
                        " -> ", ".out", ".events", "${HOME}", "${X:-1}", "$$", "!!binary ", "'", "\"", "1e309", "-1e19", "1e19",
                        "9223372036854775807", "-9223372036854775808", "0x7fffffff", "-1", "0", "null", "~", "true", "capacity: ",
                        "overflow: drop-oldest", "latency_budget_ms: ", "executor: realtime", "restart: {max: 1}", "plugins: [x]",
                        "tone-source", "file-source", "wav-sink", "vad", "slicer", "resample", "opus-encode", "jitter-buffer", "asr",
                        "rate: ", "frame_ms: ", "duration_ms: ", "seed: ", "\t", "#", "---\n", "...\n", "? "],
           seeds: {
               let dir = repoFile("pipelines")
               let files = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
               var out = files.filter { $0.hasSuffix(".yaml") }.sorted().compactMap { FileManager.default.contents(atPath: dir + "/" + $0).map { Array($0) } }
               out.append(Array("version: 1\nnodes:\n  a: &p { type: tone-source, duration_ms: 40 }\n  b: { type: null-sink }\nlinks:\n  - a -> b\n".utf8))
               return out
           },
           run: { bytes in
               let text = String(decoding: bytes, as: UTF8.self)
               let spec = GraphLoader.parse(text, file: "<fuzz>", environment: ["HOME": "/root", "X": "2"])
               if let g = try? GraphValidator.validate(spec, registry: registry) {
                   _ = try? Pipeline(graph: g)
               }
           }),
    Target(name: "wav", text: false, dictionary: ["RIFF", "WAVE", "fmt ", "data", "LIST", "RF64", "\u{FF}\u{FF}\u{FF}\u{FF}", "\u{0}\u{0}\u{0}\u{0}", "\u{FE}\u{FF}"],
           seeds: {
               [wav(rate: 16000, channels: 1, bits: 16, tag: 1, samples: 64), wav(rate: 48000, channels: 2, bits: 24, tag: 1, samples: 16),
                wav(rate: 8000, channels: 1, bits: 8, tag: 1, samples: 40), wav(rate: 44100, channels: 2, bits: 32, tag: 3, samples: 10),
                wav(rate: 22050, channels: 1, bits: 64, tag: 3, samples: 8), wav(rate: 16000, channels: 1, bits: 32, tag: 0xFFFE, samples: 8)]
           },
           run: { bytes in
               let path = scratch + "/input.wav"
               _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
               guard let h = try? WAVHeader.read(path: path) else { return }
               let start = Int(min(h.dataOffset, UInt64(bytes.count)))
               let end = Int(min(h.dataOffset + h.dataBytes, UInt64(bytes.count)))
               var out: [Int16] = []
               bytes[start..<end].withUnsafeBytes { h.encoding.decode($0, into: &out) }
               if let c = try? AudioConverter(from: h.format, to: AudioFormat(sampleRate: 16000, channels: 1), quality: 3) {
                   _ = c.convert(out)
               }
           }),
    Target(name: "rtp", text: false, dictionary: ["\u{80}", "\u{90}", "\u{A0}", "\u{BF}", "\u{0}\u{0}", "\u{FF}\u{FF}"],
           seeds: {
               [RTPPacket(marker: true, payloadType: 96, sequenceNumber: 1, timestamp: 160, ssrc: 0x1234, payload: Array(repeating: 7, count: 40)).serialized(),
                RTPPacket(payloadType: 111, sequenceNumber: 65535, timestamp: .max, ssrc: 1, payload: [1, 2, 3]).serialized(),
                [0x90, 0x60, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0xBE, 0xDE, 0, 1, 0x10, 0xAA, 0, 0, 1, 2, 3],
                [0xA0, 0x60, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 9, 9, 0, 3],
                [0x82, 0x60, 0, 1, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 5]]
           },
           run: { bytes in _ = try? RTPPacket(parsing: bytes) }),
    Target(name: "tencent", text: true,
           dictionary: ["\"code\":", "\"message\":", "\"voice_id\":", "\"result\":", "\"final\":", "\"slice_type\":", "\"index\":",
                        "\"start_time\":", "\"end_time\":", "\"voice_text_str\":", "\"word_size\":", "\"word_list\":", "1e30", "4002.5",
                        "9223372036854775807", "-1", "null", "[]", "{}", "\"\u{1B}[2J\"", "\"\u{202E}\"", "0", "1", "2"],
           seeds: {
               [#"{"code":0,"message":"success","voice_id":"v1","message_id":"v1_11_0"}"#,
                #"{"code":0,"message":"success","voice_id":"v1","message_id":"v1_241","result":{"slice_type":1,"index":0,"start_time":0,"end_time":1240,"voice_text_str":"hello","word_size":0,"word_list":[]}}"#,
                #"{"code":0,"message":"success","voice_id":"v1","result":{"slice_type":2,"index":0,"start_time":0,"end_time":2040,"voice_text_str":"hello world.","word_size":0}}"#,
                #"{"code":0,"message":"success","voice_id":"v1","final":1}"#,
                #"{"code":4008,"message":"no audio for 15 s","voice_id":"v1"}"#].map { Array($0.utf8) }
           },
           run: { bytes in _ = try? TencentServerMessage.parse(String(decoding: bytes, as: UTF8.self)) }),
    Target(name: "ivh", text: true,
           dictionary: ["\"Header\":", "\"Payload\":", "\"Code\":", "\"Message\":", "\"Type\":", "\"Text\":", "\"TextDisplay\":", "\"SpeechId\":",
                        "\"SpeakStatus\":", "1e30", "-1e300", "NaN", "4.5", "null", "[]", "{}", "\"1\"", "\"9223372036854775808\""],
           seeds: {
               [#"{"Header":{"Code":0,"Message":"","RequestID":"r"},"Payload":{"Type":2,"TextDisplay":"hi","SpeechId":3}}"#,
                #"{"Header":{"Code":110014,"Message":"not ready"}}"#,
                #"{"Payload":{"Type":3,"SpeakStatus":"SpeakOver","SpeechId":"4"}}"#,
                #"{"Type":1,"Text":"hello"}"#].map { Array($0.utf8) }
           },
           run: { bytes in _ = IVHPush.decode(String(decoding: bytes, as: UTF8.self)) }),
    Target(name: "wyoming", text: false,
           dictionary: ["{\"type\":", "\"data\":", "\"data_length\":", "\"payload_length\":", "\"version\":", "\n", "1e30", "-1",
                        "99999999999", "null", "[]", "{}", "\"transcript\"", "\"audio-chunk\"", "\"text\":"],
           seeds: {
               [WyomingEvent(type: "transcript", data: ["text": "hello world"]).encoded(),
                WyomingEvent(type: "audio-chunk", data: ["rate": 16000, "width": 2, "channels": 1], payload: [1, 2, 3, 4]).encoded(),
                WyomingEvent(type: "transcript-chunk", data: ["text": "he"]).encoded() + WyomingEvent(type: "transcript-stop").encoded(),
                Array(#"{"type":"error","data":{"text":"x","code":"y"}}"#.utf8) + [10]]
           },
           run: { bytes in
               // Whole, and cut in two at a point that depends on the input (the socket splits reads anywhere).
               var whole = WyomingDecoder()
               _ = try? whole.push(bytes)
               var split = WyomingDecoder()
               let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
               if (try? split.push(bytes[..<cut])) != nil { _ = try? split.push(bytes[cut...]) }
           }),
    Target(name: "aac-rtp", text: false,
           dictionary: [[0x00, 0x10], [0x00, 0x20], [0xFF, 0xF8], [0x1F, 0xFF], [0x00, 0x00]].map { String(decoding: $0, as: UTF8.self) },
           seeds: {
               RTPMPEG4Payload.packetize((0..<200).map { UInt8($0 & 0xFF) }).map(\.payload)
                   + RTPMPEG4Payload.packetize((0..<3000).map { UInt8($0 & 0xFF) }).map(\.payload)
                   + [[0x00, 0x20, 0x00, 0x18, 0x00, 0x10, 1, 2, 3, 4, 5]]
           },
           run: { bytes in
               // A packet as it comes, then the same bytes as the fragments of one unit (the reassembly path).
               var d = RTPMPEG4Payload.Depacketizer()
               _ = try? d.units(in: bytes, marker: bytes.first.map { $0 & 1 == 1 } ?? true, timestamp: 7)
               let cut = bytes.isEmpty ? 0 : Int(bytes[0]) % (bytes.count + 1)
               _ = try? d.units(in: Array(bytes[..<cut]), marker: false, timestamp: 9)
               _ = try? d.units(in: Array(bytes[cut...]), marker: true, timestamp: 9)
           }),
    Target(name: "mdns", text: false,
           dictionary: [[0xC0, 0x0C], [0xC0, 0x00], [0x00, 0x0C], [0x00, 0x21], [0x00, 0x10], [0x80, 0x01], [0x3F]].map { String(decoding: $0, as: UTF8.self) },
           seeds: {
               let name = DNSMessage.Name("peer._voicepipe-intercom._udp.local")
               let answer = DNSMessage(flags: DNSMessage.responseFlags, answers: [
                   .init(name: "_voicepipe-intercom._udp.local", ttl: 10, data: .ptr(name)),
                   .init(name: name, ttl: 10, data: .srv(priority: 0, weight: 0, port: 5006, target: "vp-1.local")),
                   .init(name: name, ttl: 10, data: .txt([Array("id=abc".utf8), Array("ctl=4000".utf8)])),
                   .init(name: "vp-1.local", ttl: 10, data: .a([10, 0, 0, 1])),
               ])
               let query = DNSMessage(questions: [.init(name: "_voicepipe-intercom._udp.local", type: .ptr, recordClass: DNSMessage.classIN, unicastResponse: false)])
               return [(try? answer.encode()) ?? [], (try? answer.encode(compress: false)) ?? [], (try? query.encode()) ?? []]
                   + [Array(#"{"type":"invite","id":"00ff","rtp_port":5006,"codec":"opus"}"#.utf8)]
           },
           run: { bytes in
               _ = try? DNSMessage.decode(bytes)
               _ = IntercomMessage.decode(bytes)
           }),
    Target(name: "nats", text: true,
           dictionary: ["MSG ", "HMSG ", "INFO ", "PING\r\n", "PONG\r\n", "+OK\r\n", "-ERR '", "\r\n", "NATS/1.0", " 503", ": ", "{\"max_payload\":", " 99999999"],
           seeds: {
               ["INFO {\"server_id\":\"S\",\"max_payload\":1048576,\"headers\":true,\"jetstream\":true}\r\nPING\r\n",
                "MSG voicepipe.asr.s1.transcript 1 _INBOX.a.1 5\r\nhello\r\n",
                "HMSG _INBOX.x.7 2 37 52\r\nNATS/1.0\r\nNats-Msg-Id: m1\r\nX: y z\r\n\r\n{\"stream\":\"V\",\"seq\":9}\r\n",
                "HMSG _INBOX.z 2 30 30\r\nNATS/1.0 503 No Responders\r\n\r\n\r\n-ERR 'Authorization Violation'\r\n"].map { Array($0.utf8) }
           },
           run: { bytes in
               // Whole, and split in two at a point the input chooses: the same bounded decoder either way.
               var p = NATSParser()
               p.maxPayload = 1 << 16
               p.feed(bytes)
               while (try? p.next()) != nil {}
               if let first = bytes.first, bytes.count > 1 {
                   let cut = Int(first) % bytes.count
                   var q = NATSParser()
                   q.maxPayload = 1 << 16
                   q.feed(bytes[..<cut])
                   while (try? q.next()) != nil {}
                   q.feed(bytes[cut...])
                   while (try? q.next()) != nil {}
               }
           }),
    Target(name: "ffmpeg", text: false,
           dictionary: ["ID3", "fLaC", "OggS", "OpusHead", "OpusTags", "\u{1}vorbis", "ftyp", "moov", "mdat", "trak", "mp4a", "esds",
                        "\u{FF}\u{FB}", "\u{FF}\u{F1}", "\u{FF}\u{F9}", "RIFF", "WAVE", "FORM", "AIFF", "\u{0}\u{0}\u{0}\u{0}", "\u{FF}\u{FF}\u{FF}\u{FF}"],
           seeds: { corpusFiles("ffmpeg") },
           run: { bytes in
               // What file-source does with a file that is not a WAV: open it through FFmpeg and decode,
               // here at most 30 s of audio, so one input stays fast.
               let path = scratch + "/input.media"
               _ = FileManager.default.createFile(atPath: path, contents: Data(bytes))
               guard let f = try? CompressedAudioFile(path: path) else { return }
               var frames = 0
               while frames < f.format.sampleRate * 30, let block = try? f.read(frames: 1024), !block.isEmpty {
                   frames += block.count / max(1, f.format.channels)
               }
               _ = f.damage
           }),
    Target(name: "opus", text: false, dictionary: [[0x00], [0x01], [0x03], [0xFC], [0xFF], [0x7F], [0x80]].map { String(decoding: $0, as: UTF8.self) },
           seeds: {
               // A control byte (bit 0: stereo decoder, bit 1: decode with FEC), then packets, each after its
               // length byte (0: a lost packet, concealed): what opus-decode does with a peer's RTP payloads.
               var seeds: [[UInt8]] = []
               for (channels, frameMs) in [(1, 20), (2, 10), (1, 60)] {
                   guard let e = try? OpusEncoderHandle(format: AudioFormat(sampleRate: 48000, channels: channels), frameMs: frameMs, application: 2048,
                                                        bitrate: 16000, fec: true, expectedLoss: 10, dtx: false, complexity: 5) else { continue }
                   let tone = SeedSignal.tone(samples: e.frameSamples * channels * 3)
                   var seed: [UInt8] = [UInt8(channels - 1) | 2]
                   tone.withUnsafeBufferPointer { b in
                       for i in 0..<3 {
                           if let packet = try? e.encode(b, offset: i * e.frameSamples * channels), packet.count < 256 {
                               seed.append(UInt8(packet.count)); seed += packet
                           }
                       }
                   }
                   seed.append(0)
                   seeds.append(seed)
               }
               return seeds
           },
           run: { bytes in
               guard let control = bytes.first,
                     let d = try? OpusDecoderHandle(format: AudioFormat(sampleRate: 48000, channels: control & 1 == 1 ? 2 : 1)) else { return }
               var at = 1
               while at < bytes.count {
                   let n = Int(bytes[at]); at += 1
                   let packet = Array(bytes[at..<min(bytes.count, at + n)]); at += n
                   if packet.isEmpty { _ = try? d.decode(nil, frameSamples: 960) } else {
                       if control & 2 != 0 { _ = try? d.decode(packet, fec: true, frameSamples: 960) }
                       _ = try? d.decode(packet)
                   }
               }
           }),
    Target(name: "aac", text: false, dictionary: [[0x11, 0x88], [0x12, 0x10], [0x13, 0x90], [0xF8], [0x00, 0x00], [0xFF, 0xFF]].map { String(decoding: $0, as: UTF8.self) },
           seeds: {
               // Two bytes of AudioSpecificConfig (as an SDP `config=` gives it), then access units, each
               // after a 16-bit length: what aac-decode does with a peer's RFC 3640 payloads.
               var seeds: [[UInt8]] = []
               for (rate, channels, config) in [(48000, 1, [UInt8]([0x11, 0x88])), (16000, 2, [UInt8]([0x14, 0x10]))] {
                   guard let e = try? AACEncoderHandle(format: AudioFormat(sampleRate: rate, channels: channels), bitrate: 32000) else { continue }
                   let tone = SeedSignal.tone(samples: e.frameSamples * channels * 6)
                   var seed = config
                   tone.withUnsafeBufferPointer { b in
                       var units: [[UInt8]] = []
                       for i in 0..<6 { units += (try? e.encode(b, offset: i * e.frameSamples * channels)) ?? [] }
                       units += (try? e.encode(nil)) ?? []
                       for u in units.prefix(6) { seed += [UInt8(u.count >> 8), UInt8(u.count & 0xFF)] + u }
                   }
                   seeds.append(seed)
               }
               return seeds
           },
           run: { bytes in
               guard bytes.count >= 2 else { return }
               let config = Array(bytes[0..<2])
               // The decoder's rate and channels as the SDP states them (here from the config's bits).
               let rates = [96000, 88200, 64000, 48000, 44100, 32000, 24000, 22050, 16000, 12000, 11025, 8000]
               let index = Int((bytes[0] & 0x07) << 1 | bytes[1] >> 7)
               let rate = index < rates.count ? rates[index] : 48000
               let channels = Int((bytes[1] >> 3) & 0x0F) == 2 ? 2 : 1
               guard let d = try? AACDecoderHandle(format: AudioFormat(sampleRate: rate, channels: channels), config: config) else { return }
               var at = 2
               while at + 2 <= bytes.count {
                   let n = Int(bytes[at]) << 8 | Int(bytes[at + 1]); at += 2
                   let unit = Array(bytes[at..<min(bytes.count, at + n)]); at += n
                   _ = try? d.decode(unit)
               }
           }),
    Target(name: "http", text: true,
           dictionary: ["GET ", "POST ", " HTTP/1.1\r\n", " HTTP/1.0\r\n", "\r\n", "\r\n\r\n", "Host: ", "Upgrade: websocket\r\n",
                        "Connection: Upgrade\r\n", "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "Sec-WebSocket-Version: 13\r\n",
                        "Content-Length: ", "Transfer-Encoding: chunked\r\n", "0\r\n\r\n", "?", "&", "=", "%", "%00", "%FF",
                        "/asr/v2/1259228442", "secretid=", "timestamp=", "expired=", "nonce=", "voice_id=", "signature=", "engine_model_type=16k_zh"],
           seeds: {
               ["GET /asr/v2/1259228442?engine_model_type=16k_zh&expired=1700086400&nonce=7&secretid=AKID&timestamp=1700000000&voice_format=1&voice_id=v1&signature=abc%3D HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
                "GET /healthz HTTP/1.1\r\nHost: localhost\r\n\r\nGET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n",
                "POST /sessions HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                "GET /talk?token=abc HTTP/1.0\r\nContent-Length: 3\r\n\r\nabc"].map { Array($0.utf8) }
           },
           run: { bytes in
               // serve's HTTP parsing (NIO's decoder, as `configureHTTPServerPipeline` installs it), then what the
               // Tencent route reads from a request head: the query and the text it signs.
               let channel = EmbeddedChannel(handler: ByteToMessageHandler(HTTPRequestDecoder(leftOverBytesStrategy: .forwardBytes)))
               _ = try? channel.writeInbound(channel.allocator.buffer(bytes: bytes))
               while let part = (try? channel.readInbound(as: HTTPServerRequestPart.self)) ?? nil {
                   guard case .head(let head) = part else { continue }
                   let parts = head.uri.split(separator: "?", maxSplits: 1, omittingEmptySubsequences: false)
                   var query: [String: String] = [:]
                   for (k, v) in TencentSignature.parseQuery(parts.count > 1 ? String(parts[1]) : "") { query[k] = v }
                   _ = TencentSignature.signedText(host: head.headers.first(name: "Host") ?? "", path: String(parts.first ?? ""), parameters: query)
               }
               _ = try? channel.finish()
           }),
    Target(name: "websocket", text: false,
           dictionary: [[0x81], [0x82], [0x88], [0x89], [0x8A], [0x01], [0x00], [0x80], [0x7E, 0x00], [0x7F, 0, 0, 0, 0, 0, 0, 0],
                        [0xFF, 0xFF, 0xFF, 0xFF]].map { String(decoding: $0, as: UTF8.self) } + ["{\"type\":\"end\"}", "end"],
           seeds: {
               func frame(_ opcode: UInt8, _ payload: [UInt8], fin: Bool = true, mask: [UInt8] = [1, 2, 3, 4]) -> [UInt8] {
                   var f: [UInt8] = [(fin ? 0x80 : 0) | opcode]
                   if payload.count < 126 { f.append(0x80 | UInt8(payload.count)) } else { f += [0x80 | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)] }
                   f += mask
                   f += payload.enumerated().map { $0.element ^ mask[$0.offset % 4] }
                   return f
               }
               return [frame(2, (0..<640).map { UInt8($0 & 0xFF) }) + frame(1, Array(#"{"type":"end"}"#.utf8)),
                       frame(1, Array("hel".utf8), fin: false) + frame(0, Array("lo".utf8)) + frame(9, []) + frame(8, [0x03, 0xE8])]
           },
           run: { bytes in
               // serve's WebSocket framing (NIO's decoder with the route's frame limit), then each text
               // message as the session reads it (JSON, or the bare word "end").
               let channel = EmbeddedChannel(handler: ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: 1 << 16)))
               _ = try? channel.writeInbound(channel.allocator.buffer(bytes: bytes))
               while let frame = (try? channel.readInbound(as: WebSocketFrame.self)) ?? nil {
                   guard frame.opcode == .text else { continue }
                   let text = String(buffer: frame.unmaskedData)
                   if let data = text.data(using: .utf8), let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any] {
                       _ = object["type"] as? String
                   }
               }
               _ = try? channel.finish()
           }),
]

// MARK: - Mutation

struct SplitMix: RandomNumberGenerator {
    var state: UInt64
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

func mutate(_ input: [UInt8], corpus: [[UInt8]], dictionary: [[UInt8]], rng: inout SplitMix, maxLength: Int) -> [UInt8] {
    var d = input
    let rounds = 1 + Int(rng.next() % 4)
    for _ in 0..<rounds {
        switch rng.next() % 9 {
        case 0 where !d.isEmpty:   // flip a bit
            let i = Int(rng.next() % UInt64(d.count)); d[i] ^= 1 << (rng.next() % 8)
        case 1 where !d.isEmpty:   // an interesting byte
            let i = Int(rng.next() % UInt64(d.count)); d[i] = [0, 0xFF, 0x7F, 0x80, 0x20, 0x0A, 0x3A, 0x2D][Int(rng.next() % 8)]
        case 2 where !d.isEmpty:   // delete a run
            let i = Int(rng.next() % UInt64(d.count)); let n = min(d.count - i, 1 + Int(rng.next() % 16)); d.removeSubrange(i..<i + n)
        case 3:                    // insert a dictionary token
            guard let token = dictionary.randomElement(using: &rng) else { break }
            let i = d.isEmpty ? 0 : Int(rng.next() % UInt64(d.count + 1)); d.insert(contentsOf: token, at: i)
        case 4 where !d.isEmpty:   // duplicate a run
            let i = Int(rng.next() % UInt64(d.count)); let n = min(d.count - i, 1 + Int(rng.next() % 64))
            let j = Int(rng.next() % UInt64(d.count + 1)); d.insert(contentsOf: d[i..<i + n], at: j)
        case 5:                    // splice with another corpus entry
            guard let other = corpus.randomElement(using: &rng), !other.isEmpty, !d.isEmpty else { break }
            let cut = Int(rng.next() % UInt64(d.count)); let from = Int(rng.next() % UInt64(other.count))
            d = Array(d[..<cut]) + Array(other[from...])
        case 6 where d.count >= 4: // overwrite a 32-bit word with an extreme value
            let i = Int(rng.next() % UInt64(d.count - 3))
            let v: UInt32 = [0, 1, 0x7FFF_FFFF, 0x8000_0000, 0xFFFF_FFFF, 0xFFFF_FFFE, 44, 16][Int(rng.next() % 8)]
            withUnsafeBytes(of: v.littleEndian) { for k in 0..<4 { d[i + k] = $0[k] } }
        case 7 where !d.isEmpty:   // replace a digit run with an extreme number
            guard let i = d.indices.filter({ d[$0] >= 0x30 && d[$0] <= 0x39 }).randomElement(using: &rng) else { break }
            var j = i; while j < d.count, d[j] >= 0x30 && d[j] <= 0x39 { j += 1 }
            let numbers = ["1e309", "-1", "9223372036854775807", "18446744073709551616", "1e19", "0", "4002.5", "-9223372036854775808", "600000000000000"]
            d.replaceSubrange(i..<j, with: Array(numbers.randomElement(using: &rng)!.utf8))
        default:                   // truncate
            if !d.isEmpty { d.removeLast(Int(rng.next() % UInt64(min(d.count, 32))) + 0) }
        }
    }
    if d.count > maxLength { d.removeLast(d.count - maxLength) }
    return d
}

// MARK: - Driver

func runTarget(_ t: Target, seconds: Double, seed: UInt64, crashDir: String) -> Int {
    let path = crashDir + "/crash-\(t.name).bin"
    crashPath = strdup(path)
    var rng = SplitMix(state: seed)
    var corpus = t.seeds()
    let dictionary = t.dictionary.map { Array($0.utf8) }
    let maxLength = t.text ? 8192 : 4096
    let deadline = monotonicNanos() + UInt64(seconds * 1e9)
    var n = 0
    var kept = 0
    while monotonicNanos() < deadline {
        let base = corpus.isEmpty ? [] : corpus[Int(rng.next() % UInt64(corpus.count))]
        let input = n < corpus.count ? corpus[n] : mutate(base, corpus: corpus, dictionary: dictionary, rng: &rng, maxLength: maxLength)
        currentLength = min(input.count, currentInput.count)
        input.withUnsafeBytes { src in currentInput.baseAddress!.copyMemory(from: src.baseAddress ?? UnsafeRawPointer(currentInput.baseAddress!), byteCount: currentLength) }
        inputStarted = monotonicNanos()
        t.run(input)
        inputStarted = 0
        n += 1
        // Keep a sample of mutants as new bases, so mutations compound (bounded corpus).
        if rng.next() % 64 == 0 {
            if corpus.count < 512 { corpus.append(input) } else { corpus[Int(rng.next() % 512)] = input }
            kept += 1
        }
    }
    print("voicepipe-fuzz: \(t.name): \(n) inputs in \(String(format: "%.0f", seconds)) s, no crash, no hang (seed \(seed))")
    return n
}

var args = Array(CommandLine.arguments.dropFirst())
func option(_ name: String, _ args: inout [String]) -> String? {
    guard let i = args.firstIndex(of: name), i + 1 < args.count else { return nil }
    defer { args.removeSubrange(i...i + 1) }
    return args[i + 1]
}
#if VOICEPIPE_LIBFUZZER
/// libFuzzer's entry for a program with its own `main` (LLVM 11 and later).
@_silgen_name("LLVMFuzzerRunDriver")
func llvmFuzzerRunDriver(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>?>,
                         _ callback: @convention(c) (UnsafePointer<UInt8>?, Int) -> CInt) -> CInt

nonisolated(unsafe) var libFuzzerTarget: Target?

/// One input, from libFuzzer (which also needs this symbol to link).
@_cdecl("LLVMFuzzerTestOneInput")
func llvmFuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    libFuzzerTarget?.run(size == 0 || data == nil ? [] : Array(UnsafeBufferPointer(start: data, count: size)))
    return 0
}

if args.first == "libfuzzer" {
    guard args.count >= 2, let t = targets.first(where: { $0.name == args[1] }) else {
        print("usage: voicepipe-fuzz libfuzzer TARGET [libFuzzer options] [corpus directories]"); exit(2)
    }
    libFuzzerTarget = t
    // libFuzzer reads its own options (-max_total_time=, -runs=, ...) and corpus directories.
    let forward = [CommandLine.arguments[0]] + Array(args.dropFirst(2))
    var cArgs: [UnsafeMutablePointer<CChar>?] = forward.map { strdup($0) } + [nil]
    var argc = CInt(forward.count)
    let status = cArgs.withUnsafeMutableBufferPointer { buffer -> CInt in
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = buffer.baseAddress
        return llvmFuzzerRunDriver(&argc, &argv, llvmFuzzerTestOneInput)
    }
    exit(status)
}
#endif

if args.first == "libfuzzer" {
    print("voicepipe-fuzz: this build has no libFuzzer; bench/libfuzz builds one (-sanitize=fuzzer,address -D VOICEPIPE_LIBFUZZER)")
    exit(2)
}

// `seeds DIR`: each target's built-in seeds as files, DIR/TARGET/seed-NNN (the corpus kept in the
// repository; targets whose seeds are read from that corpus are left as they are).
if args.first == "seeds", args.count == 2 {
    for t in targets where t.name != "ffmpeg" {
        let dir = args[1] + "/" + t.name
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        for (i, seed) in t.seeds().enumerated() {
            _ = FileManager.default.createFile(atPath: dir + String(format: "/seed-%03d", i), contents: Data(seed))
        }
    }
    exit(0)
}

let seconds = option("--seconds", &args).flatMap(Double.init) ?? 10
let seed = option("--seed", &args).flatMap(UInt64.init) ?? UInt64(UInt32(truncatingIfNeeded: time(nil)))
let crashDir = option("--crash-dir", &args) ?? FileManager.default.currentDirectoryPath
let hangLimit = option("--hang-limit", &args).flatMap(Double.init) ?? 5
try? FileManager.default.createDirectory(atPath: crashDir, withIntermediateDirectories: true)
installCrashHandlers()
startHangWatchdog(limit: hangLimit)

guard let which = args.first else {
    print("usage: voicepipe-fuzz all|\(targets.map(\.name).joined(separator: "|")) [--seconds N] [--seed S] [--crash-dir DIR] [--hang-limit S]")
    print("       voicepipe-fuzz replay TARGET FILE")
    exit(2)
}
if which == "replay" {
    guard args.count == 3, let t = targets.first(where: { $0.name == args[1] }), let data = FileManager.default.contents(atPath: args[2]) else {
        print("usage: voicepipe-fuzz replay TARGET FILE"); exit(2)
    }
    t.run(Array(data))
    print("voicepipe-fuzz: replay of \(args[2]) on \(t.name) ended normally")
    exit(0)
}
let chosen = which == "all" ? targets : targets.filter { $0.name == which }
guard !chosen.isEmpty else { print("voicepipe-fuzz: unknown target '\(which)'"); exit(2) }
for t in chosen { _ = runTarget(t, seconds: seconds, seed: seed, crashDir: crashDir) }
try? FileManager.default.removeItem(atPath: scratch)
