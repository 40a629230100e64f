import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// Passes frames on and reports, once, whether it runs on the real-time executor.
actor ExecutorProbe: FrameProcessor {
    var reported = false
    func process(_ frame: Frame, context: NodeContext) async throws {
        if !reported {
            reported = true
            try await context.emit("probe", [("realtime", .bool(RealtimeExecutor.isCurrentThread)),
                                             ("timer_clock", .bool(context.clock is TimerThreadClock))])
        }
        try await context.send(frame)
    }
}

@Suite("Executors")
struct ExecutorTests {
    var registry: NodeRegistry {
        var r = testRegistry()
        r.register(NodeDescriptor(type: "probe", summary: "executor probe", outputs: [PortSpec("out", [.audio]), .events],
                                  fusable: true, make: { _ in ExecutorProbe() }))
        return r
    }

    @Test("nodes run on the executor of their class; `executor:` in the graph overrides the type's")
    func assignment() async throws {
        let p = try Pipeline(yaml: """
            nodes:
              src:  { type: scripted-source, count: 20 }
              bulk: { type: probe }
              rt:   { type: probe, executor: realtime }
              sink: { type: collect, key: \(uniqueKey()) }
            links:
              - src -> bulk -> rt -> sink
            """, registry: registry)
        let events = p.events()
        try await p.run()
        var byNode: [String: Bool] = [:]
        var clocks: [String: Bool] = [:]
        for await e in events where e.name == "probe" {
            byNode[e.node] = e["realtime"]?.boolValue
            clocks[e.node] = e["timer_clock"]?.boolValue
        }
        #expect(byNode == ["bulk": false, "rt": true])
        // Real-time nodes sleep on the timer thread, not on the cooperative pool's timers.
        #expect(clocks == ["bulk": false, "rt": true])
        // Different executors are not fused into one task.
        #expect(!p.edgeStats.contains { $0.label.contains("bulk.out -> rt.in (fused)") })
    }

    @Test("the timer thread wakes sleepers at their deadline, in order, and cancellation ends a sleep at once")
    func timerThread() async throws {
        let clock = TimerThreadClock()
        let start = clock.now
        try await clock.sleep(for: .milliseconds(30))
        #expect(clock.now - start >= .milliseconds(30))
        let order = try await withThrowingTaskGroup(of: Int.self) { group in
            for (i, ms) in [40, 10, 25].enumerated() {
                group.addTask { try await clock.sleep(for: .milliseconds(ms)); return i }
            }
            var got: [Int] = []
            for try await i in group { got.append(i) }
            return got
        }
        #expect(order == [1, 2, 0])
        let sleeper = Task { try await clock.sleep(for: .seconds(60)) }
        #expect(await eventually { clock.sleepers == 1 })
        let cancelled = ContinuousClock.now
        sleeper.cancel()
        await #expect(throws: CancellationError.self) { try await sleeper.value }
        #expect(ContinuousClock.now - cancelled < .seconds(1))
    }

    @Test("a real-time node still sees cancellation: stop() ends an endless real-time source")
    func cancellationReachesRealtimeNodes() async throws {
        let key = uniqueKey()
        let p = try Pipeline(yaml: """
            nodes:
              src:  { type: scripted-source, count: 100000000, delay_ms: 5, executor: realtime }
              sink: { type: collect, key: \(key) }
            links:
              - src -> sink
            """, registry: registry)
        try await withThrowingTaskGroup(of: Void.self) { group in
            group.addTask { try await p.run() }
            // The real-time source runs: its frames arrive.
            #expect(await board.recorder(key).wait(for: 3))
            let before = ContinuousClock.now
            p.stop()
            try await group.next()
            #expect(ContinuousClock.now - before < .seconds(1))
        }
        #expect(RealtimeScheduling.status != nil)
    }
}
