import CPulse
import Foundation
import PipelineCore

/// An open PulseAudio stream through the blocking `pa_simple` API.
///
/// The server resamples and remixes, so the stream always has the requested format. A missing
/// server fails at connect time (a refused socket is immediate), a missing device with
/// `PA_ERR_NOENTITY`.
final class PulseSimpleStream {
    let handle: OpaquePointer
    let spec: AudioStreamSpec

    init(_ spec: AudioStreamSpec, direction: pa_stream_direction_t) throws {
        self.spec = spec
        var ss = pa_sample_spec(format: PA_SAMPLE_S16LE, rate: UInt32(spec.format.sampleRate), channels: UInt8(spec.format.channels))
        let bytesPerMs = spec.format.bytesPerSecond / 1000
        let period = UInt32(spec.periodFrames * spec.format.channels * 2)
        let latency = UInt32(max(spec.latencyMs, 10) * bytesPerMs)
        var attr = pa_buffer_attr(maxlength: UInt32.max, tlength: UInt32.max, prebuf: UInt32.max, minreq: UInt32.max, fragsize: UInt32.max)
        if direction == PA_STREAM_RECORD {
            attr.fragsize = period
            attr.maxlength = max(latency, period * 2) * 4
        } else {
            attr.tlength = max(latency, period * 2)
        }
        if let problem = libraryProblem({ vp_pulse_load($0, $1) }) { throw NodeError(.backendUnavailable, problem) }
        var err: Int32 = 0
        let device: String? = spec.device == "default" || spec.device.isEmpty ? nil : spec.device
        let h = pa_simple_new(spec.server, "voicepipe", direction, device, spec.streamName, &ss, nil, &attr, &err)
        guard let h else { throw PulseSimpleStream.error(spec, err, doing: "connect") }
        handle = h
    }

    deinit { pa_simple_free(handle) }

    /// Server-side buffer length the stream was asked for, in milliseconds (record: maxlength,
    /// four times the latency so scheduling hiccups of the device thread lose nothing).
    var bufferMs: Int { 4 * max(spec.latencyMs, 10, spec.periodFrames * 2000 / max(spec.format.sampleRate, 1)) }

    /// A `NodeError` for a PulseAudio error code, naming backend, device and server.
    static func error(_ spec: AudioStreamSpec, _ code: Int32, doing what: String) -> NodeError {
        let text = String(cString: pa_strerror(code))
        let server = spec.server.map { "server '\($0)'" } ?? "the default server"
        switch UInt32(code) {
        case PA_ERR_NOENTITY.rawValue:
            return NodeError(.deviceNotFound, "\(spec.label) not found on \(server) (\(text)); `voicepipe devices` lists the available devices")
        case PA_ERR_CONNECTIONREFUSED.rawValue, PA_ERR_INVALIDSERVER.rawValue, PA_ERR_TIMEOUT.rawValue, PA_ERR_CONNECTIONTERMINATED.rawValue:
            return NodeError(.serverUnavailable, "\(spec.label): cannot reach PulseAudio at \(server) (\(text)); is the daemon running?")
        case PA_ERR_BUSY.rawValue:
            return NodeError(.deviceBusy, "\(spec.label) is busy (\(text))")
        case PA_ERR_NOTSUPPORTED.rawValue, PA_ERR_INVALID.rawValue:
            return NodeError(.unsupportedFormat, "\(spec.label) refuses \(spec.format) s16 (\(text))")
        default:
            return NodeError(.deviceError, "\(spec.label): cannot \(what): \(text)")
        }
    }
}

/// PulseAudio capture (`pulse-source`).
///
/// `pa_simple` does not report server-side overflows, so they are detected from the clock: a
/// capture stream delivers samples at the sample rate, and when the reader falls behind the wall
/// clock by more than the server buffer, audio was lost. The reference point is re-anchored
/// every time a read waits for the device, which absorbs drift between the sound card and the
/// system clock.
final class PulseCapture: CaptureBackend {
    let stream: PulseSimpleStream
    let format: AudioFormat
    private var anchor: ContinuousClock.Instant?
    private var framesSinceAnchor = 0

    init(_ spec: AudioStreamSpec) throws {
        stream = try PulseSimpleStream(spec, direction: PA_STREAM_RECORD)
        format = spec.format
    }

    func read(frames: Int) throws -> CaptureChunk? {
        var samples = [Int16](repeating: 0, count: frames * format.channels)
        var err: Int32 = 0
        let before = ContinuousClock.now
        let rc = samples.withUnsafeMutableBytes { pa_simple_read(stream.handle, $0.baseAddress, $0.count, &err) }
        if rc < 0 { throw PulseSimpleStream.error(stream.spec, err, doing: "read") }
        let now = ContinuousClock.now
        var chunk = CaptureChunk(samples: samples)
        let periodNs = Int64(frames) * 1_000_000_000 / Int64(format.sampleRate)
        let waited = (now - before) >= .nanoseconds(periodNs / 2)
        guard let anchor else {
            self.anchor = now
            framesSinceAnchor = 0
            return chunk
        }
        framesSinceAnchor += frames
        let elapsed = anchor.duration(to: now)
        let expected = Int((Double(elapsed.components.seconds) + Double(elapsed.components.attoseconds) / 1e18) * Double(format.sampleRate))
        let deficit = expected - framesSinceAnchor
        let threshold = (stream.bufferMs + 50) * format.sampleRate / 1000
        if deficit > threshold {
            chunk.overrun = true
            chunk.lostFrames = deficit
            self.anchor = now
            framesSinceAnchor = 0
        } else if waited {
            // Caught up with the device: re-anchor so clock drift never accumulates.
            self.anchor = now
            framesSinceAnchor = 0
        }
        return chunk
    }

    func close() {}
}

/// PulseAudio playback (`pulse-sink`).
///
/// `pa_simple` does not report underruns either, so they are detected from the clock: after each
/// write the stream's latency says until when the server has audio (`playedBy`); a write that
/// comes later than that found the buffer empty.
final class PulsePlayback: PlaybackBackend {
    let stream: PulseSimpleStream
    let format: AudioFormat
    private var playedBy: ContinuousClock.Instant?
    private(set) var delay: Duration?

    init(_ spec: AudioStreamSpec) throws {
        stream = try PulseSimpleStream(spec, direction: PA_STREAM_PLAYBACK)
        format = spec.format
    }

    func write(_ samples: [Int16]) throws -> Int {
        var underruns = 0
        if let playedBy, ContinuousClock.now > playedBy + .milliseconds(20) { underruns = 1 }
        var err: Int32 = 0
        let rc = samples.withUnsafeBytes { pa_simple_write(stream.handle, $0.baseAddress, $0.count, &err) }
        if rc < 0 { throw PulseSimpleStream.error(stream.spec, err, doing: "write") }
        let latency = pa_simple_get_latency(stream.handle, &err)
        delay = latency == UInt64.max ? nil : .microseconds(Int64(latency))
        playedBy = delay.map { ContinuousClock.now + $0 }
        return underruns
    }

    func drain() throws {
        var err: Int32 = 0
        if pa_simple_drain(stream.handle, &err) < 0 { throw PulseSimpleStream.error(stream.spec, err, doing: "drain") }
    }

    func flush() throws -> Duration? {
        var err: Int32 = 0
        let latency = pa_simple_get_latency(stream.handle, &err)
        if pa_simple_flush(stream.handle, &err) < 0 { throw PulseSimpleStream.error(stream.spec, err, doing: "flush") }
        playedBy = nil
        delay = .zero
        return latency == UInt64.max ? nil : .microseconds(Int64(latency))
    }

    func close() {}
}
