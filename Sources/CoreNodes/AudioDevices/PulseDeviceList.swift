import CPulse
import Foundation

/// Lists PulseAudio sinks and sources through the introspection API, on a private main loop that
/// is iterated with a deadline (a dead or hung server cannot block the caller for long).
enum PulseDeviceList {
    /// What the listing collects; the callbacks reach it through their userdata pointer.
    private final class Collector {
        var devices: [AudioDeviceInfo] = []
        var defaultSink = ""
        var defaultSource = ""
        var pending = 0
        var failed: String?
    }

    /// Sinks and sources of the server PULSE_SERVER (or the default one) names.
    /// Throws when the server cannot be reached within `timeout`.
    static func list(timeout: Duration = .seconds(2)) throws -> [AudioDeviceInfo] {
        if let problem = libraryProblem({ vp_pulse_load($0, $1) }) { throw AudioDevices.ListError(backend: .pulse, message: problem) }
        guard let loop = pa_mainloop_new() else { throw AudioDevices.ListError(backend: .pulse, message: "cannot create a main loop") }
        defer { pa_mainloop_free(loop) }
        guard let ctx = pa_context_new(pa_mainloop_get_api(loop), "voicepipe devices") else {
            throw AudioDevices.ListError(backend: .pulse, message: "cannot create a context")
        }
        defer { pa_context_disconnect(ctx); pa_context_unref(ctx) }
        let deadline = ContinuousClock.now + timeout
        func iterate() { pa_mainloop_prepare(loop, 50_000); pa_mainloop_poll(loop); pa_mainloop_dispatch(loop) }

        if pa_context_connect(ctx, nil, PA_CONTEXT_NOAUTOSPAWN, nil) < 0 {
            throw AudioDevices.ListError(backend: .pulse, message: "cannot connect: \(String(cString: pa_strerror(pa_context_errno(ctx))))")
        }
        while true {
            let st = pa_context_get_state(ctx)
            if st == PA_CONTEXT_READY { break }
            if st == PA_CONTEXT_FAILED || st == PA_CONTEXT_TERMINATED {
                throw AudioDevices.ListError(backend: .pulse, message: "cannot connect: \(String(cString: pa_strerror(pa_context_errno(ctx))))")
            }
            if ContinuousClock.now > deadline { throw AudioDevices.ListError(backend: .pulse, message: "the server did not answer in time") }
            iterate()
        }

        let collector = Collector()
        let user = Unmanaged.passUnretained(collector).toOpaque()
        collector.pending = 3
        var ops: [OpaquePointer?] = []
        ops.append(pa_context_get_server_info(ctx, { _, info, user in
            let c = Unmanaged<Collector>.fromOpaque(user!).takeUnretainedValue()
            if let info {
                if let s = info.pointee.default_sink_name { c.defaultSink = String(cString: s) }
                if let s = info.pointee.default_source_name { c.defaultSource = String(cString: s) }
            }
            c.pending -= 1
        }, user))
        ops.append(pa_context_get_sink_info_list(ctx, { _, info, eol, user in
            let c = Unmanaged<Collector>.fromOpaque(user!).takeUnretainedValue()
            if eol != 0 { c.pending -= 1; return }
            guard let i = info?.pointee else { return }
            c.devices.append(AudioDeviceInfo(name: String(cString: i.name), description: i.description.map { String(cString: $0) } ?? "",
                                             kind: .playback, backend: .pulse, isDefault: false))
        }, user))
        ops.append(pa_context_get_source_info_list(ctx, { _, info, eol, user in
            let c = Unmanaged<Collector>.fromOpaque(user!).takeUnretainedValue()
            if eol != 0 { c.pending -= 1; return }
            guard let i = info?.pointee else { return }
            c.devices.append(AudioDeviceInfo(name: String(cString: i.name), description: i.description.map { String(cString: $0) } ?? "",
                                             kind: .capture, backend: .pulse, isDefault: false))
        }, user))
        defer { for op in ops { if let op { pa_operation_unref(op) } } }
        while collector.pending > 0 {
            if ContinuousClock.now > deadline { throw AudioDevices.ListError(backend: .pulse, message: "the server did not list its devices in time") }
            if pa_context_get_state(ctx) != PA_CONTEXT_READY {
                throw AudioDevices.ListError(backend: .pulse, message: "connection lost: \(String(cString: pa_strerror(pa_context_errno(ctx))))")
            }
            iterate()
        }
        withExtendedLifetime(collector) {}
        return collector.devices.map { d in
            var d = d
            d.isDefault = d.kind == .playback ? d.name == collector.defaultSink : d.name == collector.defaultSource
            return d
        }
    }
}
