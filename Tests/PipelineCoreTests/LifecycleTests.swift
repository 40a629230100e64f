import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// A pipeline's life: its states, how each way of ending is told apart, and the drain timeout on the
/// pipeline's own clock.
@Suite("Pipeline lifecycle")
struct LifecycleTests {
    let registry = testRegistry()

    @Test("ready → running → finished(completed) when the sources end; a second run is refused")
    func completes() async throws {
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 20]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> sink"]), registry: registry)
        #expect(p.state == .ready)
        try await p.run()
        #expect(p.state == .finished(.completed))
        do {
            try await p.run()
            Issue.record("a second run was accepted")
        } catch let e as PipelineError {
            #expect(e.code == "already_run")
        }
    }

    @Test("stop(): draining, then finished(stopped) with every queued frame delivered")
    func stops() async throws {
        let key = uniqueKey()
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 100000000, "delay_ms": 1]),
            ("sink", "collect", ["key": .string(key)]),
        ], links: ["src -> sink"]), registry: registry)
        async let run: Void = p.run()
        #expect(await board.recorder(key).wait(for: 5))
        #expect(p.state == .running)
        p.stop()
        try await run
        #expect(p.state == .finished(.stopped))
        #expect(p.edgeStats[0].dropped == 0)
        #expect(UInt64(board.recorder(key).values.count) == p.edgeStats[0].sent)
    }

    @Test("cancel(): finished(cancelled) at once, without waiting for a slow node to drain")
    func cancels() async throws {
        let clock = ManualClock()
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 1000]),
            ("slow", "hold", ["hold_ms": 10000]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> slow -> sink"]), registry: registry, options: .on(clock))
        async let run: Void = p.run()
        // `slow` holds its first frame on the manual clock, which never moves here: only a cancel ends it.
        #expect(await clock.waitForSleepers(1, timeout: .seconds(10)))
        let started = ContinuousClock.now
        p.cancel()
        try await run
        #expect(ContinuousClock.now - started < .seconds(5))
        #expect(p.state == .finished(.cancelled))
    }

    @Test("the drain timeout runs on the pipeline's clock: a stop that cannot drain is cancelled when the manual clock passes it")
    func drainTimeoutOnTheInjectedClock() async throws {
        let clock = ManualClock()
        var options = Pipeline.Options.on(clock)
        options.drainTimeout = .seconds(30)
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 100]),
            ("slow", "hold", ["hold_ms": 60000]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> slow -> sink"]), registry: registry, options: options)
        let events = p.events()
        let started = ContinuousClock.now
        async let run: Void = p.run()
        // `slow` sleeps on the manual clock; nothing moves until the test advances it.
        _ = await clock.waitForSleepers(1)
        p.stop()
        #expect(p.state == .draining)
        // The watchdog joins `slow` among the sleepers; 29.9 s is not enough, 30 s is.
        _ = await clock.waitForSleepers(2)
        clock.advance(by: .milliseconds(29_900))
        // Nobody was due: `slow` and the watchdog still sleep.
        #expect(clock.sleepers == 2)
        #expect(p.state == .draining)
        clock.advance(by: .milliseconds(100))
        try await run
        // Thirty seconds of manual time, not of the wall clock.
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(p.state == .finished(.cancelled))
        var timeouts: [Event] = []
        for await e in events where e.name == "drain_timeout" { timeouts.append(e) }
        #expect(timeouts.count == 1)
        #expect(timeouts.first?["timeout_ms"] == .int(30_000))
    }

    @Test("a failure: finished(failed) naming the node and its code")
    func fails() async throws {
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 10]),
            ("bad", "flaky", ["failures": 1, "after": 2]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> bad -> sink"]), registry: registry)
        await #expect(throws: PipelineError.self) { try await p.run() }
        guard case .finished(.failed(let node, _)) = p.state else {
            Issue.record("state \(p.state)")
            return
        }
        #expect(node == "bad")
    }

    @Test("fusion is an option of the pipeline, not a global: off, every node has an edge of its own")
    func fusionOption() async throws {
        let yaml = """
            nodes:
              src: { type: scripted-source, count: 10 }
              a: { type: pass }
              b: { type: pass }
              sink: { type: collect, key: \(uniqueKey()) }
            links: [ "src -> a -> b -> sink" ]
            """
        var off = Pipeline.Options()
        off.fusion = false
        let fused = try Pipeline(yaml: yaml, registry: registry, environment: [:])
        let unfused = try Pipeline(yaml: yaml, registry: registry, environment: [:], options: off)
        #expect(fused.edgeStats.contains { $0.label.hasSuffix("(fused)") })
        #expect(!unfused.edgeStats.contains { $0.label.hasSuffix("(fused)") })
    }

    @Test("a node's requestPipelineStop() goes through the pipeline's life: draining, then finished(stopped)",
          .timeLimit(.minutes(1)))
    func nodeRequestsStop() async throws {
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 100000000, "delay_ms": 1]),
            ("end", "stopper", ["after": 5]),
        ], links: ["src -> end"]), registry: registry)
        try await p.run()
        #expect(p.state == .finished(.stopped))
        #expect(p.edgeStats[0].dropped == 0)
    }

    @Test("termination endsPipeline: the node's finish stops the rest, which drains", .timeLimit(.minutes(1)))
    func nodeEndsThePipeline() async throws {
        var options = Pipeline.Options()
        options.termination["short"] = .endsPipeline
        let key = uniqueKey()
        let p = try Pipeline(graph([
            ("short", "scripted-source", ["count": 5]),
            ("endless", "scripted-source", ["count": 100000000, "delay_ms": 1]),
            ("a", "collect", ["key": .string(uniqueKey())]),
            ("b", "collect", ["key": .string(key)]),
        ], links: ["short -> a", "endless -> b"]), registry: registry, options: options)
        try await p.run()
        #expect(p.state == .finished(.stopped))
        #expect(p.edgeStats.allSatisfy { $0.dropped == 0 })
        #expect(UInt64(board.recorder(key).values.count) == p.edgeStats[1].sent)
    }

    @Test("termination optional: the node's failure is reported and the run completes", .timeLimit(.minutes(1)))
    func optionalNodeFails() async throws {
        var options = Pipeline.Options()
        options.termination["bad"] = .optional
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 10]),
            ("bad", "flaky", ["failures": 1, "after": 2]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> bad -> sink"]), registry: registry, options: options)
        let events = p.events()
        try await p.run()
        #expect(p.state == .finished(.completed))
        var errors: [Event] = []
        for await e in events where e.name == .error { errors.append(e) }
        #expect(errors.count == 1 && errors.first?.node == "bad")
    }
}
