import Foundation
import Synchronization
import PipelineCore

/// A playback sink on any ``PlaybackBackend`` (`alsa-sink`, `pulse-sink`).
///
/// The device opens when its format is known: at start when `rate` is given, otherwise with the
/// format of the first audio frame. Audio in another format is converted to the device's. A
/// dedicated device thread writes what the node queues; at end of stream the queued audio is
/// played to the end (drained), bounded by its length plus two seconds. Underruns are recovered
/// from, counted as `underruns` and emitted as `underrun` events.
///
/// A device that disappears mid-stream follows `on_device_lost`: `fail` ends the node with
/// `device_lost`; with `reopen` (the default device) or `wait` (the same device) the node emits
/// `device_lost`, keeps taking audio so the graph runs on — what arrives meanwhile is dropped and
/// counted (`dropped_while_lost`, in frames) —, retries every 250 ms and emits `device_restored`.
///
/// Talking back:
/// - Any event on the optional `interrupt` input stops playback at once: what is queued, what waits
///   on the input, and what the device holds are discarded (`pa_simple_flush`, `snd_pcm_drop`). Audio
///   from `tts` carries captions (``Caption``), so the node then emits `interrupted` with the `text`
///   actually played of the answer (whole sentences, then the words of the one cut), `heard_ms` and
///   `discarded_ms`; the rest of that answer, still coming, is dropped (counted as
///   `interrupted_frames`).
/// - `playback_start` (`delay_ms`: audio ahead of it, until it is heard) when an answer (or audio
///   after silence) starts.
/// - The optional output `out` carries what the device was given, as it takes it (device time): the
///   reference an echo canceller needs (`speaker.out -> aec.ref`).
public actor AudioPlaybackNode: Node {
    /// The device and buffering asked for; `format` is replaced by the stream's when `rate` is absent.
    public let spec: AudioStreamSpec
    let fixedFormat: Bool
    let openTimeout: Duration
    let compensateDrift: Bool
    let onDeviceLost: DeviceLossPolicy

    /// Creates a playback node; `fixedFormat` opens the device at start in `spec.format`;
    /// `compensateDrift` trims the resampling ratio to hold the queue (see ``DriftCompensator``).
    public init(spec: AudioStreamSpec, fixedFormat: Bool, openTimeout: Duration = .milliseconds(1800), compensateDrift: Bool = false,
                onDeviceLost: DeviceLossPolicy = .fail) {
        self.spec = spec
        self.onDeviceLost = onDeviceLost
        self.fixedFormat = fixedFormat
        self.openTimeout = openTimeout
        self.compensateDrift = compensateDrift
    }

    private struct Open {
        let queue: AudioPlaybackQueue
        let done: DeviceOneShot<Bool>
        let format: AudioFormat
        let losses: DeviceLossLog
        let written: PlaybackCounter
    }

    private var ledger = PlaybackLedger()
    private var lastTurn: Int64?
    private var current: Open?

    private var reportedDropped = 0

    /// Emits what the device thread noted about losses and restorations since the last call.
    private func reportLosses(_ d: Open, context: NodeContext) async throws {
        for entry in d.losses.drain() {
            switch entry {
            case .lost(let message, let at):
                lostAt = at
                context.count("device_lost")
                context.logger.warning("\(spec.label) lost (\(message)); \(onDeviceLost == .reopen ? "opening the default device" : "waiting for it to come back"); audio meanwhile is dropped")
                try await context.emit(.deviceLost, [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                                       ("message", .string(message)), ("policy", .string(onDeviceLost.rawValue))])
            case .restored(let device, let at):
                let outage = lostAt.map { at - $0 } ?? .zero
                lostAt = nil
                let outageMs = Int64(outage.components.seconds * 1000 + outage.components.attoseconds / 1_000_000_000_000_000)
                context.count("device_restored")
                try await context.emit(.deviceRestored, [("backend", .string(spec.backend.rawValue)), ("device", .string(device)),
                                                           ("outage_ms", .int(outageMs))])
            }
        }
        let dropped = d.losses.dropped
        if dropped > reportedDropped {
            context.count("dropped_while_lost", by: UInt64(dropped - reportedDropped))
            reportedDropped = dropped
        }
    }

    private var lostAt: ContinuousClock.Instant?

    public func run(_ context: NodeContext) async throws {
        let played: AsyncStream<[Int16]>.Continuation?
        let playedStream: AsyncStream<[Int16]>?
        if context.output("out").isConnected {
            let (stream, continuation) = AsyncStream.makeStream(of: [Int16].self, bufferingPolicy: .bufferingNewest(256))
            played = continuation
            playedStream = stream
        } else {
            played = nil
            playedStream = nil
        }
        try await withThrowingTaskGroup(of: Void.self) { group in
            if let playedStream {
                group.addTask { try await self.forwardPlayed(playedStream, context: context) }
            }
            if context.connectedInputs.contains("interrupt") {
                group.addTask {
                    for await frame in context.input("interrupt") where frame.event != nil {
                        try await self.interrupt(context: context)
                    }
                }
            }
            defer { played?.finish() }
            try await self.play(context, played: played)
            // The interrupt input is feedback: it is not waited for.
            played?.finish()
            group.cancelAll()
            try await group.waitForAll()
        }
    }

    /// Sends what the device took on `out`, in the device's format, on the device's timeline.
    private func forwardPlayed(_ stream: AsyncStream<[Int16]>, context: NodeContext) async throws {
        let out = context.output("out")
        var position: Int64 = 0
        for await samples in stream {
            guard let format = current?.format else { continue }
            let frame = Frame.audio(samples, format: format, sampleIndex: position)
            position += Int64(samples.count / max(format.channels, 1))
            try await out.send(frame)
        }
    }

    /// An event on `interrupt`: discards what is waiting and what the device holds; tells what of the
    /// answer was heard.
    private func interrupt(context: NodeContext) async throws {
        // Everything waiting on the input goes; the rest of a cut answer is dropped as it comes.
        var flushed: [(FrameMarks, AudioFormat, Int)] = []
        let n = context.input().flush(where: { f in
            if let a = f.audio { flushed.append((f.marks, a.format, a.frameCount)) }
            return true
        })
        if n > 0 { context.count("interrupted_frames", by: UInt64(n)) }
        guard let d = current else { return }
        let (_, deviceDiscarded) = await d.queue.interrupt()
        let rate = max(d.format.sampleRate, 1)
        let left = deviceDiscarded.map { Self.samples($0, rate: rate) } ?? 0
        ledger.played(through: max(0, d.written.value - left))
        for (marks, format, frames) in flushed {
            ledger.queued(marks, samples: frames * rate / max(format.sampleRate, 1))
        }
        let heard = ledger.interrupt(rate: rate)
        lastTurn = nil
        guard let heard else { return }
        context.count("interruptions")
        context.logger.info("\(spec.label): interrupted after \(heard.samples * 1000 / rate) ms of the answer")
        var fields: [(String, EventValue)] = [("text", .string(heard.text)), ("heard_ms", .int(Int64(heard.samples * 1000 / rate))),
                                              ("discarded_ms", .int(Int64(heard.discarded * 1000 / rate)))]
        if let turn = heard.turn { fields.append(("turn_ms", .int(MediaTime.millis(turn)))) }
        try await context.emit(.interrupted, fields)
    }

    private func play(_ context: NodeContext, played: AsyncStream<[Int16]>.Continuation?) async throws {
        var device: Open?
        var converter: AudioConverter?
        var queuedFrames: Int64 = 0
        var reportedUnderruns = 0
        var compensator = DriftCompensator()
        var stretch: DriftResampler?
        let startedAt = ContinuousClock.now
        let stopBox = StopOnCancel()
        try await withTaskCancellationHandler {
            if fixedFormat { device = try await open(spec.format, context: context, played: played); stopBox.set(device!.queue); current = device }
            for await frame in context.input() {
                guard let audio = frame.audio, !audio.samples.isEmpty else { continue }
                if ledger.isCut(frame.marks) {
                    context.count("interrupted_frames")
                    continue
                }
                if device == nil {
                    var s = spec.format
                    s.sampleRate = audio.format.sampleRate
                    s.channels = audio.format.channels
                    device = try await open(s, context: context, played: played)
                    stopBox.set(device!.queue)
                    current = device
                }
                let d = device!
                var samples = audio.samples
                if audio.format != d.format {
                    if converter?.input != audio.format {
                        converter = try AudioConverter(from: audio.format, to: d.format)
                        context.logger.notice("\(spec.label): converting \(audio.format) to the device's \(d.format)")
                    }
                    samples = converter!.convert(samples)
                }
                if compensateDrift, let depth = d.queue.depth(format: d.format) {
                    let ppm = compensator.update(depth: depth, at: ContinuousClock.now - startedAt)
                    context.gauge("clock_drift_ppm", compensator.driftPPM)
                    if stretch?.channels != d.format.channels { stretch = DriftResampler(channels: d.format.channels) }
                    samples = stretch!.process(samples, ppm: ppm)
                }
                queuedFrames += Int64(samples.count / d.format.channels)
                try await announce(frame, device: d, context: context)
                // An interruption may have come meanwhile.
                if ledger.isCut(frame.marks) { context.count("interrupted_frames"); continue }
                ledger.queued(frame.marks, samples: samples.count / max(d.format.channels, 1))
                try await d.queue.put(samples)
                try await reportLosses(d, context: context)
                let u = d.queue.underruns
                if u > reportedUnderruns {
                    context.count("underruns", by: UInt64(u - reportedUnderruns))
                    reportedUnderruns = u
                    context.logger.warning("\(spec.label): underrun (the graph did not deliver audio in time); playback goes on")
                    try await context.emit(.underrun, [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                                        ("count", .int(Int64(u)))])
                }
            }
            guard let d = device else { return }
            if let converter, !Task.isCancelled {
                let tail = converter.flush()
                if !tail.isEmpty { try await d.queue.put(tail) }
            }
            d.queue.finish()
            // Bounded drain: what may still be queued plus the device buffer, plus two seconds.
            let queuedMs = Int(min(queuedFrames * 1000 / Int64(max(d.format.sampleRate, 1)), 600_000))
            let bound = Duration.milliseconds(min(queuedMs, 60_000) + spec.latencyMs + 2000)
            _ = try await d.done.wait(timeout: bound) { [spec] in
                NodeError(.drainTimeout, "\(spec.label) did not finish playing within \(AudioCaptureNode.describe(bound))")
            }
            let u = d.queue.underruns
            if u > reportedUnderruns { context.count("underruns", by: UInt64(u - reportedUnderruns)) }
            try await reportLosses(d, context: context)
        } onCancel: {
            stopBox.stop()
        }
    }

    /// Emits `playback_start` when an answer begins (a new caption turn) or audio follows silence;
    /// keeps the ledger's played position current.
    private func announce(_ frame: Frame, device d: Open, context: NodeContext) async throws {
        let depthSamples = d.queue.depth(format: d.format).map { Self.samples($0, rate: d.format.sampleRate) } ?? 0
        ledger.played(through: max(0, min(d.written.value, ledger.queued - depthSamples)))
        let idle = ledger.pending == 0 || depthSamples < d.format.sampleRate / 200
        let starts: Bool
        if let turn = frame.marks.caption?.turn {
            starts = turn != lastTurn
            lastTurn = turn
        } else {
            starts = idle
            lastTurn = nil
        }
        guard starts else { return }
        var fields: [(String, EventValue)] = [("delay_ms", .int(Int64(depthSamples * 1000 / max(d.format.sampleRate, 1))))]
        if let c = frame.marks.caption { fields += [("text", .string(c.text)), ("turn_ms", .int(MediaTime.millis(c.turn)))] }
        try await context.emit(.playbackStart, fields)
    }

    /// Samples per channel in `duration` at `rate`.
    static func samples(_ duration: Duration, rate: Int) -> Int {
        Int((Double(rate) * (duration / .seconds(1))).rounded())
    }

    /// Starts the device thread and waits (bounded) until the device is open.
    private func open(_ format: AudioFormat, context: NodeContext, played: AsyncStream<[Int16]>.Continuation?) async throws -> Open {
        var spec = self.spec
        spec.format = format
        spec.periodFrames = max(1, format.sampleRate * max(spec.periodFrames, 1) / max(self.spec.format.sampleRate, 1))
        let queue = AudioPlaybackQueue(capacity: max(4, (spec.latencyMs + 200) / max(spec.periodFrames * 1000 / max(format.sampleRate, 1), 1)))
        let opened = DeviceOneShot<AudioFormat>()
        let done = DeviceOneShot<Bool>()
        let immutableSpec = spec
        let losses = DeviceLossLog()
        let written = PlaybackCounter()
        let policy = onDeviceLost
        AudioDeviceThread.start(name: "\(spec.backend.rawValue)-playback-\(context.id)") {
            defer { played?.finish() }
            var backend: any PlaybackBackend
            do {
                backend = try AudioBackends.openPlayback(immutableSpec)
            } catch {
                opened.resolve(.failure(error))
                return
            }
            guard opened.resolve(.success(backend.format)) else { backend.close(); return }
            let format = backend.format
            var presence = DevicePresence(immutableSpec, kind: .playback)
            var lost = false
            var nextAttempt = ContinuousClock.now
            do {
                while let samples = queue.take() {
                    if samples.isEmpty {
                        // An interruption: drop what the device holds.
                        queue.flushed(lost ? nil : (try? backend.flush()) ?? nil)
                        continue
                    }
                    if lost {
                        losses.addDropped(samples.count / max(format.channels, 1))
                        guard ContinuousClock.now >= nextAttempt else { continue }
                        nextAttempt = .now + DeviceReopen.retryInterval
                        let target = DeviceReopen.target(immutableSpec, policy: policy)
                        // Only a device that takes the same format: the node converts to it already.
                        guard let b = try? AudioBackends.openPlayback(target) else { continue }
                        guard b.format == format else { b.close(); continue }
                        backend = b
                        lost = false
                        presence = DevicePresence(target, kind: .playback)
                        losses.append(.restored(device: target.device, at: .now))
                        continue
                    }
                    do {
                        try presence.check()
                        queue.addUnderruns(try backend.write(samples))
                        queue.reportDelay(backend.delay)
                        written.add(samples.count / max(format.channels, 1))
                        played?.yield(samples)
                    } catch {
                        backend.close()
                        guard policy != .fail else { throw NodeError(.deviceLost, "\(immutableSpec.label) lost: \(DeviceReopen.message(error))") }
                        lost = true
                        nextAttempt = policy == .reopen ? .now : .now + DeviceReopen.retryInterval
                        losses.append(.lost(message: DeviceReopen.message(error), at: .now))
                        losses.addDropped(samples.count / max(format.channels, 1))
                    }
                }
                if !lost {
                    try backend.drain()
                    backend.close()
                }
                done.resolve(.success(true))
            } catch {
                queue.fail(error)
                done.resolve(.failure(error))
            }
        }
        let deviceFormat = try await opened.wait(timeout: openTimeout) { [openTimeout] in
            NodeError(.deviceTimeout, "\(immutableSpec.label) did not open within \(AudioCaptureNode.describe(openTimeout)); is it stuck or the server hung?")
        }
        context.logger.info("\(spec.label) open for playback: \(deviceFormat), \(spec.latencyMs) ms buffer")
        return Open(queue: queue, done: done, format: deviceFormat, losses: losses, written: written)
    }
}

/// Samples (per channel) a device thread has written, read by the node's task.
final class PlaybackCounter: Sendable {
    private let count = Atomic<Int>(0)
    func add(_ n: Int) { count.add(n, ordering: .relaxed) }
    var value: Int { count.load(ordering: .relaxed) }
}

/// Lets a cancellation handler stop whichever playback queue is open at that moment.
private final class StopOnCancel: Sendable {
    private let queue = LockedValue<AudioPlaybackQueue?>(nil)
    private let cancelled = LockedValue(false)
    func set(_ q: AudioPlaybackQueue) {
        let c = cancelled.withLock { $0 }
        queue.withLock { $0 = q }
        if c { q.stop() }
    }
    func stop() {
        cancelled.withLock { $0 = true }
        queue.withLock { $0 }?.stop()
    }
}
