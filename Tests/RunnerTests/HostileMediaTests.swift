import Foundation
import Testing

/// Compressed files made hostile on purpose (generated here with sox and byte edits): rates too low to
/// make a frame, a FLAC whose frames change format, MP3s damaged in one header byte, a file too short
/// to hold anything. Each ends with a clear word, never a hang, a memory bomb or a silent loss.
@Suite("hostile compressed files", .serialized, .timeLimit(.minutes(5)))
struct HostileMediaTests {
    static func sox(_ args: [String]) throws {
        let r = try Running("/usr/bin/sox", args).wait(timeout: 60)
        guard r.status == 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "sox \(args): \(r.stderr)"]) }
    }

    /// Runs file-source on `input` into a WAV file (and its events into a JSON-lines file).
    static func decode(_ input: String, in dir: URL, timeout: Double = 30) throws -> (Finished, wav: String, events: String) {
        let wav = dir.appendingPathComponent("out.wav").path, events = dir.appendingPathComponent("events.jsonl").path
        let graph = try writeGraph("""
            version: 1
            nodes:
              src: { type: file-source, path: "\(input)" }
              out: { type: wav-sink, path: "\(wav)" }
              ev: { type: jsonl-sink, path: "\(events)" }
            links:
              - src -> out
              - src.events -> ev
            """, in: dir)
        let r = try Running(voicepipeBinary, ["run", graph]).wait(timeout: timeout)
        return (r, wav, (try? String(contentsOfFile: events, encoding: .utf8)) ?? "")
    }

    /// Seconds of audio in a 16-bit WAV file written by voicepipe (44-byte header).
    static func seconds(_ wav: String) -> Double {
        guard let d = try? Data(contentsOf: URL(fileURLWithPath: wav)), d.count >= 44 else { return 0 }
        let rate = d[24..<28].withUnsafeBytes { $0.loadUnaligned(as: UInt32.self) }
        let channels = d[22..<24].withUnsafeBytes { $0.loadUnaligned(as: UInt16.self) }
        return Double(d.count - 44) / Double(rate) / Double(channels) / 2
    }

    @Test("a file at a rate too low for one sample per frame ends at once with a clear error, never a hang",
          arguments: [("flac", 40), ("aiff", 10), ("flac", 1), ("flac", 999)])
    func lowRates(format: String, rate: Int) throws {
        let dir = tempDir()
        let file = dir.appendingPathComponent("low.\(format)").path
        try Self.sox(["-n", "-r", "\(rate)", "-b", "16", file, "synth", "\(max(3, 300 / rate))", "sine", "\(Double(rate) / 8)"])
        let (r, _, _) = try Self.decode(file, in: dir, timeout: 20)
        #expect(r.seconds < 15, "\(format) at \(rate) Hz: \(r.seconds) s")
        #expect(r.status == 1, "\(format) at \(rate) Hz: status \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("\(rate) Hz") && r.stderr.contains("1000"), "\(r.stderr)")
    }

    /// The frames of a FLAC file (everything after its metadata blocks).
    static func flacFrames(_ path: String) throws -> (header: Data, frames: Data) {
        let d = try Data(contentsOf: URL(fileURLWithPath: path))
        #expect(d.prefix(4) == Data("fLaC".utf8))
        var i = 4
        while true {
            let h = d[i], n = Int(d[i + 1]) << 16 | Int(d[i + 2]) << 8 | Int(d[i + 3])
            i += 4 + n
            if h & 0x80 != 0 { break }
        }
        return (d.prefix(i), d.suffix(from: i))
    }

    /// A FLAC stream whose first frames are those of `first` and whose later frames are those of `second`.
    static func splice(_ first: [String], _ second: [String], into path: String) throws {
        let dir = (path as NSString).deletingLastPathComponent
        let a = dir + "/a.flac", b = dir + "/b.flac"
        // sox -n [format] OUT synth ...: the output file goes before the effect.
        func made(_ args: [String], _ out: String) throws {
            if args.first == "raw" {
                // Raw samples encoded at the given rate: sox's synth is slow at rates of a few hertz.
                let raw = dir + "/in.raw"
                let samples = (0..<10_000).map { Int16(8000 * sin(Double($0) * 0.3)) }
                try samples.withUnsafeBytes { Data($0) }.write(to: URL(fileURLWithPath: raw))
                try sox(["-t", "raw", "-r", args[1], "-b", "16", "-e", "signed", "-c", "1", raw, out])
                return
            }
            let e = args.firstIndex(of: "synth") ?? args.count
            try sox(Array(args[..<e]) + [out] + Array(args[e...]))
        }
        try made(first, a)
        try made(second, b)
        let (header, framesA) = try flacFrames(a)
        let (_, framesB) = try flacFrames(b)
        try (header + framesA + framesB).write(to: URL(fileURLWithPath: path))
    }

    @Test("a FLAC whose frames drop from 384 kHz to 1 Hz is refused at once, naming the change, not decoded into gigabytes",
          arguments: [(384_000, 1), (8000, 1), (96000, 3)])
    func formatBomb(from: Int, to: Int) throws {
        let dir = tempDir()
        let file = dir.appendingPathComponent("bomb.flac").path
        try Self.splice(["-n", "-r", "\(from)", "-b", "16", "synth", "0.05", "sine", "440"],
                        ["raw", "\(to)"], into: file)
        let began = Date()
        let (r, _, _) = try Self.decode(file, in: dir, timeout: 60)
        #expect(Date().timeIntervalSince(began) < 20, "\(Date().timeIntervalSince(began)) s")
        #expect(r.status == 1, "status \(r.status) \(r.stderr)")
        #expect(r.stderr.contains("changes") && r.stderr.contains("\(from) Hz") && r.stderr.contains("to \(to) Hz"), "\(r.stderr)")
    }

    @Test("a FLAC whose frames change rate or channels within what a file may have is converted to its first format")
    func formatChangeConverted() throws {
        let dir = tempDir()
        for (second, expected) in [(["-n", "-r", "16000", "-b", "16", "synth", "1", "sine", "300"], 2.0),
                                   (["-n", "-r", "48000", "-c", "2", "-b", "16", "synth", "1.5", "sine", "300"], 2.5)] {
            let file = dir.appendingPathComponent("change.flac").path
            try Self.splice(["-n", "-r", "48000", "-b", "16", "synth", "1", "sine", "440"], second, into: file)
            let (r, wav, _) = try Self.decode(file, in: dir)
            #expect(r.status == 0, "\(r.stderr)")
            let got = Self.seconds(wav)
            #expect(abs(got - expected) < 0.1, "\(second): \(got) s of audio, expected \(expected)")
        }
    }

    /// Offsets of the MPEG audio layer III frames in `d` (MPEG-1, MPEG-2 and 2.5), after any ID3v2 tag.
    static func mp3Frames(_ d: Data) -> [Int] {
        let b = [UInt8](d)
        var i = 0
        if b.count > 10, b[0] == 0x49, b[1] == 0x44, b[2] == 0x33 {
            i = 10 + (Int(b[6]) << 21 | Int(b[7]) << 14 | Int(b[8]) << 7 | Int(b[9]))
        }
        let v1 = [0, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256, 320]
        let v2 = [0, 8, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 144, 160]
        var out: [Int] = []
        while i + 4 <= b.count {
            let version = (b[i + 1] >> 3) & 3, layer = (b[i + 1] >> 1) & 3
            let bri = Int(b[i + 2] >> 4), sri = Int((b[i + 2] >> 2) & 3), pad = Int((b[i + 2] >> 1) & 1)
            if b[i] == 0xFF, b[i + 1] & 0xE0 == 0xE0, layer == 1, version != 1, bri > 0, bri < 15, sri < 3 {
                let rate = [44100, 48000, 32000][sri] >> (version == 3 ? 0 : version == 2 ? 1 : 2)
                let size = version == 3 ? 144 * v1[bri] * 1000 / rate + pad : 72 * v2[bri] * 1000 / rate + pad
                out.append(i)
                i += size
                continue
            }
            i += 1
        }
        return out
    }

    /// Damage in one header byte: the layer bits (a frame the demuxer skips: a silent loss before) and the
    /// bitrate index (a frame the decoder refuses: the file stopped there before). Held out: damage in
    /// two places, and an MPEG-1 file at 44.1 kHz.
    @Test("an MP3 damaged in a frame header decodes to the end, saying how many frames were damaged and where",
          arguments: [("layer", [100], 16000), ("bitrate", [100], 16000), ("bitrate", [60, 250], 16000), ("layer", [200], 44100)])
    func damagedMP3(kind: String, frames damaged: [Int], rate: Int) throws {
        let dir = tempDir()
        let wav = dir.appendingPathComponent("speech.wav").path, mp3 = dir.appendingPathComponent("memo.mp3").path
        try Self.sox([packageRoot.appendingPathComponent("samples/sentences.wav").path, "-r", "\(rate)", wav])
        try Self.sox([wav, "-C", "64", mp3])
        var data = try Data(contentsOf: URL(fileURLWithPath: mp3))
        let frames = Self.mp3Frames(data)
        #expect(frames.count > 300)
        let frameSeconds = Double(rate >= 32000 ? 1152 : 576) / Double(rate)
        let clean = try Self.decode(mp3, in: dir)
        let full = Self.seconds(clean.wav)
        for k in damaged {
            let at = data.startIndex + frames[k]
            if kind == "layer" { data[at + 1] = (data[at + 1] & ~0x06) | 0x06 }   // layer I: not this stream's
            else { data[at + 2] |= 0xF0 }                                            // bitrate index 15: forbidden
        }
        let bad = dir.appendingPathComponent("damaged.mp3").path
        try data.write(to: URL(fileURLWithPath: bad))
        let (r, out, events) = try Self.decode(bad, in: dir)
        #expect(r.status == 0, "\(kind) \(damaged): status \(r.status) \(r.stderr)")
        let got = Self.seconds(out)
        // Decoded to the end: what is lost is the damaged frame and those the decoder needs it for (the
        // bit reservoir), a fraction of a second, not the rest of the file.
        #expect(got > full - Double(damaged.count) * 0.5, "\(kind) \(damaged): \(got) s of \(full) s")
        #expect(r.stderr.contains("damaged audio frame"), "\(r.stderr)")
        #expect(events.contains("\"damaged_audio\""), "\(events)")
        for k in damaged {
            let when = Double(k) * frameSeconds
            let said = r.stderr.components(separatedBy: " s").compactMap { Double($0.reversed().prefix { $0 == "." || $0.isNumber }.reversed().map(String.init).joined()) }
            #expect(said.contains { abs($0 - when) < 0.2 }, "frame \(k) at \(when) s: \(r.stderr)")
        }
    }

    @Test("a tiny .mp3 is called too short to hold audio, not too short for a WAV header", arguments: [5, 0, 60])
    func tinyMP3(bytes: Int) throws {
        let dir = tempDir()
        let file = dir.appendingPathComponent("memo.mp3").path
        try Data([0xFF, 0xFB, 0x90, 0x44, 0x00] + [UInt8](repeating: 0, count: max(0, bytes - 5))).prefix(bytes).write(to: URL(fileURLWithPath: file))
        let (r, _, _) = try Self.decode(file, in: dir)
        #expect(r.status == 1 || r.status == 0, "\(r.stderr)")
        #expect(!r.stderr.contains("WAV header"), "\(r.stderr)")
        #expect(r.stderr.contains("too short") || r.stderr.contains("no audio samples"), "\(r.stderr)")
    }

    /// libavformat as Debian 12 installs it: the test hides it in a mount namespace of its own.
    static let avformat = "/usr/lib/x86_64-linux-gnu/libavformat.so.59"

    /// FFmpeg is loaded when the first compressed file or AAC codec is opened, not at start. Without it,
    /// the recognizer graph (Whisper by default) fails on an MP3 while Whisper loads and warms up its
    /// model: the message names the packages, and the process exits 1 — before, exit's handlers tore
    /// ggml down under the warm-up decoding and the process died of SIGSEGV (2 runs in 5).
    @Test("without FFmpeg's libraries an MP3 is refused naming the packages to install; a run failing while Whisper warms up exits 1, never a crash",
          .enabled(if: getuid() == 0 && FileManager.default.fileExists(atPath: avformat)
                   && FileManager.default.isExecutableFile(atPath: "/usr/bin/unshare")))
    func withoutFFmpeg() throws {
        let mp3 = packageRoot.appendingPathComponent("bench/fuzz-corpus/ffmpeg/seed.mp3").path
        let graph = packageRoot.appendingPathComponent("pipelines/recognizer-file.yaml").path
        var env = ProcessInfo.processInfo.environment
        env["INPUT"] = mp3
        env["SWIFT_BACKTRACE"] = "enable=no"
        for attempt in 1...3 {
            let r = try Running("/usr/bin/unshare", ["-m", "/bin/bash", "-c",
                                                     "mount --bind /dev/null \(Self.avformat) && exec \"$0\" run \"$1\" --quiet",
                                                     voicepipeBinary, graph], environment: env).wait(timeout: 90)
            #expect(r.status == 1, "attempt \(attempt): exit \(r.status): \(r.stderr.suffix(600))")
            #expect(r.stderr.contains("FFmpeg's library libavformat.so.59 could not be loaded") && r.stderr.contains("apt-get install libavformat59"),
                    "attempt \(attempt): \(r.stderr.suffix(600))")
        }
    }
}
