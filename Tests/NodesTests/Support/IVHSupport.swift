import Foundation
import PipelineCore
import Synchronization
@testable import CoreNodes
@testable import DigitalHuman
@testable import Nodes

/// A settable flag shared between a test and the nodes it runs.
final class TestFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .relaxed) }
    var isSet: Bool { value.load(ordering: .relaxed) }
}

/// `script-text`: a test source that sends the given texts, then holds its output open until
/// `release` is set (or it is cancelled).
final class ScriptedTextSource: Node {
    let texts: [String]
    let release: TestFlag

    init(texts: [String], release: TestFlag) {
        self.texts = texts
        self.release = release
    }

    func run(_ context: NodeContext) async throws {
        for t in texts { try await context.send(.text(t)) }
        while !release.isSet && !Task.isCancelled {
            try? await Task.sleep(for: .milliseconds(10))
        }
    }

    static func descriptor(texts: [String], release: TestFlag) -> NodeDescriptor {
        NodeDescriptor(type: "script-text", summary: "test texts", family: "sources", inputs: [],
                       outputs: [PortSpec("out", [.text])], make: { _ in ScriptedTextSource(texts: texts, release: release) })
    }
}

enum IVHTest {
    /// The built-in registry plus `script-text`.
    static func registry(texts: [String] = [], release: TestFlag = TestFlag()) -> NodeRegistry {
        var r = BuiltinNodes.registry()
        r.register(ScriptedTextSource.descriptor(texts: texts, release: release))
        return r
    }

    /// The `avatar` node line of a graph pointed at `server`.
    static func avatarNode(_ server: IVHServer, _ extra: String = "") -> String {
        "avatar: { type: avatar, base_url: \"\(server.baseURL)\", appkey: \"\(server.options.appkey)\", access_token: \"\(server.options.accessToken)\"\(extra.isEmpty ? "" : ", " + extra) }"
    }

    /// Path of the package root (for the built `voicepipe` binary).
    static var packageRoot: URL {
        URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    }

    /// The debug `voicepipe` binary.
    static var binary: String { packageRoot.appendingPathComponent(".build/debug/voicepipe").path }

    /// Runs `pipeline`, collecting its events; `onEvent` sees each as it comes.
    static func run(_ pipeline: Pipeline, timeout: Duration = .seconds(30), onEvent: @escaping @Sendable (Event) -> Void = { _ in }) async throws -> [Event] {
        let events = pipeline.events(buffer: 100_000)
        let collector = Task { var all: [Event] = []; for await e in events { onEvent(e); all.append(e) }; return all }
        let watchdog = Task { try await Task.sleep(for: timeout); pipeline.stop() }
        defer { watchdog.cancel() }
        try await pipeline.run()
        return await collector.value
    }
}

extension Array where Element == Event {
    /// Events named `name` (avatar tests).
    func events(_ name: String) -> [Event] { filter { $0.name == name } }
}

/// `script-audio`: a test source sending `count` frames of 20 ms of 16 kHz mono audio, the first
/// marked speech start and the last marked as the last slice of its utterance.
final class ScriptedAudioSource: Node {
    let count: Int
    init(count: Int) { self.count = count }

    func run(_ context: NodeContext) async throws {
        let format = AudioFormat(sampleRate: 16000, channels: 1)
        for i in 0..<count {
            var marks = FrameMarks()
            marks.speechStart = i == 0
            marks.slice = SliceInfo(voiceID: "v1", seq: i, isFirst: i == 0, isLast: i == count - 1)
            let samples = [Int16](repeating: Int16(i), count: 320)
            try await context.send(.audio(samples, format: format, sampleIndex: Int64(i * 320), marks: marks))
        }
    }

    static func descriptor(count: Int) -> NodeDescriptor {
        NodeDescriptor(type: "script-audio", summary: "test audio", family: "sources", inputs: [],
                       outputs: [PortSpec("out", [.audio])], format: .fromParameters(rate: 16000, channels: 1),
                       make: { _ in ScriptedAudioSource(count: count) })
    }
}
