import PipelineCore
import CALSA
import Foundation

/// One capture or playback device of a backend.
public struct AudioDeviceInfo: Sendable, Hashable, Codable {
    /// Capture or playback.
    public enum Kind: String, Sendable, Hashable, Codable {
        case capture, playback
    }
    /// Name to give as the node's `device` parameter.
    public var name: String
    /// Human description.
    public var description: String
    /// Direction.
    public var kind: Kind
    /// Backend (`alsa` or `pulse`).
    public var backend: String
    /// True for the backend's default device in that direction.
    public var isDefault: Bool

    /// Creates an entry.
    public init(name: String, description: String, kind: Kind, backend: AudioBackendKind, isDefault: Bool) {
        self.name = name
        self.description = description
        self.kind = kind
        self.backend = backend.rawValue
        self.isDefault = isDefault
    }
}

/// The devices `voicepipe devices` shows: ALSA PCMs and PulseAudio sources and sinks.
///
/// ```swift
/// let listing = AudioDevices.list()
/// for d in listing.devices where d.kind == .capture { print(d.backend, d.name) }
/// ```
public enum AudioDevices {
    /// A backend that could not be listed (the others still are).
    public struct ListError: Error, Sendable, CustomStringConvertible {
        /// Backend.
        public var backend: AudioBackendKind
        /// What went wrong.
        public var message: String
        public var description: String { "\(backend): \(message)" }
    }

    /// Devices of every backend, and the backends that could not be listed.
    public struct Listing: Sendable {
        /// Devices, ALSA first.
        public var devices: [AudioDeviceInfo]
        /// Problems per backend (e.g. no PulseAudio server).
        public var problems: [ListError]
    }

    /// Lists ALSA and PulseAudio devices. Never hangs: PulseAudio is given 2 seconds.
    public static func list() -> Listing {
        var devices: [AudioDeviceInfo] = []
        var problems: [ListError] = []
        do { devices += try alsa() } catch let e as ListError { problems.append(e) } catch {}
        do { devices += try PulseDeviceList.list() } catch let e as ListError { problems.append(e) } catch {}
        return Listing(devices: devices, problems: problems)
    }

    /// ALSA PCMs from the configuration's name hints (`aplay -L` / `arecord -L`); a PCM usable in
    /// both directions appears twice.
    public static func alsa() throws -> [AudioDeviceInfo] {
        var hints: UnsafeMutablePointer<UnsafeMutableRawPointer?>?
        let rc = snd_device_name_hint(-1, "pcm", &hints)
        guard rc == 0, let hints else { throw ListError(backend: .alsa, message: String(cString: snd_strerror(rc))) }
        defer { snd_device_name_free_hint(hints) }
        func take(_ hint: UnsafeMutableRawPointer, _ id: String) -> String? {
            guard let p = snd_device_name_get_hint(hint, id) else { return nil }
            defer { free(p) }
            return String(cString: p)
        }
        var out: [AudioDeviceInfo] = []
        var i = 0
        while let hint = hints[i] {
            i += 1
            guard let name = take(hint, "NAME") else { continue }
            let desc = (take(hint, "DESC") ?? "").split(separator: "\n").joined(separator: ", ")
            let io = take(hint, "IOID")
            if io == nil || io == "Input" {
                out.append(AudioDeviceInfo(name: name, description: desc, kind: .capture, backend: .alsa, isDefault: name == "default"))
            }
            if io == nil || io == "Output" {
                out.append(AudioDeviceInfo(name: name, description: desc, kind: .playback, backend: .alsa, isDefault: name == "default"))
            }
        }
        return out
    }
}
