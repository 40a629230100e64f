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
public actor AudioPlaybackNode: Node {
    /// The device and buffering asked for; `format` is replaced by the stream's when `rate` is absent.
    public let spec: AudioStreamSpec
    let fixedFormat: Bool
    let openTimeout: Duration
    let compensateDrift: Bool

    /// Creates a playback node; `fixedFormat` opens the device at start in `spec.format`;
    /// `compensateDrift` trims the resampling ratio to hold the queue (see ``DriftCompensator``).
    public init(spec: AudioStreamSpec, fixedFormat: Bool, openTimeout: Duration = .milliseconds(1800), compensateDrift: Bool = false) {
        self.spec = spec
        self.fixedFormat = fixedFormat
        self.openTimeout = openTimeout
        self.compensateDrift = compensateDrift
    }

    private struct Open {
        let queue: AudioPlaybackQueue
        let done: DeviceOneShot<Bool>
        let format: AudioFormat
    }

    public func run(_ context: NodeContext) async throws {
        var device: Open?
        var converter: AudioConverter?
        var queuedFrames: Int64 = 0
        var reportedUnderruns = 0
        var compensator = DriftCompensator()
        var stretch: DriftResampler?
        let startedAt = ContinuousClock.now
        let stopBox = StopOnCancel()
        try await withTaskCancellationHandler {
            if fixedFormat { device = try await open(spec.format, context: context); stopBox.set(device!.queue) }
            for await frame in context.input() {
                guard let audio = frame.audio, !audio.samples.isEmpty else { continue }
                if device == nil {
                    var s = spec.format
                    s.sampleRate = audio.format.sampleRate
                    s.channels = audio.format.channels
                    device = try await open(s, context: context)
                    stopBox.set(device!.queue)
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
                try await d.queue.put(samples)
                let u = d.queue.underruns
                if u > reportedUnderruns {
                    context.count("underruns", by: UInt64(u - reportedUnderruns))
                    reportedUnderruns = u
                    context.logger.warning("\(spec.label): underrun (the graph did not deliver audio in time); playback goes on")
                    try await context.emit("underrun", [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
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
                NodeError("drain_timeout", "\(spec.label) did not finish playing within \(AudioCaptureNode.describe(bound))")
            }
            let u = d.queue.underruns
            if u > reportedUnderruns { context.count("underruns", by: UInt64(u - reportedUnderruns)) }
        } onCancel: {
            stopBox.stop()
        }
    }

    /// Starts the device thread and waits (bounded) until the device is open.
    private func open(_ format: AudioFormat, context: NodeContext) async throws -> Open {
        var spec = self.spec
        spec.format = format
        spec.periodFrames = max(1, format.sampleRate * max(spec.periodFrames, 1) / max(self.spec.format.sampleRate, 1))
        let queue = AudioPlaybackQueue(capacity: max(4, (spec.latencyMs + 200) / max(spec.periodFrames * 1000 / max(format.sampleRate, 1), 1)))
        let opened = DeviceOneShot<AudioFormat>()
        let done = DeviceOneShot<Bool>()
        let immutableSpec = spec
        AudioDeviceThread.start(name: "\(spec.backend.rawValue)-playback-\(context.id)") {
            let backend: any PlaybackBackend
            do {
                backend = try AudioBackends.openPlayback(immutableSpec)
            } catch {
                opened.resolve(.failure(error))
                return
            }
            defer { backend.close() }
            guard opened.resolve(.success(backend.format)) else { return }
            do {
                while let samples = queue.take() {
                    queue.addUnderruns(try backend.write(samples))
                    queue.reportDelay(backend.delay)
                }
                try backend.drain()
                done.resolve(.success(true))
            } catch {
                queue.fail(error)
                done.resolve(.failure(error))
            }
        }
        let deviceFormat = try await opened.wait(timeout: openTimeout) { [openTimeout] in
            NodeError("device_timeout", "\(immutableSpec.label) did not open within \(AudioCaptureNode.describe(openTimeout)); is it stuck or the server hung?")
        }
        context.logger.info("\(spec.label) open for playback: \(deviceFormat), \(spec.latencyMs) ms buffer")
        return Open(queue: queue, done: done, format: deviceFormat)
    }
}

/// Lets a cancellation handler stop whichever playback queue is open at that moment.
private final class StopOnCancel: Sendable {
    private let queue = Mutex<AudioPlaybackQueue?>(nil)
    private let cancelled = Mutex(false)
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
