import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// A configuration exercising what the decoder supports: snake-cased names, defaults, optionals,
/// enums, string maps and lists, a raw mapping, and a combination check.
struct SampleConfiguration: NodeConfiguration {
    enum Mode: String, Decodable, Sendable { case fast, exact }
    var frameMs: Int
    var gainDb: Double
    var mode: Mode
    var label: String?
    var headers: [String: String]
    var tags: [String]
    var options: ParamValue?
    var enabled: Bool

    static let parameters: [ParamSpec] = [
        ParamSpec("frame_ms", .int(1...1000), default: 20, doc: "frame length"),
        ParamSpec("gain_db", .double(-60...60), default: 0, doc: "gain (an integer default decodes into a Double)"),
        ParamSpec("mode", .choice(["fast", "exact"]), default: "fast", doc: "mode"),
        ParamSpec("label", .string, doc: "optional label"),
        ParamSpec("headers", .stringMap, default: .map([:]), doc: "headers"),
        ParamSpec("tags", .stringList, default: .list([]), doc: "tags"),
        ParamSpec("options", .map, doc: "free mapping, values keep their YAML types"),
        ParamSpec("enabled", .bool, default: true, doc: "on"),
    ]

    func problems() -> [String] { mode == .exact && frameMs > 100 ? ["exact mode needs frame_ms <= 100"] : [] }
}

/// A node that reports its decoded configuration and what its factory was given.
final class ConfigEcho: Node {
    let configuration: SampleConfiguration
    let environment: NodeEnvironment
    init(_ c: SampleConfiguration, _ e: NodeEnvironment) { configuration = c; environment = e }
    func run(_ context: NodeContext) async throws {
        try await context.emit("config", [("frame_ms", .int(Int64(configuration.frameMs))), ("token", .string(environment.variables["TOKEN"] ?? ""))])
    }
}

let sampleDescriptor = NodeDescriptor(
    type: "sample", summary: "typed configuration test", family: "sources", inputs: [], outputs: [.events],
    configuration: SampleConfiguration.self, make: { c, env in ConfigEcho(c, env) })

@Suite("Typed configuration")
struct TypedConfigurationTests {
    var registry: NodeRegistry {
        var r = testRegistry()
        r.register(sampleDescriptor)
        return r
    }

    @Test("parameters decode once into the struct: snake case, defaults, optionals, enums, maps, lists, raw values")
    func decodes() throws {
        let g = try GraphValidator.validate(GraphLoader.parse("""
            nodes:
              s: { type: sample, frame_ms: 40.0, mode: exact, headers: { X-Key: abc, Retry: 3 }, tags: one, options: { n: 2, on: true, l: [1, "a"] } }
            links: []
            """, environment: [:]), registry: registry)
        let c = try #require(g.nodes[0].configuration as? SampleConfiguration)
        #expect(c.frameMs == 40 && c.gainDb == 0 && c.mode == .exact && c.label == nil && c.enabled)
        #expect(c.headers == ["X-Key": "abc", "Retry": "3"])
        #expect(c.tags == ["one"])
        #expect(c.options == .map(["n": .int(2), "on": .bool(true), "l": .list([.int(1), .string("a")])]))
    }

