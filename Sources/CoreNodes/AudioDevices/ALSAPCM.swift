import CALSA
import Foundation
import PipelineCore

/// An open ALSA PCM in s16 interleaved format, shared by capture and playback.
///
/// The PCM is opened non-blocking, so a missing or busy device fails at once instead of waiting,
/// then switched to blocking mode for the device thread. The requested format is set with the
/// plug layer's conversion allowed; a device that refuses it is opened at the nearest rate and
/// channel count it supports, and the node converts (it logs which).
final class ALSAPCM {
    let pcm: OpaquePointer
    let format: AudioFormat
    let spec: AudioStreamSpec

    init(_ spec: AudioStreamSpec, stream: snd_pcm_stream_t) throws {
        self.spec = spec
        var handle: OpaquePointer?
        let rc = snd_pcm_open(&handle, spec.device, stream, SND_PCM_NONBLOCK)
        guard rc == 0, let handle else { throw ALSAPCM.error(spec, rc, doing: "open") }
        pcm = handle
        do {
            try ALSAPCM.check(spec, snd_pcm_nonblock(handle, 0), doing: "switch to blocking mode")
            format = try ALSAPCM.configure(handle, spec)
        } catch {
            snd_pcm_close(handle)
            throw error
        }
    }

    /// Sets s16 interleaved at the requested rate/channels, or the nearest the device supports.
    private static func configure(_ pcm: OpaquePointer, _ spec: AudioStreamSpec) throws -> AudioFormat {
        let latencyUs = UInt32(max(spec.latencyMs, 10) * 1000)
        let rc = snd_pcm_set_params(pcm, SND_PCM_FORMAT_S16_LE, SND_PCM_ACCESS_RW_INTERLEAVED,
                                    UInt32(spec.format.channels), UInt32(spec.format.sampleRate), 1, latencyUs)
        if rc == 0 { return spec.format }
        // The device refuses the exact format: take the nearest it supports and convert.
        var hw: OpaquePointer?
        snd_pcm_hw_params_malloc(&hw)
        guard let hw else { throw error(spec, rc, doing: "set parameters") }
        defer { snd_pcm_hw_params_free(hw) }
        try check(spec, snd_pcm_hw_params_any(pcm, hw), doing: "read hardware parameters")
        try check(spec, snd_pcm_hw_params_set_access(pcm, hw, SND_PCM_ACCESS_RW_INTERLEAVED), doing: "set interleaved access")
        if snd_pcm_hw_params_set_format(pcm, hw, SND_PCM_FORMAT_S16_LE) < 0 {
            throw NodeError(.unsupportedFormat, "\(spec.label) does not support signed 16-bit samples; use a 'plughw:' or 'default' device, which converts")
        }
        var channels = UInt32(spec.format.channels)
        try check(spec, snd_pcm_hw_params_set_channels_near(pcm, hw, &channels), doing: "set \(spec.format.channels) channels")
        var rate = UInt32(spec.format.sampleRate)
        var dir: Int32 = 0
        try check(spec, snd_pcm_hw_params_set_rate_near(pcm, hw, &rate, &dir), doing: "set \(spec.format.sampleRate) Hz")
        var buffer = latencyUs
        _ = snd_pcm_hw_params_set_buffer_time_near(pcm, hw, &buffer, &dir)
        var period = latencyUs / 4
        _ = snd_pcm_hw_params_set_period_time_near(pcm, hw, &period, &dir)
        try check(spec, snd_pcm_hw_params(pcm, hw), doing: "apply hardware parameters")
        return AudioFormat(sampleRate: Int(rate), channels: Int(channels))
    }

    deinit { snd_pcm_close(pcm) }

    static func check(_ spec: AudioStreamSpec, _ rc: Int32, doing what: String) throws {
        if rc < 0 { throw error(spec, rc, doing: what) }
    }

    /// A `NodeError` for an ALSA error code, naming backend and device.
    static func error(_ spec: AudioStreamSpec, _ rc: Int32, doing what: String) -> NodeError {
        let text = String(cString: snd_strerror(rc))
        switch -rc {
        case ENOENT, ENODEV, ENXIO:
            return NodeError(.deviceNotFound, "\(spec.label) not found (\(text)); `voicepipe devices` lists the available devices")
        case EBUSY:
            return NodeError(.deviceBusy, "\(spec.label) is busy (\(text)): another program holds it")
        case ECONNREFUSED, EHOSTDOWN:
            return NodeError(.serverUnavailable, "\(spec.label): cannot reach the sound server (\(text))")
        default:
            return NodeError(.deviceError, "\(spec.label): cannot \(what): \(text)")
        }
    }
}

