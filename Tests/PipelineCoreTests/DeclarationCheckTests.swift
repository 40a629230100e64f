import Foundation
import Testing
import PipelineCore
import VoicepipeTesting

/// A parameter declared in a `ParamSpec` list and read by a configuration's properties: the two must
/// agree, or the type is refused where a graph uses it.
@Suite("Parameter declarations")
struct DeclarationCheckTests {
    /// `gainDb` is declared as `gain_dB`: the value a user writes would never reach the property.
    struct Misspelt: NodeConfiguration {
        var gainDb: Double?
        var clip: Bool
        static let parameters: [ParamSpec] = [
            ParamSpec("gain_dB", .double(-60...60), doc: "gain"),
            ParamSpec("clip", .bool, default: true, doc: "saturate"),
        ]
    }

    /// Declares `extra`, which nothing reads.
    struct Unread: NodeConfiguration {
        var level: Int
        static let parameters: [ParamSpec] = [
            ParamSpec("level", .int(0...10), default: 3, doc: "level"),
            ParamSpec("extra", .string, doc: "never read"),
            ParamSpec("legacy", .string, ignored: true, doc: "accepted and ignored, on purpose"),
        ]
    }

    /// Agrees, with explicit coding keys and a nested value.
    struct Agreeing: NodeConfiguration {
        var rate: Int
        var label: String?
        var headers: [String: String]
        enum CodingKeys: String, CodingKey { case rate = "sample_rate", label, headers }
        static let parameters: [ParamSpec] = [
            ParamSpec("sample_rate", .int(8000...48000), required: true, doc: "rate"),
            ParamSpec("label", .string, doc: "label"),
            ParamSpec("headers", .stringMap, default: .map([:]), doc: "headers"),
        ]
    }

    @Test("each disagreement is named, in both directions; agreeing declarations pass")
    func findsDisagreements() {
        let misspelt = ParameterDecoder.schemaProblems(Misspelt.self)
        #expect(misspelt.contains { $0.contains("reads 'gain_db'") })
        #expect(misspelt.contains { $0.contains("'gain_dB' is declared") })
        #expect(ParameterDecoder.schemaProblems(Unread.self) == ["parameter 'extra' is declared but the configuration never reads it (misspelt, or a property missing)"])
        #expect(ParameterDecoder.schemaProblems(Agreeing.self).isEmpty)
    }

    @Test("a graph using a type whose declarations disagree is refused at the node, naming the problem")
    func refusesAtUse() throws {
        var r = testRegistry()
        r.register(NodeDescriptor(type: "misspelt", summary: "", configuration: Misspelt.self, make: { _, _ in PassThrough() }))
        r.register(NodeDescriptor(type: "fine", summary: "", configuration: Agreeing.self, make: { _, _ in PassThrough() }))
        #expect(!r.declarationProblems("misspelt").isEmpty)
        #expect(r.declarationProblems("fine").isEmpty)
        var g = GraphBuilder()
        g.node("src", "scripted-source")
        let line = #line + 1
        g.node("m", "misspelt", ["gain_dB": 6])
        g.node("f", "fine", ["sample_rate": 16000])
        g.node("sink", "collect", ["key": "k"])
        g.chain("src", "m", "f", "sink")
        do {
            _ = try g.validate(registry: r)
            Issue.record("a type with disagreeing declarations validated")
        } catch let e as GraphError {
            #expect(e.issues.allSatisfy { $0.node == "m" })
            #expect(e.issues.first?.location.line == line)
            #expect(e.issues.contains { $0.message.contains("declares its parameters inconsistently") && $0.message.contains("gain_db") })
        }
    }
}