    @Test("range problems, combination problems and numbers out of range for Int are reported with file:line:column and the node id")
    func reportsProblems() {
        let spec = GraphLoader.parse("""
            nodes:
              a: { type: sample, frame_ms: 1e19 }
              b: { type: sample, mode: exact, frame_ms: 500 }
              c: { type: sample, gain_db: 1e309 }
            links: []
            """, file: "g.yaml", environment: [:])
        do {
            _ = try GraphValidator.validate(spec, registry: registry)
            Issue.record("accepted")
        } catch let e as GraphError {
            let text = e.description
            #expect(text.contains("g.yaml:2:22: node 'a': parameter 'frame_ms'"), "\(text)")
            #expect(text.contains("g.yaml:3:3: node 'b': exact mode needs frame_ms <= 100"), "\(text)")
            #expect(text.contains("node 'c': parameter 'gain_db'"), "\(text)")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("a struct that does not match its schema is reported at the node, naming the parameter")
    func schemaMismatch() {
        struct Mismatched: NodeConfiguration {
            var level: Int            // the schema declares no `level`
            static let parameters: [ParamSpec] = [ParamSpec("gain", .int, default: 1, doc: "")]
        }
        var r = registry
        r.register(NodeDescriptor(type: "mismatched", summary: "", inputs: [], outputs: [.events],
                                  configuration: Mismatched.self, make: { _, _ in PassThrough() }))
        let spec = GraphLoader.parse("nodes:\n  m: { type: mismatched }\nlinks: []\n", file: "g.yaml", environment: [:])
        do {
            _ = try GraphValidator.validate(spec, registry: r)
            Issue.record("accepted")
        } catch let e as GraphError {
            #expect(e.issues.count == 1 && e.issues[0].node == "m" && e.issues[0].location.line == 2)
            // Found when the graph uses the type: its configuration reads a name no parameter declares.
            #expect(e.issues[0].message.contains("reads 'level'") && e.issues[0].message.contains("mismatched"), "\(e)")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test("the factory gets the graph's environment, not the process's")
    func environmentIsInjected() async throws {
        let pipeline = try Pipeline(yaml: "nodes:\n  s: { type: sample }\nlinks: []\n", registry: registry, environment: ["TOKEN": "from-graph"])
        let events = pipeline.events()
        try await pipeline.run()
        var got: [Event] = []
        for await e in events { got.append(e) }
        #expect(got.first { $0.name == "config" }?["token"] == .string("from-graph"))
    }

    @Test("Configuration.decode applies defaults and checks like the validator")
    func decodeOutsideAGraph() throws {
        let c = try SampleConfiguration.decode(["frame_ms": 10])
        #expect(c.frameMs == 10 && c.mode == .fast)
        #expect(throws: ConfigurationError.self) { try SampleConfiguration.decode(["frame_ms": 0]) }
        #expect(throws: ConfigurationError.self) { try SampleConfiguration.decode(["nope": 1]) }
        #expect(throws: ConfigurationError.self) { try SampleConfiguration.decode(["mode": "exact", "frame_ms": 200]) }
    }

    @Test("links into one input must agree on capacity and overflow")
    func fanInMustAgree() {
        let spec = GraphLoader.parse("""
            nodes:
              a: { type: scripted-source }
              b: { type: scripted-source }
              s: { type: collect, key: k }
            links:
              - { from: a, to: s, capacity: 4, overflow: drop-oldest }
              - { from: b, to: s, capacity: 8 }
            """, file: "g.yaml", environment: [:])
        #expect(throws: GraphError.self) { try GraphValidator.validate(spec, registry: registry) }
        do { _ = try GraphValidator.validate(spec, registry: registry) } catch let e as GraphError {
            #expect(e.issues.count == 1)
            #expect(e.issues[0].location.line == 7 && e.issues[0].message.contains("capacity 8, overflow block") && e.issues[0].message.contains("capacity 4, overflow drop-oldest"), "\(e)")
        } catch {}
        let same = GraphLoader.parse("""
            nodes:
              a: { type: scripted-source }
              b: { type: scripted-source }
              s: { type: collect, key: k }
            links:
              - { from: a, to: s, capacity: 4, overflow: drop-oldest }
              - { from: b, to: s, capacity: 4, overflow: drop-oldest }
            """, file: "g.yaml", environment: [:])
        #expect(throws: Never.self) { try GraphValidator.validate(same, registry: registry) }
    }

    @Test("`executor:` overrides the type's class; a bad value is an error at its location")
    func executorOverride() throws {
        let g = try GraphValidator.validate(GraphLoader.parse("""
            nodes:
              a: { type: scripted-source, executor: realtime }
              s: { type: collect, key: k }
            links:
              - a -> s
            """, environment: [:]), registry: registry)
        #expect(g.node("a")?.executor == .realtime && g.node("s")?.executor == .bulk)
        let bad = GraphLoader.parse("nodes:\n  a: { type: scripted-source, executor: fastest }\nlinks: []\n", file: "g.yaml", environment: [:])
        #expect(bad.issues.first?.location.line == 2 && bad.issues.first?.message.contains("realtime | bulk") == true)
    }

    @Test("a plugin that cannot be found is an error at its place in `plugins:`, naming where it was looked for")
    func missingPlugin() {
        let spec = GraphLoader.parse("""
            plugins:
              - nothere
            nodes:
              a: { type: scripted-source }
              s: { type: collect, key: k }
            links:
              - a -> s
            """, file: "g.yaml", environment: ["VOICEPIPE_PLUGIN_PATH": "/tmp/voicepipe-no-such-dir"])
        do {
            _ = try GraphValidator.validate(spec, registry: registry)
            Issue.record("accepted")
        } catch let e as GraphError {
            #expect(e.issues.count == 1)
            #expect(e.issues[0].kind == .plugin && e.issues[0].location.line == 2)
            #expect(e.issues[0].message.contains("/tmp/voicepipe-no-such-dir"), "\(e)")
        } catch {
            Issue.record("unexpected \(error)")
        }
    }
}

@Suite("Testing kit")
struct NodeHarnessTests {
    @Test("a node runs on scripted input and its frames and events are collected")
    func runsOneNode() async throws {
        let h = try NodeHarness(NodeDescriptor(type: "pass", summary: "", make: { _ in PassThrough() }))
        h.send(indexedFrames(count: 5, samples: 4))
        try await h.run()
        #expect(h.output().values == [0, 1, 2, 3, 4])
        #expect(h.output().ended)
    }

    @Test("time moves only when the test advances the manual clock")
    func manualTime() async throws {
        let h = try NodeHarness(ScriptedSource.descriptor(type: "slow", steps: [.wait(.seconds(10)), .frame(indexedFrames(count: 1, samples: 2)[0])]))
        let before = try await h.run { h in
            await h.clock.waitForSleepers(1)
            let early = h.output().count
            h.clock.advance(by: .seconds(10))
            await h.output().wait(for: 1)
            return early
        }
        #expect(before == 0)
        #expect(h.output().count == 1)
    }

    @Test("a node's failure reaches the test as a PipelineError naming it")
    func failureSurfaces() async throws {
        let flaky = NodeDescriptor(type: "flaky", summary: "", make: { _ in Flaky(failures: 1, after: 1) })
        let h = try NodeHarness(flaky)
        h.send(indexedFrames(count: 3, samples: 2))
        await #expect(throws: PipelineError.self) { try await h.run() }
    }

    @Test("bad parameters are refused before the node exists")
    func badParameters() {
        #expect(throws: GraphError.self) { try NodeHarness(sampleDescriptor, parameters: ["frame_ms": 0]) }
    }
}

@Suite("app-sink")
struct AppSinkTests {
    @Test("an embedding app receives a port's frames as an AsyncSequence, in order, ending with the stream")
    func receivesFrames() async throws {
        var registry = testRegistry()
        registry.register(AppSinkNode.descriptor)
        let pipeline = try Pipeline(yaml: """
            nodes:
              src: { type: scripted-source, count: 200, samples: 8 }
              app: { type: app-sink, capacity: 4 }
            links:
              - src -> app
            """, registry: registry)
        let sink = try #require(pipeline.appSink("app"))
        async let done: Void = pipeline.run()
        var values: [Int16] = []
        for await f in sink.frames {
            values.append(f.audio?.samples.first ?? -1)
            // A slow app: every 50 frames it stops until its full queue holds the graph back (back-pressure, no loss).
            if values.count % 50 == 0 && 200 - values.count >= 4 {
                #expect(await eventually { sink.stats.sent >= UInt64(values.count + 4) }, "the queue fills while the app waits")
            }
        }
        try await done
        #expect(values == (0..<200).map { Int16($0) })
        #expect(sink.dropped == 0 && sink.stats.maxDepth <= 4)
    }

    @Test("with a drop policy the graph never waits for the app; drops are counted")
    func dropsAreCounted() async throws {
        var registry = testRegistry()
        registry.register(AppSinkNode.descriptor)
        let pipeline = try Pipeline(yaml: """
            nodes:
              src: { type: scripted-source, count: 100, samples: 8 }
              app: { type: app-sink, capacity: 10, overflow: drop-oldest }
            links:
              - src -> app
            """, registry: registry)
        let sink = try #require(pipeline.appSink("app"))
        try await pipeline.run()          // nobody reads while it runs
        var got: [Int16] = []
        for await f in sink.frames { got.append(f.audio?.samples.first ?? -1) }
        #expect(got == (90..<100).map { Int16($0) })
        #expect(sink.dropped == 90)
        #expect(pipeline.nodeStats.first { $0.id == "app" }?.counters["dropped"] == 90)
    }
}
