import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// The plan is made from the validated graph alone, before any node exists.
@Suite("Pipeline plan")
struct PipelinePlanTests {
    let registry = testRegistry()

    func graph(_ body: (inout GraphBuilder) -> Void) throws -> ValidatedGraph {
        var g = GraphBuilder()
        body(&g)
        return try g.validate(registry: registry)
    }

    @Test("fusion follows the types' declarations and the links, not the instances")
    func fusesDeclaredTypes() throws {
        let g = try graph { g in
            g.node("src", "scripted-source")
            g.node("a", "pass")
            g.node("b", "hold")
            g.node("c", "mono16k")
            g.node("sink", "collect", ["key": "k"])
            g.chain("src", "a", "b", "c", "sink")
        }
        let plan = PipelinePlan(g, fusion: true)
        // A source never fuses (it has no processor to call into it), the sink is not a processor.
        #expect(Set(plan.fused.map(\.label)) == ["a.out -> b.in", "b.out -> c.in"])
        #expect(plan.fusedNodes == ["b", "c"])
        #expect(plan.queues.map(\.input) == ["a.in", "sink.in"])
        #expect(plan.inputOrder == ["a.in", "b.in", "c.in", "sink.in"])
        // Consumers' contexts are built before their producers'.
        let at = Dictionary(uniqueKeysWithValues: plan.contextOrder.enumerated().map { ($1, $0) })
        for l in plan.fused { #expect(at[l.toNode]! < at[l.fromNode]!) }
        #expect(plan == PipelinePlan(g, fusion: true))
        let unfused = PipelinePlan(g, fusion: false)
        #expect(unfused.fused.isEmpty)
        #expect(unfused.queues.count == 4)
    }

    @Test("a lossy link, a restart policy or a fan-out keeps a queue")
    func keepsQueues() throws {
        let g = try graph { g in
            g.node("src", "scripted-source")
            g.node("a", "pass")
            g.node("b", "pass", restart: RestartPolicy(max: 1, backoffMs: 1))
            g.node("c", "pass")
            g.node("d", "pass")
            g.node("e", "pass")
            g.node("s1", "collect", ["key": "1"])
            g.node("s2", "collect", ["key": "2"])
            g.link("src", to: "a")
            g.link("a", to: "b")
            g.link("b", to: "c")
            g.link("c", to: "d", overflow: .dropOldest)
            g.link("d", to: "e")
            g.link("e", to: "s1")
            g.link("e", to: "s2")
        }
        let plan = PipelinePlan(g, fusion: true)
        #expect(plan.fused.map(\.label) == ["d.out -> e.in"])
    }

    @Test("a type that declares itself fusable but builds something else fails when built, naming the node")
    func checksDeclaration() throws {
        var r = registry
        r.register(NodeDescriptor(type: "liar", summary: "declares fusion, is a plain node", fusable: true, make: { _ in PlainNode() }))
        var g = GraphBuilder()
        g.node("src", "scripted-source")
        g.node("x", "liar")
        g.node("sink", "collect", ["key": "k"])
        g.chain("src", "x", "sink")
        do {
            _ = try Pipeline(g, registry: r)
            Issue.record("a non-processor declared fusable was built")
        } catch let e as PipelineError {
            #expect(e.node == "x")
            #expect(e.code == .configurationMismatch)
        }
    }
}

/// A node that is not a frame processor.
final class PlainNode: Node {
    func run(_ context: NodeContext) async throws {
        let input = context.input()
        while let f = await input.next() { try await context.send(f) }
    }
}
