import Foundation
import CEchoCancel
import PipelineCore

/// `aec`: acoustic echo cancellation. The microphone comes in on `in`, what is being played on the
/// loudspeaker on `ref`; `out` is the microphone with the echo of `ref` removed, frame for frame (same
/// sizes, timestamps and marks as `in`, at most 10 ms later).
///
/// Engines (`engine`): `webrtc` — the AEC of webrtc-audio-processing, the engine PulseAudio's
/// `module-echo-cancel` uses by default, here with low residual suppression (moderate, PulseAudio's
/// setting, cancels no more echo on the benchmark but cuts into the near talker during double talk);
/// `speex` — speexdsp's MDF adaptive filter with its residual-echo suppressor: leaves the near talker
/// almost untouched but needs some seconds of far-end speech to converge. Both get the echo path's delay
/// from an estimator of the canceller (mic against reference every 250 ms, up to 500 ms), so it need not
/// be known; `delay_ms` is where it starts. bench/aec-bench.py compares them with the PulseAudio module on
/// the same signals (bench/results/aec.md).
///
/// How `ref` lines up with `in` (`reference`):
/// - `arrival` (live graphs): the reference is what is being played now. Each 10 ms of microphone
///   takes the oldest 10 ms of reference that arrived (silence when none did — nothing is playing);
///   more than `max_ref_ms` waiting is dropped from the front and counted (`ref_dropped_ms`).
/// - `pts` (files, tests): both streams are placed by their timestamps; the microphone waits for the
///   reference covering it (or its end).
///
/// `ref` is a feedback input: `speaker.out -> aec.ref` may close a loop through the graph (mic → aec →
/// … → tts → speaker), and the node ends with its microphone, without waiting for the reference to end.
///
/// `ref` is a feedback input: `speaker.out -> aec.ref` may close a loop through the graph (mic → aec →
/// … → tts → speaker); then the node ends with its microphone, without waiting for the reference to
/// end. An independent reference (a peer's audio in the intercom) is read to its end, as before.
///
/// The reference is converted to the microphone's format when they differ. `aec_stats` events report
/// the measured echo reduction (`erle_db`, over blocks with reference), the engine's delay estimate and
/// the reference level every `stats_interval_ms`.
public actor AECNode: Node {
    let configuration: Configuration

    private var handle: EchoCancellerHandle?
    private var canceller: OpaquePointer? { handle?.pointer }
    private var micFormat: AudioFormat?
    private var refConverter: AudioConverter?
    private var refFormat: AudioFormat?
    // Reference samples (mic format). In pts mode `refStart` is the mic-timeline sample index of refBuffer[0].
    private var refBuffer = SampleQueue()
    private var refStart: Int64 = 0
    private var refEnded = false
    private var refWaiter: CheckedContinuation<Void, Never>?
    private var refDroppedFrames = 0

    // Microphone side: samples waiting for a whole 10 ms block, and the frames to rebuild at the output.
    private var micPending = SampleQueue()
    private var micPosition: Int64?           // mic-timeline sample index of micPending[0]
    private var processed = SampleQueue()
    private var shapes: [(pts: Int64, marks: FrameMarks, samples: Int)] = []
    private var lastStats: Int64 = 0

    init(configuration: Configuration) { self.configuration = configuration }

    public func run(_ context: NodeContext) async throws {
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask {
                for await frame in context.input("ref") { try await self.addReference(frame) }
                await self.endReference()
            }
            for await frame in context.input("in") { try await self.processMic(frame, context: context) }
            try await self.finishMic(context: context)
            // A reference fed back from the loudspeaker this output drives (a loop) ends only after
            // this node does: it is not waited for. An independent reference (a peer's audio) is.
            if context.input("ref").closesLoop { group.cancelAll() }
            try await group.waitForAll()
        }
        try await report(context, force: true)
    }

    // MARK: reference

    private func addReference(_ frame: Frame) throws {
        guard let audio = frame.audio, !audio.samples.isEmpty else { return }
        guard let mic = micFormat else {
            // The microphone's format is not known yet: keep the reference as it is; converted once it is.
            try holdUntilFormat(frame)
            return
        }
        var samples = audio.samples
        if audio.format != mic {
            if refFormat != audio.format {
                refFormat = audio.format
                refConverter = try AudioConverter(from: audio.format, to: mic)
            }
            samples = refConverter!.convert(samples)
        }
        switch configuration.reference {
        case .arrival:
            refBuffer.append(contentsOf: samples)
            let limit = mic.frames(ms: configuration.maxRefMs) * mic.channels
            if refBuffer.count > limit {
                let drop = (refBuffer.count - limit) / mic.channels * mic.channels
                refBuffer.removeFirst(drop)
                refDroppedFrames += drop / mic.channels
            }
        case .pts:
            let position = frame.pts * Int64(mic.sampleRate) / 1_000_000_000
            if refBuffer.isEmpty { refStart = position }
            let end = refStart + Int64(refBuffer.count / mic.channels)
            if position > end {
                // A gap in the reference: silence was played.
                refBuffer.append(contentsOf: repeatElement(0, count: Int(position - end) * mic.channels))
            }
            refBuffer.append(contentsOf: samples)
        }
        wakeMic()
    }

    private var early: [Frame] = []

    private func holdUntilFormat(_ frame: Frame) throws {
        early.append(frame)
        if early.count > 500 { early.removeFirst() }
    }

    private func endReference() {
        refEnded = true
        wakeMic()
    }

    private func wakeMic() {
        if let w = refWaiter {
            refWaiter = nil
            w.resume()
        }
    }

    /// pts mode: waits until the reference reaches `position` (mic-timeline samples) or ends.
    private func waitForReference(until position: Int64) async {
        while !refEnded && refStart + Int64(refBuffer.count / max(micFormat?.channels ?? 1, 1)) < position {
            await withCheckedContinuation { refWaiter = $0 }
        }
    }

    /// The reference block for mic samples [position, position + frames).
    private func referenceBlock(position: Int64, frames: Int, channels: Int) -> [Int16] {
        switch configuration.reference {
        case .arrival:
            let n = frames * channels
            if refBuffer.count >= n {
                let block = refBuffer.prefix(n)
                refBuffer.removeFirst(n)
                return block
            }
            return [Int16](repeating: 0, count: n)
        case .pts:
            var block = [Int16](repeating: 0, count: frames * channels)
            let offset = Int(position - refStart)
            for i in 0..<frames where offset + i >= 0 && (offset + i) * channels < refBuffer.count {
                for c in 0..<channels { block[i * channels + c] = refBuffer[(offset + i) * channels + c] }
            }
            // Forget what is behind the microphone.
            let behind = min(max(0, offset + frames), refBuffer.count / channels)
            if behind > 0 {
                refBuffer.removeFirst(behind * channels)
                refStart += Int64(behind)
            }
            return block
        }
    }

    // MARK: microphone

    private func processMic(_ frame: Frame, context: NodeContext) async throws {
        guard let audio = frame.audio else { return try await context.send(frame) }
        if micFormat != audio.format {
            if micFormat != nil { try await flushMic(context: context) }
            try open(audio.format)
            let held = early
            early = []
            for f in held { try addReference(f) }
        }
        let format = audio.format
        if micPosition == nil { micPosition = frame.pts * Int64(format.sampleRate) / 1_000_000_000 }
        shapes.append((frame.pts, frame.marks, audio.samples.count))
        micPending.append(contentsOf: audio.samples)
        try await runBlocks(context: context, final: false)
        try await report(context, force: false)
    }

    private func finishMic(context: NodeContext) async throws {
        try await flushMic(context: context)
    }

    private func flushMic(context: NodeContext) async throws {
        try await runBlocks(context: context, final: true)
    }

    private func open(_ format: AudioFormat) throws {
        guard [16000, 32000, 48000].contains(format.sampleRate), (1...2).contains(format.channels),
              format.channels == 1 || configuration.engine == .webrtc else {
            throw NodeError(.unsupportedFormat, "aec takes 16000, 32000 or 48000 Hz mono audio (stereo with engine: webrtc), got \(format); "
                            + "put a `resample` node (e.g. { type: resample, rate: 16000, channels: 1 }) before it")
        }
        handle = nil
        var message = [CChar](repeating: 0, count: 256)
        guard let c = vp_aec_create(Int32(format.sampleRate), Int32(format.channels), configuration.engine == .webrtc ? Int32(VP_AEC_WEBRTC) : Int32(VP_AEC_SPEEX),
                                    Int32(configuration.filterMs), &message, message.count) else {
            throw NodeError(.aecFailed, "cannot create the \(configuration.engine.rawValue) echo canceller: \(String(decoding: message.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))")
        }
        vp_aec_set_delay_ms(c, Int32(configuration.delayMs))
        if configuration.noiseSuppression > 0 { _ = vp_aec_set_noise_suppression(c, Int32(configuration.noiseSuppression)) }
        if let level = configuration.suppression, vp_aec_set_suppression(c, Int32(level)) < 0 {
            throw NodeError(.aecFailed, "suppression \(level) is out of range for engine \(configuration.engine.rawValue) (webrtc: 0...2, speex: 0...3)")
        }
        handle = EchoCancellerHandle(c)
        micFormat = format
        refBuffer = SampleQueue()
        refConverter = nil
        refFormat = nil
    }

    /// Cancels every whole 10 ms block held (with `final`, the remainder too, padded), then sends the
    /// output frames whose samples are all processed.
    private func runBlocks(context: NodeContext, final: Bool) async throws {
        guard let canceller, let format = micFormat else { return }
        let frames = Int(vp_aec_frame_size(canceller))
        let block = frames * format.channels
        var out = [Int16](repeating: 0, count: block)
        while micPending.count >= block || (final && !micPending.isEmpty) {
            var near = micPending.prefix(block)
            let real = near.count
            if real < block { near.append(contentsOf: repeatElement(0, count: block - real)) }
            let position = micPosition ?? 0
            if configuration.reference == .pts { await waitForReference(until: position + Int64(frames)) }
            let far = referenceBlock(position: position, frames: frames, channels: format.channels)
            let rc = near.withUnsafeBufferPointer { n in
                far.withUnsafeBufferPointer { f in
                    out.withUnsafeMutableBufferPointer { o in vp_aec_process(canceller, n.baseAddress, f.baseAddress, o.baseAddress, Int32(frames)) }
                }
            }
            if rc < 0 { context.count("aec_errors") }
            if configuration.echoGateDb > 0 { gate(&out, far: far) }
            processed.append(contentsOf: out.prefix(real))
            micPending.removeFirst(real)
            micPosition = position + Int64(real / format.channels)
        }
        while let first = shapes.first, processed.count >= first.samples {
            shapes.removeFirst()
            let samples = processed.prefix(first.samples)
            processed.removeFirst(first.samples)
            try await context.send(Frame(payload: .audio(AudioBuffer(format: format, samples: samples)), pts: first.pts, marks: first.marks))
        }
    }

    // MARK: echo gate

    /// Levels (dBFS) of the last reference blocks: the loudspeaker's recent loudness, over as long as
    /// an echo can lag behind it.
    private var farLevels: [Double] = []
    private var farHead = 0
    private(set) var gatedBlocks = 0

    /// Level of a block in dBFS (-120 for silence).
    static func level(_ samples: [Int16]) -> Double {
        guard !samples.isEmpty else { return -120 }
        var sum = 0.0
        for x in samples { let v = Double(x); sum += v * v }
        let ms = sum / Double(samples.count) / (32768.0 * 32768.0)
        return ms > 1e-12 ? 10 * log10(ms) : -120
    }

    /// `echo_gate_db`: a block whose output stays more than that below the loudest reference of the
    /// last 600 ms is taken for the residual echo the filter left (a person speaking is at least as loud
    /// as the echo, and passes) and silenced, so a VAD downstream does not hear the loudspeaker.
    private func gate(_ out: inout [Int16], far: [Int16]) {
        let window = 60
        if farLevels.count < window { farLevels.append(Self.level(far)) } else {
            farLevels[farHead] = Self.level(far)
            farHead = (farHead + 1) % window
        }
        let loudest = farLevels.max() ?? -120
        guard loudest > -50 else { return }
        if Self.level(out) < loudest - Double(configuration.echoGateDb) {
            for i in out.indices { out[i] = 0 }
            gatedBlocks += 1
        }
    }

    private func report(_ context: NodeContext, force: Bool) async throws {
        guard let canceller, configuration.statsIntervalMs > 0 || force else { return }
        var s = vp_aec_stats()
        _ = vp_aec_get_stats(canceller, &s)
        let blockMs = Int64(10)
        let now = Int64(s.frames) * blockMs
        guard force || now - lastStats >= Int64(configuration.statsIntervalMs) else { return }
        lastStats = now
        if refDroppedFrames > 0, let f = micFormat {
            context.count("ref_dropped_ms", by: UInt64(refDroppedFrames * 1000 / f.sampleRate))
            refDroppedFrames = 0
        }
        var fields: [(String, EventValue)] = [("engine", .string(configuration.engine.rawValue)), ("blocks", .int(Int64(s.frames)))]
        if s.erle_db.isFinite {
            fields.append(("erle_db", .double((s.erle_db * 10).rounded() / 10)))
            context.gauge("erle_db", (s.erle_db * 10).rounded() / 10)
        }
        if s.delay_ms >= 0 { fields.append(("delay_ms", .int(Int64(s.delay_ms)))) }
        if s.far_level_dbfs.isFinite { fields.append(("ref_level_dbfs", .double((s.far_level_dbfs * 10).rounded() / 10))) }
        if configuration.echoGateDb > 0 {
            fields.append(("gated_ms", .int(Int64(gatedBlocks) * blockMs)))
            context.gauge("echo_gated_ms", Double(gatedBlocks) * Double(blockMs))
        }
        try await context.emit(.aecStats, fields)
    }

    /// Echo canceller engines.
    public enum Engine: String, Sendable, Decodable, CaseIterable {
        case webrtc, speex
    }

    /// How the reference is lined up with the microphone.
    public enum Reference: String, Sendable, Decodable, CaseIterable {
        case arrival, pts
    }

    /// Configuration of `aec`.
    public struct Configuration: NodeConfiguration {
        public var engine: Engine
        public var reference: Reference
        public var delayMs: Int
        public var echoGateDb: Int
        public var filterMs: Int
        public var maxRefMs: Int
        public var noiseSuppression: Int
        public var suppression: Int?
        public var statsIntervalMs: Int
        public static let parameters: [ParamSpec] = [
            ParamSpec("engine", .choice(Engine.allCases.map(\.rawValue)), default: "webrtc",
                      doc: "webrtc: webrtc-audio-processing's AEC (PulseAudio's module-echo-cancel engine), finds the echo delay itself; speex: speexdsp's MDF filter"),
            ParamSpec("reference", .choice(Reference.allCases.map(\.rawValue)), default: "arrival",
                      doc: "arrival: ref is what plays now (live); pts: line ref and in up by timestamps (files)"),
            ParamSpec("delay_ms", .int(0...500), default: 0, doc: "delay of the echo behind the reference to start from (the estimator refines it)"),
            ParamSpec("filter_ms", .int(0...1000), default: 0, doc: "echo tail the filter covers: speex 0 = 100 ms after the delay; webrtc ≤ 64 normal (48 ms), > 64 extended (128 ms)"),
            ParamSpec("suppression", .int(0...3), doc: "residual echo suppression: webrtc 0 low (default), 1 moderate, 2 high; speex 0 off, 1, 2 (default), 3"),
            ParamSpec("echo_gate_db", .int(0...60), default: 0,
                      doc: "silence output blocks more than this below the loudest reference of the last 600 ms (residual echo; a person speaking passes); 0 = off"),
            ParamSpec("max_ref_ms", .int(20...10_000), default: 1000, doc: "arrival: reference held at most; older is dropped (ref_dropped_ms)"),
            ParamSpec("noise_suppression", .int(0...4), default: 0, doc: "noise suppression level (0 = off)"),
            ParamSpec("stats_interval_ms", .int(0...3_600_000), default: 5000, doc: "aec_stats event period (0 = only at the end)"),
        ]
    }

    /// Registry entry.
    public static let descriptor = NodeDescriptor(
        type: "aec",
        summary: "Removes the echo of what is played (ref) from the microphone (in): webrtc-audio-processing or speexdsp",
        family: "DSP",
        inputs: [PortSpec("in", [.audio], doc: "microphone, 16/32/48 kHz"), PortSpec("ref", [.audio], feedback: true, doc: "what the loudspeaker plays (any format; converted); may be fed back from a sink's out (speaker.out -> aec.ref), closing a loop")],
        outputs: [PortSpec("out", [.audio], doc: "the microphone without the echo, same frames as in"), .events],
        configuration: Configuration.self,
        format: .passthrough,
        make: { c, _ in AECNode(configuration: c) })
}

/// Owns a `vp_aec` canceller (one node uses it; not thread-safe).
final class EchoCancellerHandle {
    let pointer: OpaquePointer
    init(_ pointer: OpaquePointer) { self.pointer = pointer }
    deinit { vp_aec_destroy(pointer) }
}

/// A FIFO of samples: appends at the back, takes from the front without moving what is left (the
/// storage is compacted once the consumed part is both large and more than half of it).
struct SampleQueue {
    private var storage: [Int16] = []
    private var head = 0

    var count: Int { storage.count - head }
    var isEmpty: Bool { count == 0 }

    subscript(i: Int) -> Int16 { storage[head + i] }

    mutating func append(contentsOf samples: some Collection<Int16>) { storage.append(contentsOf: samples) }

    /// The first `n` samples (fewer if there are fewer), as an array.
    func prefix(_ n: Int) -> [Int16] { Array(storage[head..<head + min(n, count)]) }

    mutating func removeFirst(_ n: Int) {
        head += min(n, count)
        if head >= 4096 && head * 2 >= storage.count {
            storage.removeFirst(head)
            head = 0
        }
    }
}
