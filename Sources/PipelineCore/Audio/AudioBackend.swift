import Synchronization

/// The audio systems voicepipe can capture from and play to.
public enum AudioBackendKind: String, Sendable, Hashable, CaseIterable, CustomStringConvertible {
    /// ALSA PCMs through libasound (`default`, `hw:0,0`, `plughw:1`, ...).
    case alsa
    /// PulseAudio (or PipeWire's PulseAudio server) sources and sinks.
    case pulse
    /// Samples held in memory, for tests (installed by `VoicepipeTesting`; see ``AudioBackendRegistry``).
    case memory

    /// Human name used in messages ("ALSA", "PulseAudio").
    public var description: String {
        switch self {
        case .alsa: "ALSA"
        case .pulse: "PulseAudio"
        case .memory: "memory"
        }
    }
}

/// What a node asks of a device: which device, in which format, with which buffering.
public struct AudioStreamSpec: Sendable, Hashable {
    /// Backend.
    public var backend: AudioBackendKind
    /// Device name (`default` = the backend's default device).
    public var device: String
    /// Requested format; the backend may open another (see ``CaptureBackend/format``).
    public var format: AudioFormat
    /// Samples per channel per read or write.
    public var periodFrames: Int
    /// Target device buffer length in milliseconds.
    public var latencyMs: Int
    /// Stream name shown by the sound server (the node id).
    public var streamName: String
    /// The sound server to connect to (PulseAudio: a server string as `PULSE_SERVER` takes it); `nil`
    /// = the backend's default. The audio nodes take it from their ``NodeEnvironment``.
    public var server: String?

    /// Creates a specification.
    public init(backend: AudioBackendKind, device: String, format: AudioFormat, periodFrames: Int, latencyMs: Int, streamName: String,
                server: String? = nil) {
        self.backend = backend
        self.device = device
        self.format = format
        self.periodFrames = periodFrames
        self.latencyMs = latencyMs
        self.streamName = streamName
        self.server = server
    }

    /// "ALSA device 'default'" — used to start every error message.
    public var label: String { "\(backend) device '\(device)'" }
}

/// One read from a capture device.
public struct CaptureChunk: Sendable {
    /// Interleaved samples in the backend's ``CaptureBackend/format``.
    public var samples: [Int16]
    /// The device lost audio before this chunk (an overrun, recovered).
    public var overrun: Bool = false
    /// Estimated samples per channel lost in that overrun (0 when unknown).
    public var lostFrames: Int = 0

    /// Creates a chunk.
    public init(samples: [Int16], overrun: Bool = false, lostFrames: Int = 0) {
        self.samples = samples
        self.overrun = overrun
        self.lostFrames = lostFrames
    }
}

/// A capture stream that is open on a device.
///
/// Contract, which every backend (ALSA, PulseAudio, memory) follows and `AudioBackendContractTests`
/// checks:
/// - the backend is created by ``AudioBackends/openCapture(_:)``, which either returns an open
///   stream or throws a `NodeError` naming the backend and the device, within 2 seconds
///   (codes `device_not_found`, `device_busy`, `server_unavailable`, `unsupported_format`, `device_error`);
/// - ``read(frames:)`` blocks until exactly `frames` samples per channel are there (fewer only
///   for the memory backend at the end of its material, then `nil`), and recovers from overruns
///   itself, reporting them in the chunk;
/// - the stream is used from one thread only (a dedicated device thread, never the cooperative
///   pool), and ``close()`` is called once, on that thread.
public protocol CaptureBackend: AnyObject {
    /// Format the device delivers (may differ from the requested one; the node then converts).
    var format: AudioFormat { get }
    /// Blocks until `frames` samples per channel were captured; `nil` when the material ended.
    func read(frames: Int) throws -> CaptureChunk?
    /// Stops and releases the device.
    func close()
}

/// A playback stream that is open on a device.
///
/// Contract (same checks as ``CaptureBackend``):
/// - created by ``AudioBackends/openPlayback(_:)``, which returns an open stream or throws a
///   `NodeError` naming backend and device within 2 seconds;
/// - ``write(_:)`` blocks until the device took every sample, recovers from underruns and returns
///   how many it recovered from during this call;
/// - ``drain()`` blocks until what was written has been played (bounded by the device buffer);
/// - used from one thread only; ``close()`` once, on that thread.
public protocol PlaybackBackend: AnyObject {
    /// Format the device plays (the node converts to it).
    var format: AudioFormat { get }
    /// Plays interleaved samples in ``format``; returns the underruns recovered during the call.
    func write(_ samples: [Int16]) throws -> Int
    /// Waits until the written audio has been played.
    func drain() throws
    /// Releases the device (without waiting).
    func close()
    /// Audio written but not yet played, as measured after the last ``write(_:)`` (`nil`: unknown).
    var delay: Duration? { get }
    /// Discards what was written but not yet played (an interruption), keeping the stream open.
    /// Returns how much was discarded (`nil`: unknown).
    func flush() throws -> Duration?
}

extension PlaybackBackend {
    public var delay: Duration? { nil }
    public func flush() throws -> Duration? { nil }
}

/// Backends that are not linked into the built-in nodes but installed at run time: the in-memory
/// backend of `VoicepipeTesting` registers itself here, and the built-in nodes' factory
/// (`AudioBackends` in the `Nodes` module) opens streams of such kinds through it.
public enum AudioBackendRegistry {
    /// Opens a capture stream (blocking; called on a device thread).
    public typealias CaptureOpener = @Sendable (AudioStreamSpec) throws -> any CaptureBackend
    /// Opens a playback stream (blocking; called on a device thread).
    public typealias PlaybackOpener = @Sendable (AudioStreamSpec) throws -> any PlaybackBackend

    private struct Entry: Sendable {
        var capture: CaptureOpener
        var playback: PlaybackOpener
    }
    private static let entries = LockedValue<[AudioBackendKind: Entry]>([:])

    /// Installs (or replaces) the backend for `kind`.
    public static func install(_ kind: AudioBackendKind, capture: @escaping CaptureOpener, playback: @escaping PlaybackOpener) {
        entries.withLock { $0[kind] = Entry(capture: capture, playback: playback) }
    }

    /// Opens a capture stream on an installed backend.
    public static func openCapture(_ spec: AudioStreamSpec) throws -> any CaptureBackend {
        guard let e = entries.withLock({ $0[spec.backend] }) else { throw notInstalled(spec) }
        return try e.capture(spec)
    }

    /// Opens a playback stream on an installed backend.
    public static func openPlayback(_ spec: AudioStreamSpec) throws -> any PlaybackBackend {
        guard let e = entries.withLock({ $0[spec.backend] }) else { throw notInstalled(spec) }
        return try e.playback(spec)
    }

    static func notInstalled(_ spec: AudioStreamSpec) -> NodeError {
        NodeError(.backendUnavailable, "\(spec.label): the \(spec.backend) audio backend is not installed in this process (it comes with VoicepipeTesting)")
    }
}
