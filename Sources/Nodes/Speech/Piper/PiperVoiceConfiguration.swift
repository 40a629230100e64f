import Foundation
import PipelineCore

/// A Piper voice's configuration, the `.onnx.json` file beside its model: what the voice was trained
/// on and how to feed it.
///
/// - `audio.sample_rate`: the rate of the audio the model makes.
/// - `espeak.voice`: the eSpeak NG voice whose IPA phonemes the model reads (`phoneme_type: espeak`).
/// - `phoneme_id_map`: each phoneme (one Unicode scalar) to its ids; `^` starts a sentence, `$` ends
///   it, `_` pads between phonemes.
/// - `inference`: the default `noise_scale`, `length_scale` and `noise_w`.
/// - `num_speakers`, `speaker_id_map`: a multi-speaker voice takes a speaker id (`sid`).
struct PiperVoiceConfiguration: Sendable {
    let sampleRate: Int
    let espeakVoice: String
    let noiseScale: Double
    let lengthScale: Double
    let noiseW: Double
    let speakers: Int
    let speakerIDs: [String: Int]
    /// Phoneme (a Unicode scalar's value) to ids.
    let phonemeIDs: [UInt32: [Int64]]
    let pad: [Int64]
    let start: [Int64]
    let end: [Int64]
    /// The language's code (`en_US`), when the file names it.
    let language: String?

    /// The configuration in `data` (the file `path`, named in errors).
    init(data: Data, path: String) throws {
        let file: File
        do {
            file = try JSONDecoder().decode(File.self, from: data)
        } catch {
            throw NodeError(.voiceUnavailable, "Piper voice configuration \(path) is not a Piper .onnx.json: \(Self.describe(error))")
        }
        if let type = file.phoneme_type, type != "espeak" {
            throw NodeError(.voiceUnavailable, "Piper voice configuration \(path): phoneme_type '\(type)' is not supported (only espeak)")
        }
        guard let rate = file.audio.sample_rate, (4000...192_000).contains(rate) else {
            throw NodeError(.voiceUnavailable, "Piper voice configuration \(path) has no usable audio.sample_rate")
        }
        var ids: [UInt32: [Int64]] = [:]
        for (key, value) in file.phoneme_id_map {
            let scalars = Array(key.unicodeScalars)
            guard scalars.count == 1, !value.isEmpty else { continue }
            ids[scalars[0].value] = value
        }
        func symbol(_ s: Character) throws -> [Int64] {
            guard let v = ids[s.unicodeScalars.first!.value] else {
                throw NodeError(.voiceUnavailable, "Piper voice configuration \(path): phoneme_id_map has no '\(s)'")
            }
            return v
        }
        sampleRate = rate
        espeakVoice = file.espeak?.voice ?? "en-us"
        noiseScale = file.inference?.noise_scale ?? 0.667
        lengthScale = file.inference?.length_scale ?? 1
        noiseW = file.inference?.noise_w ?? 0.8
        speakers = max(1, file.num_speakers ?? 1)
        speakerIDs = file.speaker_id_map ?? [:]
        phonemeIDs = ids
        pad = try symbol("_")
        start = try symbol("^")
        end = try symbol("$")
        language = file.language?.code
    }

    /// Reads `path`.
    init(path: String) throws {
        guard let data = FileManager.default.contents(atPath: path) else {
            throw NodeError(.voiceUnavailable, "Piper voice configuration \(path) not found or not readable")
        }
        try self.init(data: data, path: path)
    }

    /// The model's input for `phonemes`: `^`, then each phoneme's ids followed by `_`, then `$`.
    /// Phonemes the voice has no id for are left out and returned.
    func ids(for phonemes: String) -> (ids: [Int64], unknown: [Unicode.Scalar]) {
        var out = start + pad
        var unknown: [Unicode.Scalar] = []
        out.reserveCapacity(phonemes.unicodeScalars.count * 2 + 4)
        for scalar in phonemes.decomposedStringWithCanonicalMapping.unicodeScalars {
            guard let ids = phonemeIDs[scalar.value] else {
                unknown.append(scalar)
                continue
            }
            out += ids
            out += pad
        }
        return (out + end, unknown)
    }

    /// The speaker id `speaker` names (a name of `speaker_id_map` or a number below `num_speakers`);
    /// `nil` (no speaker given) is speaker 0 on a multi-speaker voice.
    func speakerID(_ speaker: String?) throws -> Int64? {
        guard speakers > 1 else {
            if let speaker, !speaker.isEmpty, speaker != "0" {
                throw NodeError(.voiceUnavailable, "this Piper voice has one speaker; speaker '\(speaker)' does not apply")
            }
            return nil
        }
        guard let speaker, !speaker.isEmpty else { return 0 }
        if let id = speakerIDs[speaker] { return Int64(id) }
        if let n = Int(speaker), (0..<speakers).contains(n) { return Int64(n) }
        let names = speakerIDs.sorted { $0.value < $1.value }.prefix(20).map(\.key).joined(separator: ", ")
        throw NodeError(.voiceUnavailable, "this Piper voice has no speaker '\(speaker)'; it has \(speakers) (0...\(speakers - 1)\(names.isEmpty ? "" : ": " + names))")
    }

    private static func describe(_ error: any Error) -> String {
        switch error {
        case DecodingError.keyNotFound(let key, let c): "no '\((c.codingPath + [key]).map(\.stringValue).joined(separator: "."))'"
        case DecodingError.typeMismatch(_, let c), DecodingError.valueNotFound(_, let c):
            "'\(c.codingPath.map(\.stringValue).joined(separator: "."))': \(c.debugDescription)"
        case DecodingError.dataCorrupted(let c): c.debugDescription
        default: "\(error)"
        }
    }

    /// The file's layout (the keys voicepipe reads).
    private struct File: Decodable {
        struct Audio: Decodable { var sample_rate: Int? }
        struct Espeak: Decodable { var voice: String? }
        struct Inference: Decodable { var noise_scale: Double?; var length_scale: Double?; var noise_w: Double? }
        struct Language: Decodable { var code: String? }
        var audio: Audio
        var espeak: Espeak?
        var inference: Inference?
        var phoneme_type: String?
        var phoneme_id_map: [String: [Int64]]
        var num_speakers: Int?
        var speaker_id_map: [String: Int]?
        var language: Language?
    }
}
