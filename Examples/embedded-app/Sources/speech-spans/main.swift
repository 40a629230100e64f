import CoreNodes
import Foundation
import PipelineCore

// Prints where a recording has speech: one line per span, from the VAD's events.
//   speech-spans FILE.wav [STOP_MS]
let arguments = CommandLine.arguments.dropFirst()
guard let path = arguments.first else {
    FileHandle.standardError.write(Data("usage: speech-spans FILE [STOP_MS]\n".utf8))
    exit(2)
}
let stopMs = arguments.dropFirst().first.flatMap(Int.init) ?? 500

do {
    // JSON strings are YAML strings: the path may hold any character.
    let quoted = String(decoding: try JSONEncoder().encode(path), as: UTF8.self)
    let pipeline = try Pipeline(yaml: """
        nodes:
          file:  { type: file-source, path: \(quoted), rate: 16000, channels: 1 }
          vad:   { type: vad, stop_ms: \(stopMs) }
          sink:  { type: null-sink }
        links:
          - file -> vad -> sink
        """, registry: CoreNodeTypes.registry())
    let events = pipeline.events()
    async let run: Void = pipeline.run()
    var start: Int64?
    for await event in events {
        switch event.name {
        case .speechStart:
            start = event["media_ms"]?.intValue
        case .speechEnd:
            let end = event["media_ms"]?.intValue ?? 0
            let reason = event["reason"]?.stringValue ?? "?"
            print(String(format: "%8.2f %8.2f  ", Double(start ?? 0) / 1000, Double(end) / 1000) + reason)
            start = nil
        default:
            break
        }
    }
    try await run
} catch {
    FileHandle.standardError.write(Data("speech-spans: \(error)\n".utf8))
    exit(1)
}
