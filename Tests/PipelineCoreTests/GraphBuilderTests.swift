import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// Graphs declared in Swift: the same validated graph a file gives, problems located at the Swift call.
@Suite("Graph builder")
struct GraphBuilderTests {
    let registry = testRegistry()

    @Test("a built graph validates to the graph its YAML twin gives, and runs the same")
    func sameAsYAML() async throws {
        let key = uniqueKey(), twin = uniqueKey()
        var g = GraphBuilder(name: "twin")
        g.node("src", "scripted-source", ["count": 12, "samples": 160])
        g.node("mid", "hold")
        g.node("sink", "collect", ["key": .string(key)])
        g.chain("src", "mid")
        g.link("mid", to: "sink.in", capacity: 4, overflow: .block)
        let built = try g.validate(registry: registry)
        let read = try GraphValidator.validate(GraphLoader.parse("""
            name: twin
            nodes:
              src: { type: scripted-source, count: 12, samples: 160 }
              mid: { type: hold }
              sink: { type: collect, key: \(twin) }
            links:
              - src -> mid
              - { from: mid, to: sink.in, capacity: 4, overflow: block }
            """, environment: [:]), registry: registry)
        #expect(built.nodes.map(\.id) == read.nodes.map(\.id))
        #expect(built.links == read.links)
        for (a, b) in zip(built.nodes, read.nodes) where a.id != "sink" {
            #expect(a.config.values == b.config.values, "node \(a.id)")
            #expect(a.executor == b.executor)
            #expect(a.outputFormat == b.outputFormat)
        }
        let p = try Pipeline(g, registry: registry)
        try await p.run()
        #expect(p.state == .finished(.completed))
        #expect(board.recorder(key).values.count == 12)
        #expect(p.edgeStats.map(\.capacity).contains(4))
    }

    @Test("a problem is reported at the Swift line that declared it, every problem at once")
    func locatesProblems() throws {
        var g = GraphBuilder(name: "bad")
        let nodeLine = #line + 1
        g.node("src", "scripted-source", ["cuont": 3])
        g.node("sink", "colect", ["key": "k"])
        let linkLine = #line + 1
        g.link("src", to: "nowhere")
        do {
            _ = try g.validate(registry: registry)
            Issue.record("an invalid graph validated")
        } catch let e as GraphError {
            let param = try #require(e.issues.first { $0.kind == .unknownParameter })
            #expect(param.location.file == #fileID)
            #expect(param.location.line == nodeLine)
            #expect(param.message.contains("did you mean 'count'"))
            #expect(e.issues.contains { $0.kind == .unknownType && $0.message.contains("did you mean 'collect'") })
            let link = try #require(e.issues.first { $0.kind == .unknownNode })
            #expect(link.location.line == linkLine)
            #expect(link.node == "nowhere")
        }
    }

    @Test("ids are checked as a file's are: a repeated id, a bad id, a missing type, an unbounded edge")
    func checksIDs() throws {
        var g = GraphBuilder()
        g.node("a", "scripted-source")
        g.node("a", "scripted-source")
        g.node("b c", "pass")
        g.node("d", "")
        g.link("a", to: "b c", capacity: 0)
        do {
            _ = try g.validate(registry: registry)
            Issue.record("an invalid graph validated")
        } catch let e as GraphError {
            #expect(e.issues.contains { $0.kind == .duplicateID && $0.node == "a" })
            #expect(e.issues.contains { $0.kind == .structure && $0.node == "b c" })
            #expect(e.issues.contains { $0.kind == .missingParameter && $0.node == "d" && $0.message.contains("type") })
            #expect(e.issues.contains { $0.kind == .invalidLink && $0.message.contains("capacity") })
        }
    }

    @Test("a chain names a middle node's port once for both of its links, as a file's chain does")
    func chains() throws {
        var g = GraphBuilder()
        g.node("src", "scripted-source")
        g.node("mid", "pass")
        g.node("sink", "collect", ["key": "k"])
        g.chain("src", "mid.in", "sink")
        let graph = try g.validate(registry: registry)
        #expect(graph.links.map(\.label) == ["src.out -> mid.in", "mid.out -> sink.in"])
        var short = GraphBuilder()
        short.chain("src")
        #expect(short.spec.issues.first?.kind == .invalidLink)
    }

    @Test("values are taken as given: no ${VAR} substitution, and a string where a number belongs is an error")
    func valuesAsGiven() throws {
        var g = GraphBuilder(environment: ["N": "3"])
        g.node("src", "scripted-source", ["count": "${N}"])
        g.node("sink", "collect", ["key": "${N}"])
        g.link("src", to: "sink")
        do {
            _ = try g.validate(registry: registry)
            Issue.record("a string count validated")
        } catch let e as GraphError {
            #expect(e.issues.count == 1)
            #expect(e.issues.first?.message.contains("count") == true)
        }
    }
}
