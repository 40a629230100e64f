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
public actor AudioCaptureNode: Node {
    /// What was asked of the device.
    public let spec: AudioStreamSpec
    let frameMs: Int
    let openTimeout: Duration

    /// Creates a capture node; nothing opens until ``run(_:)``.
    public init(spec: AudioStreamSpec, frameMs: Int, openTimeout: Duration = .milliseconds(1800)) {
        self.spec = spec
        self.frameMs = frameMs
        self.openTimeout = openTimeout
    }

    public func run(_ context: NodeContext) async throws {
        let spec = self.spec
        let frameMs = self.frameMs
        let opened = DeviceOneShot<AudioFormat>()
        // Hold at least half a second (or the device latency) before dropping.
        let capacity = max(500, spec.latencyMs) / max(frameMs, 1) + 1
        let handoff = AudioCaptureHandoff(capacity: capacity, channels: spec.format.channels)
        defer { handoff.stop() }

        AudioDeviceThread.start(name: "\(spec.backend.rawValue)-capture-\(context.id)") {
            let backend: any CaptureBackend
            do {
                backend = try AudioBackends.openCapture(spec)
            } catch {
                opened.resolve(.failure(error))
                return
            }
            defer { backend.close() }
            guard opened.resolve(.success(backend.format)) else { return }
            let devicePeriod = max(1, backend.format.sampleRate * frameMs / 1000)
            while !handoff.isStopped {
                do {
                    guard let chunk = try backend.read(frames: devicePeriod) else {
                        handoff.finish(.ended)
                        return
                    }
                    handoff.push(chunk)
                } catch {
                    handoff.finish(.failed(error))
                    return
                }
            }
        }

        let deviceFormat = try await opened.wait(timeout: openTimeout) {
            NodeError("device_timeout", "\(spec.label) did not open within \(Self.describe(self.openTimeout)); is it stuck or the server hung?")
        }
        let output = spec.format
        var converter: AudioConverter?
        if deviceFormat != output {
            converter = try AudioConverter(from: deviceFormat, to: output)
            context.logger.notice("\(spec.label) gives \(deviceFormat), not \(output): converting with the speexdsp resampler")
            try await context.emit("format_converted", [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
                                                        ("device_rate", .int(Int64(deviceFormat.sampleRate))), ("device_channels", .int(Int64(deviceFormat.channels)))])
        } else {
            context.logger.info("\(spec.label) open: \(output), \(frameMs) ms frames, \(spec.latencyMs) ms buffer")
        }

        // The SDK's didStartRecord / didStopRecord: capture_started once the device delivers,
        // capture_stopped with the reason however the capture ends.
        try await context.emit(CaptureEvents.started(backend: spec.backend.rawValue, device: spec.device, format: output, frameMs: frameMs))
        var stopReason = "stopped"
        do {
            stopReason = try await deliver(context, handoff: handoff, deviceFormat: deviceFormat, converter: converter)
        } catch {
            try? await context.emit(CaptureEvents.stopped(device: spec.device, reason: error is CancellationError ? "stopped" : "error",
                                                          message: (error as? NodeError)?.message ?? "\(error)"))
            throw error
        }
        try? await context.emit(CaptureEvents.stopped(device: spec.device, reason: Task.isCancelled || context.isStopping ? "stopped" : stopReason))
    }

    /// Turns device chunks into frames until the device ends; returns why it ended.
    private func deliver(_ context: NodeContext, handoff: AudioCaptureHandoff, deviceFormat: AudioFormat, converter: AudioConverter?) async throws -> String {
        let output = spec.format
        let frameSamples = output.frames(ms: frameMs) * output.channels
        let out = context.output()
        var pending: [Int16] = []
        pending.reserveCapacity(frameSamples * 2)
        var index: Int64 = 0           // samples per channel, including lost ones
        var gap = false
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
        try await context.emit("overrun", [("backend", .string(spec.backend.rawValue)), ("device", .string(spec.device)),
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
        Event("capture_started", fields: [("backend", .string(backend)), ("device", .string(device)),
                                          ("rate", .int(Int64(format.sampleRate))), ("channels", .int(Int64(format.channels))),
                                          ("frame_ms", .int(Int64(frameMs)))])
    }

    /// `capture_stopped`: `device`, `reason` (`end_of_stream`, `stopped`, `error`) and, on error, `message`.
    static func stopped(device: String, reason: String, message: String? = nil) -> Event {
        var fields: [(String, EventValue)] = [("device", .string(device)), ("reason", .string(reason))]
        if let message { fields.append(("message", .string(message))) }
        return Event("capture_stopped", fields: fields)
    }
}
