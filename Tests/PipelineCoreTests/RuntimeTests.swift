import Testing
import Foundation
import PipelineCore

@Suite("Runtime")
struct RuntimeTests {
    let registry = testRegistry()

    @Test("end of stream from the source drains the whole graph through a chain")
    func drain() async throws {
        let key = uniqueKey()
        let p = try Pipeline(yaml: """
            nodes:
              src: { type: scripted-source, count: 500 }
              a: { type: pass }
              b: { type: pass }
              sink: { type: collect, key: \(key), delay_ms: 0 }
            links:
              - { from: src, to: a, capacity: 2 }
              - a -> b -> sink
            """, registry: registry, environment: [:])
        try await p.run()
        let got = board.recorder(key).values
        #expect(got == (0..<500).map { Int16(truncatingIfNeeded: $0) })
        let seqs = board.recorder(key).all.map(\.seq)
        #expect(seqs == (0..<500).map { UInt64($0) })
        #expect(p.edgeStats.allSatisfy { $0.dropped == 0 && $0.sent == 500 })
        #expect(p.edgeStats[0].maxDepth <= 2)
    }

    @Test("fan-out gives each consumer its own queue; a drop policy on one does not touch the other")
    func fanOut() async throws {
        let fast = uniqueKey(), slow = uniqueKey()
        let p = try Pipeline(yaml: """
            nodes:
              src: { type: scripted-source, count: 100 }
              f: { type: collect, key: \(fast) }
              s: { type: collect, key: \(slow), delay_ms: 2 }
            links:
              - src -> f
              - { from: src, to: s, capacity: 4, overflow: drop-oldest }
            """, registry: registry, environment: [:])
        try await p.run()
        #expect(board.recorder(fast).values.count == 100)
        let slowCount = board.recorder(slow).values.count
        let dropped = p.edgeStats.first { $0.label.contains("s.in") }!.dropped
        #expect(slowCount < 100)
        #expect(UInt64(slowCount) + dropped == 100)
    }

    @Test("a failing node stops the pipeline with its id in the error")
    func failure() async throws {
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 1000, "delay_ms": 1]),
            ("bad", "flaky", ["failures": 1, "after": 2]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> bad -> sink"]), registry: registry)
        let events = p.events()
        do {
            try await p.run()
            Issue.record("the pipeline should have failed")
        } catch let e as PipelineError {
            #expect(e.node == "bad")
            #expect(e.code == "flaky")
            #expect(e.description.contains("node 'bad' failed"))
        }
        var errorEvent: Event?
        for await e in events where e.name == "error" { errorEvent = e }
        #expect(errorEvent?.node == "bad")
        #expect(errorEvent?["code"]?.stringValue == "flaky")
    }

    @Test("restart: the node is restarted after a failure and restarts are counted")
    func restart() async throws {
        let key = uniqueKey(), flakyKey = uniqueKey()
        let p = try Pipeline(yaml: """
            nodes:
              src: { type: scripted-source, count: 50 }
              bad: { type: flaky, failures: 2, after: 3, key: \(flakyKey), restart: { max: 3, backoff_ms: 1 } }
              sink: { type: collect, key: \(key) }
            links: [ "src -> bad -> sink" ]
            """, registry: registry, environment: [:])
        try await p.run()
        #expect(p.nodeStats.first { $0.id == "bad" }?.restarts == 2)
        // The frame being processed when each failure happened is lost; nothing else is.
        #expect(board.recorder(key).values.count == 48)
    }

    @Test("stop() ends an endless source, drains and returns normally")
    func stop() async throws {
        let key = uniqueKey()
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 100000000, "delay_ms": 1]),
            ("sink", "collect", ["key": .string(key)]),
        ], links: ["src -> sink"]), registry: registry)
        async let run: Void = p.run()
        // Running: frames arrive (however busy the machine is), then the stop.
        await board.recorder(key).wait(for: 11, timeout: .seconds(10))
        #expect(board.recorder(key).values.count > 10)
        let stopped = ContinuousClock.now
        p.stop()
        try await run
        #expect(ContinuousClock.now - stopped < .seconds(2))
        #expect(p.edgeStats[0].dropped == 0)
    }

    @Test("app-source: the app pushes audio under the edge rules and receives every event")
    func appSource() async throws {
        var r = registry
        r.register(AppSourceNode.descriptor)
        let key = uniqueKey()
        let p = try Pipeline(yaml: """
            nodes:
              mic: { type: app-source, rate: 16000, capacity: 2, overflow: block }
              sink: { type: collect, key: \(key) }
            links: [ "mic -> sink" ]
            """, registry: r, environment: [:])
        let mic = try #require(p.appSource("mic"))
        async let run: Void = p.run()
        for i in 0..<30 { await mic.push([Int16](repeating: Int16(i), count: 160)) }
        mic.finish()
        try await run
        let got = board.recorder(key).all
        #expect(got.map { $0.audio!.samples[0] } == (0..<30).map { Int16($0) })
        #expect(got.last?.pts == MediaTime.nanos(samples: 29 * 160, rate: 16000))
        #expect(mic.dropped == 0)
    }

    @Test("a failure inside a fused chain is attributed to the node that threw")
    func fusedFailure() async throws {
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 100]),
            ("a", "pass", [:]),
            ("b", "pass", [:]),
            ("bad", "flaky", ["failures": 1, "after": 5]),
            ("sink", "collect", ["key": .string(uniqueKey())]),
        ], links: ["src -> a -> b -> bad -> sink"]), registry: registry)
        // a -> b and b -> bad are fused into a's task; the error must still name 'bad'.
        #expect(p.edgeStats.contains { $0.label.contains("(fused)") })
        do {
            try await p.run()
            Issue.record("the pipeline should have failed")
        } catch let e as PipelineError {
            #expect(e.node == "bad")
        }
    }

    @Test("fused and unfused chains deliver the same frames")
    func fusionPreservesFrames() async throws {
        let key = uniqueKey()
        let p = try Pipeline(graph([
            ("src", "scripted-source", ["count": 300]),
            ("a", "pass", [:]),
            ("b", "pass", [:]),
            ("c", "pass", [:]),
            ("sink", "collect", ["key": .string(key)]),
        ], links: ["src -> a -> b -> c -> sink"]), registry: registry)
        try await p.run()
        #expect(board.recorder(key).values == (0..<300).map { Int16($0) })
        #expect(p.edgeStats.filter { $0.label.contains("(fused)") }.count == 2)
        #expect(p.edgeStats.allSatisfy { $0.sent == 300 && $0.dropped == 0 })
    }

    @Test("a factory failure names the node")
    func factoryFailure() throws {
        var r = registry
        r.register(NodeDescriptor(type: "broken", summary: "x", inputs: [], make: { _ in throw NodeError("nope", "cannot open") }))
        #expect {
            try Pipeline(yaml: "nodes:\n  b: { type: broken }\n  s: { type: collect, key: x }\nlinks: [ \"b -> s\" ]", registry: r, environment: [:])
        } throws: { e in (e as? PipelineError)?.node == "b" }
    }
}
