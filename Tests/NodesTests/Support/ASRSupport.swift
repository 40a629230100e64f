import Foundation
import PipelineCore
@testable import CoreNodes
@testable import Nodes

/// Speech made at test time with flite, and measures of recognition results.
enum Speech {
    /// Writes `sentences` spoken by flite's `voice` (slt, rms, ...) to a fresh 16 kHz mono WAV,
    /// with `leadS` seconds of silence before the first sentence and `gapS` after each one.
    /// Returns the path.
    static func wav(_ sentences: [String], voice: String, leadS: Double = 0.5, gapS: Double = 1.0) throws -> String {
        let out = temporaryPath("speech-\(voice).wav")
        let dir = (out as NSString).deletingLastPathComponent
        var parts: [String] = []
        for (i, sentence) in sentences.enumerated() {
            let raw = dir + "/raw\(i).wav", padded = dir + "/part\(i).wav"
            let r = try shell("flite", ["-voice", voice, "-t", sentence, "-o", raw])
            guard r.status == 0 else { throw NodeError("flite", "flite failed: \(r.error)") }
            let s = try shell("sox", [raw, "-r", "16000", "-c", "1", "-b", "16", padded, "pad", i == 0 ? String(leadS) : "0", String(gapS)])
            guard s.status == 0 else { throw NodeError("sox", "sox failed: \(s.error)") }
            parts.append(padded)
        }
        let j = try shell("sox", parts + ["-r", "16000", "-c", "1", "-b", "16", out])
        guard j.status == 0 else { throw NodeError("sox", "sox failed: \(j.error)") }
        return out
    }

    /// Lower-case words without punctuation.
    static func words(_ text: String) -> [String] {
        text.lowercased().split(whereSeparator: { !$0.isLetter && !$0.isNumber && $0 != "'" }).map(String.init)
    }

    /// Word error rate of `hypothesis` against `reference`: (substitutions + deletions + insertions)
    /// / reference words, by edit distance over words.
    static func wordErrorRate(reference: String, hypothesis: String) -> Double {
        let r = words(reference), h = words(hypothesis)
        guard !r.isEmpty else { return h.isEmpty ? 0 : 1 }
        var previous = Array(0...h.count)
        for i in 1...r.count {
            var row = [i] + Array(repeating: 0, count: h.count)
            for j in stride(from: 1, through: h.count, by: 1) {
                row[j] = min(previous[j] + 1, row[j - 1] + 1, previous[j - 1] + (r[i - 1] == h[j - 1] ? 0 : 1))
            }
            previous = row
        }
        return Double(previous[h.count]) / Double(r.count)
    }
}

extension Array where Element == Event {
    /// Events named `name`.
    func named(_ name: String) -> [Event] { filter { $0.name == name } }

    /// Final transcripts' texts, in order.
    var finalTexts: [String] {
        named("transcript").filter { $0["final"]?.boolValue == true }.compactMap { $0["text"]?.stringValue }
    }
}

/// Reads a jsonl-sink file into one dictionary per line.
func readJSONLines(_ path: String) throws -> [[String: Any]] {
    let text = try String(contentsOfFile: path, encoding: .utf8)
    return try text.split(separator: "\n").map {
        try JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] ?? [:]
    }
}

extension EventValue {
    /// The elements, if this is an array.
    var arrayValue: [EventValue]? { if case .array(let a) = self { a } else { nil } }
    /// The fields, if this is an object.
    var objectValue: [String: EventValue]? { if case .object(let o) = self { o } else { nil } }
}
