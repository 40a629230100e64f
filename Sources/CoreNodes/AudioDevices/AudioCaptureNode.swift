import Foundation
import PipelineCore

/// A live capture source on any ``CaptureBackend`` (`alsa-source`, `pulse-source`).
///
/// A dedicated device thread opens the device and reads it continuously into an
/// ``AudioCaptureHandoff``; the node's task converts (when the device could not give the
/// requested format), cuts `frame_ms` frames and sends them. Overruns — the device's own, or
/// chunks dropped because the graph fell behind — are recovered from, counted as `overruns` and
/// emitted as `overrun` events; the frame after a gap carries the `discontinuity` mark and its
/// timestamp skips the lost audio.
///
/// A device that disappears mid-stream (unplugged, or a PulseAudio source removed — see
/// ``DevicePresence``) is handled by `on_device_lost`: `fail` ends the node with `device_lost`;
/// `reopen` and `wait` emit `device_lost`, keep the rest of the graph running, retry every 250 ms
/// (the default device, or the same one) and emit `device_restored` with the outage; the first frame
/// after it carries `discontinuity` and its timestamp skips the outage.
public actor AudioCaptureNode: Node {
    /// What was asked of the device.
    public let spec: AudioStreamSpec
    let frameMs: Int
    let openTimeout: Duration
    let onDeviceLost: DeviceLossPolicy

    /// Creates a capture node; nothing opens until ``run(_:)``.
    public init(spec: AudioStreamSpec, frameMs: Int, openTimeout: Duration = .milliseconds(1800), onDeviceLost: DeviceLossPolicy = .fail) {
        self.spec = spec
        self.frameMs = frameMs
        self.openTimeout = openTimeout
        self.onDeviceLost = onDeviceLost
    }

    public func run(_ context: NodeContext) async throws {
        let spec = self.spec
        let frameMs = self.frameMs
        let opened = DeviceOneShot<AudioFormat>()
        // Hold at least half a second (or the device latency) before dropping.
        let capacity = max(500, spec.latencyMs) / max(frameMs, 1) + 1
        let handoff = AudioCaptureHandoff(capacity: capacity, channels: spec.format.channels)
        defer { handoff.stop() }

        let policy = onDeviceLost
        AudioDeviceThread.start(name: "\(spec.backend.rawValue)-capture-\(context.id)") {
            var backend: any CaptureBackend
            do {
                backend = try AudioBackends.openCapture(spec)
            } catch {
                opened.resolve(.failure(error))
                return
            }
            guard opened.resolve(.success(backend.format)) else { backend.close(); return }
            var presence = DevicePresence(spec, kind: .capture)
            var devicePeriod = max(1, backend.format.sampleRate * frameMs / 1000)
            while !handoff.isStopped {
                do {
                    try presence.check()
                    guard let chunk = try backend.read(frames: devicePeriod) else {
                        backend.close()
                        handoff.finish(.ended)
                        return
                    }
                    handoff.push(chunk)
                } catch {
                    backend.close()
                    if handoff.isStopped { return }
                    guard policy != .fail else {
                        handoff.finish(.failed(NodeError(.deviceLost, "\(spec.label) lost: \(DeviceReopen.message(error))")))
                        return
                    }
                    handoff.notify(.lost(DeviceReopen.message(error)))
                    guard let (reopened, target) = DeviceReopen.loop(spec, policy: policy, stopped: { handoff.isStopped },
                                                                     open: { try AudioBackends.openCapture($0) }) else { return }
                    backend = reopened
                    presence = DevicePresence(target, kind: .capture)
                    devicePeriod = max(1, backend.format.sampleRate * frameMs / 1000)
                    handoff.notify(.restored(device: target.device, format: backend.format))
                }
            }
            backend.close()
        }

        var deviceFormat = try await opened.wait(timeout: openTimeout) {
            NodeError(.deviceTimeout, "\(spec.label) did not open within \(Self.describe(self.openTimeout)); is it stuck or the server hung?")
        }
        let output = spec.format
        var converter: AudioConverter?
        if deviceFormat != output {
            converter = try AudioConverter(from: deviceFormat, to: output)
            context.logger.notice("\(spec.label) gives \(deviceFormat), not \(output): converting with the speexdsp resampler")
            try await context.emit(.formatConverted, [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                                        ("device_rate", .int(Int64(deviceFormat.sampleRate))), ("device_channels", .int(Int64(deviceFormat.channels)))])
        } else {
            context.logger.info("\(spec.label) open: \(output), \(frameMs) ms frames, \(spec.latencyMs) ms buffer")
        }

        // The SDK's didStartRecord / didStopRecord: capture_started once the device delivers,
        // capture_stopped with the reason however the capture ends.
        try await context.emit(CaptureEvents.started(backend: spec.backend.rawValue, device: spec.device, format: output, frameMs: frameMs))
        var stopReason = "stopped"
        do {
            stopReason = try await deliver(context, handoff: handoff, deviceFormat: &deviceFormat, converter: &converter)
        } catch {
            try? await context.emit(CaptureEvents.stopped(device: spec.device, reason: error is CancellationError ? "stopped" : "error",
                                                          message: (error as? NodeError)?.message ?? "\(error)"))
            throw error
        }
        try? await context.emit(CaptureEvents.stopped(device: spec.device, reason: Task.isCancelled || context.isStopping ? "stopped" : stopReason))
    }

    /// Turns device chunks into frames until the device ends; returns why it ended.
    private func deliver(_ context: NodeContext, handoff: AudioCaptureHandoff, deviceFormat: inout AudioFormat, converter: inout AudioConverter?) async throws -> String {
        let output = spec.format
        let frameSamples = output.frames(ms: frameMs) * output.channels
        let out = context.output()
        var pending: [Int16] = []
        pending.reserveCapacity(frameSamples * 2)
        var index: Int64 = 0           // samples per channel, including lost ones
        var gap = false
        var lostAt: ContinuousClock.Instant?
        loop: while let delivery = await handoff.next() {
            switch delivery {
            case .chunk(let chunk, let dropped):
                if chunk.overrun {
                    gap = true
                    index += try await overrun(context, cause: "device", lostFrames: chunk.lostFrames, deviceFormat: deviceFormat)
                }
                if dropped > 0 {
                    gap = true
                    index += try await overrun(context, cause: "graph", lostFrames: dropped, deviceFormat: deviceFormat)
                }
                if let converter { pending.append(contentsOf: converter.convert(chunk.samples)) } else { pending.append(contentsOf: chunk.samples) }
                var start = 0
                while pending.count - start >= frameSamples {
                    let samples = Array(pending[start..<start + frameSamples])
                    start += frameSamples
                    let frame = Frame.audio(samples, format: output, sampleIndex: index, marks: FrameMarks(discontinuity: gap))
                    gap = false
                    index += Int64(frameSamples / output.channels)
                    try await out.send(frame)
                }
                if start > 0 { pending.removeFirst(start) }
            case .lost(let message):
                lostAt = .now
                context.count("device_lost")
                context.logger.warning("\(spec.label) lost (\(message)); \(onDeviceLost == .reopen ? "opening the default device" : "waiting for it to come back")")
                try await context.emit(.deviceLost, [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                                       ("message", .string(message)), ("policy", .string(onDeviceLost.rawValue))])
            case .restored(let device, let format):
                let outage = lostAt.map { ContinuousClock.now - $0 } ?? .zero
                lostAt = nil
                let outageMs = Int64(outage.components.seconds * 1000 + outage.components.attoseconds / 1_000_000_000_000_000)
                // The timeline goes on through the outage: the next frame starts where the audio would have been.
                pending.removeAll()
                index += outageMs * Int64(output.sampleRate) / 1000
                gap = true
                if format != deviceFormat {
                    deviceFormat = format
                    converter = format == output ? nil : try AudioConverter(from: format, to: output)
                }
                context.count("device_restored")
                context.logger.notice("\(spec.backend.rawValue) device '\(device)' open again after \(outageMs) ms")
                try await context.emit(.deviceRestored, [("backend", .string(spec.backend.rawValue)), ("device", .string(device)),
                                                           ("outage_ms", .int(outageMs))])
            case .ended:
                break loop
            case .failed(let error):
                throw error
            }
        }
        if !pending.isEmpty && !Task.isCancelled && !context.isStopping {
            try await out.send(Frame.audio(pending, format: output, sampleIndex: index))
        }
        return "end_of_stream"
    }

    /// Counts and reports an overrun; returns the lost samples per channel in the output rate.
    private func overrun(_ context: NodeContext, cause: String, lostFrames: Int, deviceFormat: AudioFormat) async throws -> Int64 {
        context.count("overruns")
        let lostMs = lostFrames * 1000 / max(deviceFormat.sampleRate, 1)
        context.logger.warning("\(spec.label): overrun (\(cause == "graph" ? "the graph fell behind" : "the device buffer overflowed")), about \(lostMs) ms lost; capture goes on")
        try await context.emit(.overrun, [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                           ("cause", .string(cause)), ("lost_ms", .int(Int64(lostMs)))])
        return Int64(lostFrames) * Int64(spec.format.sampleRate) / Int64(max(deviceFormat.sampleRate, 1))
    }

    static func describe(_ d: Duration) -> String {
        let ms = d.components.seconds * 1000 + d.components.attoseconds / 1_000_000_000_000_000
        return ms % 1000 == 0 ? "\(ms / 1000) s" : String(format: "%.1f s", Double(ms) / 1000)
    }
}

/// The `capture_started` / `capture_stopped` events of sources (a recognizer SDK's
/// didStartRecord / didStopRecord).
enum CaptureEvents {
    /// `capture_started`: `backend`, `device`, `rate`, `channels`, `frame_ms`.
    static func started(backend: String, device: String, format: AudioFormat, frameMs: Int) -> Event {
        Event(.captureStarted, fields: [("backend", .string(backend)), ("device", .string(device)),
                                          ("rate", .int(Int64(format.sampleRate))), ("channels", .int(Int64(format.channels))),
                                          ("frame_ms", .int(Int64(frameMs)))])
    }

    /// `capture_stopped`: `device`, `reason` (`end_of_stream`, `stopped`, `error`) and, on error, `message`.
    static func stopped(device: String, reason: String, message: String? = nil) -> Event {
        var fields: [(String, EventValue)] = [("device", .string(device)), ("reason", .string(reason))]
        if let message { fields.append(("message", .string(message))) }
        return Event(.captureStopped, fields: fields)
    }
}
