import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

@Suite("Media age and latency budgets")
struct MediaAgeTests {
    let registry = testRegistry()

    /// Runs `yaml` on a manual clock, advancing it 10 ms at a time whenever something sleeps.
    func runOnManualClock(_ yaml: String) async throws -> (Pipeline, [Event]) {
        let clock = ManualClock()
        let pipeline = try Pipeline(yaml: yaml, registry: registry, environment: [:], clock: clock)
        let events = pipeline.events()
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await pipeline.run() }
            group.addTask {
                // The scripted source stamps each frame as it sends it: time moves only once it has sent all
                // five (at manual time 0), or a slow run (a sanitizer) would stamp some later and see them younger.
                let settle = ContinuousClock.now + .seconds(5)
                while ContinuousClock.now < settle,
                      (pipeline.edgeStats.first { $0.label.hasPrefix("src.out") }?.sent ?? 0) < 5 {
                    try await Task.sleep(for: .milliseconds(1))
                }
                while !Task.isCancelled {
                    if await clock.waitForSleepers(1, timeout: .milliseconds(50)) { clock.advance(by: .milliseconds(10)) }
                }
            }
            try await group.next()
            group.cancelAll()
        }
        var all: [Event] = []
        for await e in events { all.append(e) }
        return (pipeline, all)
    }

    @Test("frames carry their creation instant through every node; each edge reports the age its consumer sees")
    func agePerEdge() async throws {
        let (p, _) = try await runOnManualClock("""
            nodes:
              src:  { type: scripted-source, count: 5, samples: 8 }
              hold: { type: hold, hold_ms: 50 }
              pass: { type: pass }
              sink: { type: collect, key: \(uniqueKey()) }
            links:
              - src -> hold
              - { from: hold, to: pass, capacity: 1 }
              - pass -> sink
            """)
        let byLabel = Dictionary(uniqueKeysWithValues: p.edgeStats.map { ($0.label, $0) })
        let first = try #require(byLabel["src.out -> hold.in"]?.age)
        #expect(first.count == 5)
        // Frame k leaves `hold` at 50 (k + 1) ms of manual time, created at 0: ages 50...250 ms.
        let last = try #require(p.sinkAges.first { $0.node == "sink" }?.age)
        #expect(last.count == 5)
        #expect(last.maxMs == 250)
        #expect(last.p50Ms >= 140 && last.p50Ms <= 160, "\(last)")
    }

    @Test("a sink that takes frames older than latency_budget_ms emits `late` events and counts them")
    func lateEvents() async throws {
        let (p, events) = try await runOnManualClock("""
            latency_budget_ms: 120
            nodes:
              src:  { type: scripted-source, count: 5, samples: 8 }
              hold: { type: hold, hold_ms: 50 }
              sink: { type: collect, key: \(uniqueKey()) }
            links:
              - src -> hold -> sink
            """)
        let late = events.filter { $0.name == "late" }
        #expect(late.count == 3)
        #expect(late.map { $0["age_ms"]?.doubleValue ?? 0 } == [150, 200, 250])
        #expect(late.allSatisfy { $0.node == "sink" && $0["budget_ms"] == .int(120) })
        #expect(p.nodeStats.first { $0.id == "sink" }?.counters["late"] == 3)
    }

    @Test("latency_budget_ms must be a positive number of milliseconds")
    func budgetChecked() {
        let spec = GraphLoader.parse("latency_budget_ms: -5\nnodes:\n  a: { type: scripted-source }\nlinks: []\n", file: "g.yaml", environment: [:])
        #expect(spec.issues.contains { $0.location.line == 1 && $0.message.contains("latency_budget_ms") })
    }
}
