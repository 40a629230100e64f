import Foundation
import Logging
import PipelineCore
import Synchronization
@testable import CoreNodes
@testable import Nodes
@testable import TencentASR

/// Collects what an engine reports, as short strings for assertions.
actor ASRResultLog {
    private(set) var results: [ASRResult] = []

    func add(_ r: ASRResult) { results.append(r) }

    /// `start v/0`, `partial 0 text`, `final 0 text`, `end v/0`, `error code`.
    var lines: [String] {
        results.map { r in
            switch r {
            case .utteranceStart(let v, let s): "start \(v)/\(s)"
            case .partial(let t): "partial \(t.seq) \(t.text)"
            case .final(let t): "final \(t.seq) \(t.text)"
            case .utteranceEnd(let v, let s): "end \(v)/\(s)"
            case .error(let code, let message, _): "error \(code) \(message)"
            }
        }
    }

    var finals: [ASRTranscript] { results.compactMap { if case .final(let t) = $0 { t } else { nil } } }
    var errors: [(code: String, message: String)] { results.compactMap { if case .error(let c, let m, _) = $0 { (c, m) } else { nil } } }

    nonisolated var sink: ASRResults { ASRResults { await self.add($0) } }
}

/// Numbered test audio: every 40 ms chunk (640 samples at 16 kHz) holds its chunk number, so a
/// server that reports the first and last values of an utterance tells which chunks it heard.
enum NumberedAudio {
    static let format = AudioFormat(sampleRate: 16000, channels: 1)
    static let chunkSamples = 640

    /// `chunks` chunks of numbered audio, delivered as 20 ms inputs (paced at 1x when `realtime`).
    /// `pause` inserts that many ms of no audio before chunk `after` (the media time jumps).
    static func inputs(chunks: Int, realtime: Bool, utterance: (voiceID: String, seq: Int)? = nil,
                       pause: (after: Int, ms: Int)? = nil) -> ASRInputs {
        var items: [ASRInput] = []
        if let u = utterance { items.append(.utteranceStart(voiceID: u.voiceID, seq: u.seq, startMs: 0)) }
        for k in 0..<chunks {
            for half in 0..<2 {
                let shift = pause.map { k >= $0.after ? $0.ms * 16 : 0 } ?? 0
                let index = Int64(k * chunkSamples + half * chunkSamples / 2 + shift)
                items.append(.audio(ASRAudio(samples: [Int16](repeating: Int16(k), count: chunkSamples / 2), format: format,
                                             pts: MediaTime.nanos(samples: index, rate: 16000))))
            }
        }
        if utterance != nil { items.append(.utteranceEnd) }
        let list = ScriptedInputs(items, realtime: realtime)
        return ASRInputs { await list.next() }
    }

    /// True when the final texts (`chunks a-b`) together cover chunks 0..<n without a gap.
    static func covers(_ finals: [ASRTranscript], chunks n: Int) -> Bool {
        let ranges = finals.compactMap { t -> (Int, Int)? in
            let parts = t.text.replacingOccurrences(of: "chunks ", with: "").split(separator: "-")
            guard parts.count == 2, let a = Int(parts[0]), let b = Int(parts[1]) else { return nil }
            return (a, b)
        }.sorted { $0.0 < $1.0 }
        var next = 0
        for (a, b) in ranges where a <= next { next = max(next, b + 1) }
        return next >= n
    }
}

/// Hands out inputs, optionally at the pace their audio would be captured.
actor ScriptedInputs {
    private let items: [ASRInput]
    private var index = 0
    private let realtime: Bool
    private let start = ContinuousClock.now

    init(_ items: [ASRInput], realtime: Bool) {
        self.items = items
        self.realtime = realtime
    }

    func next() async -> ASRInput? {
        guard index < items.count else { return nil }
        let item = items[index]
        index += 1
        if realtime, case .audio(let a) = item {
            // Audio is available once it has been "captured": at its end time.
            try? await Task.sleep(until: start + .milliseconds(a.endMs), clock: .continuous)
        }
        return item
    }
}

extension TencentASRConfiguration {
    /// A configuration for the local test server.
    static func local(port: Int, scheme: String = "ws", host: String = "127.0.0.1", secretKey: String = TencentTestKeys.secretKey,
                      caFile: String? = nil, maxAttempts: Int = 4) -> TencentASRConfiguration {
        TencentASRConfiguration(
            appID: "1259228442", secretID: TencentTestKeys.secretID, secretKey: secretKey,
            endpoint: TencentEndpoint(scheme: scheme, host: host, port: port, pathPrefix: ""),
            caFile: caFile,
            reconnect: TencentReconnectPolicy(initialDelay: .milliseconds(20), maxDelay: .milliseconds(200), maxAttempts: maxAttempts),
            finalTimeout: .seconds(5))
    }
}

enum TencentTestKeys {
    static let secretID = "AKIDtestsecretid0000000000000000"
    static let secretKey = "testSecretKey0000000000000000000"
}

/// Runs a Tencent session against a server with real clocks.
func runTencentSession(_ config: TencentASRConfiguration, inputs: ASRInputs, log: ASRResultLog,
                       counters: TestCounters = TestCounters()) async throws {
    let clock = ContinuousClock()
    let session = TencentASRSession(config: config, results: log.sink, clock: clock,
                                    makePacer: { Pacer(clock: clock) }, logger: Logger(label: "test.tencent"),
                                    count: { name, n in counters.add(name, n) })
    try await session.run(inputs: inputs)
}

/// Counters a node would keep, for tests.
final class TestCounters: Sendable {
    private let values = Mutex<[String: UInt64]>([:])
    func add(_ name: String, _ n: UInt64) { values.withLock { $0[name, default: 0] += n } }
    subscript(_ name: String) -> UInt64 { values.withLock { $0[name] ?? 0 } }
}
