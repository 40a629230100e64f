import Foundation
import PipelineCore

/// `asr`: speech recognition. Reads audio (plain, VAD-marked or sliced), hands utterances to an
/// ``ASREngine`` and reports what it recognizes as events (`utterance_start`, `transcript`,
/// `utterance_end`, `finished`, `error`) and final transcripts as text frames on `text`.
public actor ASRNode: Node {
    private(set) var engineName: String
    let engine: any ASREngine
    let format: AudioFormat
    let silenceMs: Int64
    private var finals: [String] = []

    init(configuration c: Configuration, environment: NodeEnvironment) throws {
        engineName = c.engine
        guard let descriptor = c.engineDescriptor else {
            throw NodeError(.unknownEngine, "asr: unknown engine '\(engineName)'; expected one of \(ASREngines.all.map(\.name).joined(separator: ", "))")
        }
        if let why = c.unavailable(environment.variables), let fallback = c.fallback, fallback != c.engine, let other = ASREngines.descriptor(fallback), let fc = c.fallbackConfiguration {
            environment.logger.warning("asr: engine \(c.engine) is not available here (\(why)); using \(fallback) instead")
            engineName = fallback
            engine = try other.make(fc, c, environment)
            format = fc.inputFormat
            silenceMs = Int64(c.endpointSilenceMs)
            return
        }
        do {
            engine = try descriptor.make(c.engineConfiguration, c, environment)
        } catch let error as NodeError {
            guard let fallback = c.fallback, fallback != c.engine, let other = ASREngines.descriptor(fallback), let fc = c.fallbackConfiguration else { throw error }
            environment.logger.warning("asr: engine \(c.engine) cannot start here (\(error.message)); using \(fallback) instead")
            engineName = fallback
            engine = try other.make(fc, c, environment)
            format = fc.inputFormat
            silenceMs = Int64(c.endpointSilenceMs)
            return
        }
        format = c.inputFormat
        silenceMs = Int64(c.endpointSilenceMs)
    }

    public func run(_ context: NodeContext) async throws {
        let feed = ASRFeed(port: context.input(), format: format,
                           segmenter: ASRSegmenter(endpointing: !engine.segmentsUnmarkedAudio, silenceMs: silenceMs),
                           context: context)
        let inputs = ASRInputs { await feed.next() }
        let results = ASRResults { [self] result in try await self.handle(result, feed: feed, context: context) }
        try await engine.run(inputs: inputs, results: results, context: context)
        try await context.emit(.finished, [("text", .string(Self.join(finals)))])
    }

    private func handle(_ result: ASRResult, feed: ASRFeed, context: NodeContext) async throws {
        switch result {
        case .utteranceStart(let voiceID, let seq):
            try await context.emit(.utteranceStart, [("voice_id", .string(voiceID)), ("seq", .int(Int64(seq)))])
        case .partial(let t):
            try await context.emit(.transcript, Self.fields(t, final: false))
        case .final(let t):
            let text = t.text.trimmingCharacters(in: .whitespacesAndNewlines)
            if !text.isEmpty { finals.append(text) }
            try await context.emit(.transcript, Self.fields(t, final: true))
            if !text.isEmpty {
                try await context.output("text").send(.text(text, pts: t.startMs * 1_000_000))
            }
        case .utteranceEnd(let voiceID, let seq):
            // An utterance the engine ended by itself (its own endpointing) ended on silence.
            let reason = await feed.takeReason(voiceID) ?? .silence
            try await context.emit(.utteranceEnd, [("voice_id", .string(voiceID)), ("seq", .int(Int64(seq)))] + reason.fields)
        case .error(let code, let message, let voiceID):
            try await context.emit(Event.error(code: code, message: message, voiceID: voiceID))
        }
    }

    private static func fields(_ t: ASRTranscript, final: Bool) -> [(String, EventValue)] {
        var fields: [(String, EventValue)] = [("voice_id", .string(t.voiceID)), ("seq", .int(Int64(t.seq))), ("text", .string(t.text)),
                                              ("final", .bool(final)), ("start_ms", .int(t.startMs)), ("end_ms", .int(t.endMs))]
        if let language = t.language {
            fields.append(("language", .string(language)))
        }
        if final, let decodeMs = t.decodeMs { fields.append(("decode_ms", .int(decodeMs))) }
        if final, let queuedMs = t.queuedMs { fields.append(("queued_ms", .int(queuedMs))) }
        if !t.words.isEmpty {
            fields.append(("words", .array(t.words.map { w in
                .object(["word": .string(w.word), "start_ms": .int(w.startMs), "end_ms": .int(w.endMs), "stable": .bool(w.stable)])
            })))
        }
        if !t.alternatives.isEmpty {
            fields.append(("alternatives", .array(t.alternatives.map { a in
                .object(["text": .string(a.text), "confidence": .double(a.confidence)])
            })))
        }
        return fields
    }

    /// Joins final texts: with a space between words of alphabetic scripts, without one next to
    /// CJK text.
    static func join(_ texts: [String]) -> String {
        var out = ""
        for t in texts {
            if let last = out.unicodeScalars.last, let first = t.unicodeScalars.first,
               last.isASCII || first.isASCII {
                out += " "
            }
            out += t
        }
        return out
    }
}

/// Reads the node's input port and produces the engine's inputs: converts audio to the engine's
/// format when it differs (validation normally catches that earlier) and finds utterances.
actor ASRFeed {
    private let port: InputPort
    private let format: AudioFormat
    private var segmenter: ASRSegmenter
    private var pending: [ASRInput] = []
    private var head = 0
    private var converter: AudioConverter?
    private var finished = false
    private let context: NodeContext

    init(port: InputPort, format: AudioFormat, segmenter: ASRSegmenter, context: NodeContext) {
        self.port = port
        self.format = format
        self.segmenter = segmenter
        self.context = context
    }

    func next() async -> ASRInput? {
        while head == pending.count {
            pending.removeAll(keepingCapacity: true)
            head = 0
            if finished { return nil }
            guard let frame = await port.next() else {
                finished = true
                pending = segmenter.finish()
                continue
            }
            guard let audio = frame.audio else { continue }
            var samples = audio.samples
            if audio.format != format {
                if converter?.input != audio.format {
                    context.logger.warning("asr: converting \(audio.format) to \(format); put a resample node before asr to choose the quality")
                    do {
                        converter = try AudioConverter(from: audio.format, to: format, quality: 5)
                    } catch {
                        converter = nil
                        context.logger.error("asr: cannot convert \(audio.format) to \(format) (\(error)); such frames are dropped and counted as unconvertible_frames")
                    }
                }
                guard let converter else { context.count("unconvertible_frames"); continue }
                samples = converter.convert(samples)
            }
            pending = segmenter.push(ASRAudio(samples: samples, format: format, pts: frame.pts, marks: frame.marks))
        }
        defer { head += 1 }
        return pending[head]
    }

    /// Why the utterance `voiceID` ended, once the segmenter has ended it.
    func takeReason(_ voiceID: String) -> EndReason? {
        segmenter.takeReason(voiceID)
    }
}
