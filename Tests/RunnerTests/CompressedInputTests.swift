import Foundation
import Testing

/// `file-source` reads the files phones and recorders make: the recognizer pipeline on them, as on a WAV.
@Suite("Compressed input files", .serialized)
struct CompressedInputTests {
    /// GStreamer encoders for each format (the files are made by an independent implementation).
    static let encoders: [String: [String]] = [
        "m4a": ["audioresample", "!", "audio/x-raw,rate=44100", "!", "avenc_aac", "bitrate=64000", "!", "mp4mux"],
        "opus": ["audioresample", "!", "audio/x-raw,rate=48000", "!", "opusenc", "!", "oggmux"],
        "ogg": ["vorbisenc", "!", "oggmux"],
        "flac": ["flacenc"],
        "mp3": ["lamemp3enc", "bitrate=64"],
    ]

    static func make(_ kind: String, in dir: URL) throws -> (wav: URL, compressed: URL) {
        let wav = dir.appendingPathComponent("speech.wav")
        try run("/usr/bin/flite", ["-voice", "slt", "-t", "please open the garage door and turn on the kitchen light", "-o", wav.path])
        let out = dir.appendingPathComponent("memo.\(kind)")
        try run("/usr/bin/gst-launch-1.0", ["-q", "filesrc", "location=\(wav.path)", "!", "wavparse", "!", "audioconvert", "!"]
            + encoders[kind]! + ["!", "filesink", "location=\(out.path)"])
        return (wav, out)
    }

    /// The words of the final transcripts `voicepipe run pipelines/recognizer-file.yaml` prints for `input`.
    static func recognize(_ input: URL) throws -> [String] {
        var env = ProcessInfo.processInfo.environment
        env["INPUT"] = input.path
        let r = try voicepipe(["run", packageRoot.appendingPathComponent("pipelines/recognizer-file.yaml").path], environment: env)
        #expect(r.status == 0, "\(r.stderr)")
        let finals = r.stdout.split(separator: "\n").filter { $0.contains("\"transcript\"") && $0.contains("\"final\":true") }
        return finals.compactMap { line -> String? in
            guard let json = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any] else { return nil }
            return json["text"] as? String
        }.joined(separator: " ").split(separator: " ").map(String.init)
    }

    static func run(_ tool: String, _ args: [String]) throws {
        let p = Process()
        p.executableURL = URL(fileURLWithPath: tool)
        p.arguments = args
        p.standardOutput = FileHandle.nullDevice
        p.standardError = FileHandle.nullDevice
        try p.run()
        p.waitUntilExit()
        guard p.terminationStatus == 0 else { throw CocoaError(.fileWriteUnknown, userInfo: [NSLocalizedDescriptionKey: "\(tool) failed"]) }
    }

    @Test("INPUT=memo.<format> voicepipe run pipelines/recognizer-file.yaml recognizes it",
          .enabled(if: FileManager.default.isExecutableFile(atPath: "/usr/bin/gst-launch-1.0")),
          arguments: ["m4a", "opus", "ogg", "flac", "mp3"])
    func recognizes(kind: String) throws {
        let dir = tempDir()
        let (wav, compressed) = try Self.make(kind, in: dir)
        // flite speaks the sentence the same every time: the WAV is recognized once for all formats.
        let reference = try Self.reference.value ?? { let words = try Self.recognize(wav); Self.reference.value = words; return words }()
        let heard = try Self.recognize(compressed)
        #expect(reference.count >= 8, "the WAV itself: \(reference)")
        // The same words as from the WAV, but for at most two (a lossy codec may tip a close call:
        // "and"/"in", "like"/"light" at 64 kb/s).
        let distance = Self.editDistance(heard, reference)
        #expect(distance <= (kind == "flac" ? 0 : 2), "\(kind): \(heard) vs WAV \(reference)")
        #expect(heard.contains("garage") && heard.contains("kitchen"), "\(kind): \(heard)")
    }

    /// The words recognized from the WAV, shared by the formats (the suite runs them one at a time).
    static let reference = Box<[String]>()
    final class Box<T>: @unchecked Sendable { var value: T? }

    static func editDistance(_ a: [String], _ b: [String]) -> Int {
        var previous = Array(0...b.count)
        for i in 1...max(1, a.count) where !a.isEmpty {
            var row = [i] + Array(repeating: 0, count: b.count)
            for j in stride(from: 1, through: b.count, by: 1) {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1))
            }
            previous = row
        }
        return a.isEmpty ? b.count : previous[b.count]
    }

    @Test("a file that is neither WAV nor decodable audio: exit 1 naming it")
    func undecodable() throws {
        let dir = tempDir()
        let junk = dir.appendingPathComponent("memo.m4a")
        try Data((0..<4000).map { UInt8(truncatingIfNeeded: $0 &* 37) }).write(to: junk)
        let graph = dir.appendingPathComponent("g.yaml")
        try """
            version: 1
            nodes:
              src: { type: file-source, path: "\(junk.path)" }
              out: { type: wav-sink, path: "\(dir.appendingPathComponent("o.wav").path)" }
            links: [ "src -> out" ]
            """.write(to: graph, atomically: true, encoding: .utf8)
        let r = try voicepipe(["run", graph.path])
        #expect(r.status == 1, "\(r.stderr)")
        #expect(r.stderr.contains(junk.path) && r.stderr.contains("not audio FFmpeg can decode"), "\(r.stderr)")
    }
}
