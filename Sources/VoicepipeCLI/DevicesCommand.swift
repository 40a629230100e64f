import ArgumentParser
import Foundation
import Nodes

/// `voicepipe devices`: ALSA PCMs and PulseAudio sources and sinks.
struct DevicesCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "devices", abstract: "List ALSA and PulseAudio capture and playback devices",
        discussion: "Give a NAME as the `device` parameter of alsa-source/alsa-sink or pulse-source/pulse-sink. A backend that cannot be listed (e.g. no PulseAudio server) is reported on stderr; the others are still shown.")

    @Flag(help: "Print one JSON array (name, description, kind, backend, default).")
    var json = false

    @Option(help: "Only this backend (alsa or pulse).")
    var backend: String?

    @Option(help: "Only this direction (capture or playback).")
    var kind: String?

    func validate() throws {
        if let backend, !["alsa", "pulse"].contains(backend) { throw ValidationError("--backend must be alsa or pulse") }
        if let kind, !["capture", "playback"].contains(kind) { throw ValidationError("--kind must be capture or playback") }
    }

    func run() async throws {
        let listing = AudioDevices.list()
        let devices = listing.devices.filter { d in
            (backend == nil || d.backend == backend) && (kind == nil || d.kind.rawValue == kind)
        }
        for p in listing.problems where backend == nil || p.backend.rawValue == backend {
            FileHandle.standardError.write(Data("voicepipe devices: \(p.backend) not listed: \(p.message)\n".utf8))
        }
        if json {
            struct Entry: Encodable {
                let name: String, description: String, kind: String, backend: String, isDefault: Bool
                enum CodingKeys: String, CodingKey { case name, description, kind, backend, isDefault = "default" }
            }
            let encoder = JSONEncoder()
            encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
            let data = try encoder.encode(devices.map { Entry(name: $0.name, description: $0.description, kind: $0.kind.rawValue, backend: $0.backend, isDefault: $0.isDefault) })
            print(String(decoding: data, as: UTF8.self))
            return
        }
        let rows = devices.map { [$0.backend, $0.kind.rawValue, $0.isDefault ? "*" : "", $0.name, $0.description] }
        let header = ["BACKEND", "KIND", "DEFAULT", "NAME", "DESCRIPTION"]
        var widths = header.map(\.count)
        for r in rows { for i in 0..<4 { widths[i] = max(widths[i], r[i].count) } }
        func line(_ r: [String]) -> String {
            (0..<4).map { r[$0].padding(toLength: widths[$0], withPad: " ", startingAt: 0) }.joined(separator: "  ") + "  " + r[4]
        }
        print(line(header))
        for r in rows { print(line(r)) }
        if devices.isEmpty { print("(no devices)") }
    }
}