/// ALSA capture (`alsa-source`).
final class ALSACapture: CaptureBackend {
    let pcm: ALSAPCM
    var format: AudioFormat { pcm.format }

    init(_ spec: AudioStreamSpec) throws {
        pcm = try ALSAPCM(spec, stream: SND_PCM_STREAM_CAPTURE)
        try ALSAPCM.check(spec, snd_pcm_start(pcm.pcm), doing: "start capture")
    }

    func read(frames: Int) throws -> CaptureChunk? {
        let ch = format.channels
        var samples = [Int16](repeating: 0, count: frames * ch)
        var got = 0
        var overrun = false
        while got < frames {
            let n = samples.withUnsafeMutableBufferPointer { buf in
                snd_pcm_readi(pcm.pcm, buf.baseAddress! + got * ch, snd_pcm_uframes_t(frames - got))
            }
            if n >= 0 { got += Int(n); continue }
            let rc = Int32(n)
            if rc == -EPIPE || rc == -ESTRPIPE || rc == -EINTR {
                if rc == -EPIPE { overrun = true }
                try ALSAPCM.check(pcm.spec, snd_pcm_recover(pcm.pcm, rc, 1), doing: "recover from an overrun")
                if rc != -EINTR { _ = snd_pcm_start(pcm.pcm) }
                continue
            }
            if rc == -EAGAIN { _ = snd_pcm_wait(pcm.pcm, 100); continue }
            throw ALSAPCM.error(pcm.spec, rc, doing: "read")
        }
        return CaptureChunk(samples: samples, overrun: overrun)
    }

    func close() { _ = snd_pcm_drop(pcm.pcm) }
}

/// ALSA playback (`alsa-sink`).
final class ALSAPlayback: PlaybackBackend {
    let pcm: ALSAPCM
    var format: AudioFormat { pcm.format }

    init(_ spec: AudioStreamSpec) throws {
        pcm = try ALSAPCM(spec, stream: SND_PCM_STREAM_PLAYBACK)
    }

    func write(_ samples: [Int16]) throws -> Int {
        let ch = format.channels
        let frames = samples.count / ch
        var done = 0
        var underruns = 0
        while done < frames {
            let n = samples.withUnsafeBufferPointer { buf in
                snd_pcm_writei(pcm.pcm, buf.baseAddress! + done * ch, snd_pcm_uframes_t(frames - done))
            }
            if n >= 0 { done += Int(n); continue }
            let rc = Int32(n)
            if rc == -EPIPE || rc == -ESTRPIPE || rc == -EINTR {
                if rc == -EPIPE { underruns += 1 }
                try ALSAPCM.check(pcm.spec, snd_pcm_recover(pcm.pcm, rc, 1), doing: "recover from an underrun")
                continue
            }
            if rc == -EAGAIN { _ = snd_pcm_wait(pcm.pcm, 100); continue }
            throw ALSAPCM.error(pcm.spec, rc, doing: "write")
        }
        return underruns
    }

    var delay: Duration? {
        var frames: snd_pcm_sframes_t = 0
        guard snd_pcm_delay(pcm.pcm, &frames) == 0, frames >= 0 else { return nil }
        return .nanoseconds(MediaTime.nanos(samples: Int64(frames), rate: format.sampleRate))
    }

    func flush() throws -> Duration? {
        let pending = delay
        var rc = snd_pcm_drop(pcm.pcm)
        if rc == 0 { rc = snd_pcm_prepare(pcm.pcm) }
        if rc < 0 { throw ALSAPCM.error(pcm.spec, rc, doing: "flush") }
        return pending
    }

    func drain() throws {
        let rc = snd_pcm_drain(pcm.pcm)
        if rc < 0 && rc != -EPIPE { throw ALSAPCM.error(pcm.spec, rc, doing: "drain") }
    }

    func close() { _ = snd_pcm_drop(pcm.pcm) }
}
