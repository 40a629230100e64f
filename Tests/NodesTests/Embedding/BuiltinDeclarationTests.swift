import Foundation
import Testing
import PipelineCore
@testable import Nodes

/// Every built-in node type's parameter list agrees with its configuration, and the types that declare
/// themselves fusable are the frame processors.
@Suite("Built-in declarations")
struct BuiltinDeclarationTests {
    @Test("no built-in type reads a parameter it does not declare, or declares one it never reads")
    func parametersAgree() {
        let registry = BuiltinNodes.registry()
        var problems: [String] = []
        for d in registry.all {
            for p in registry.declarationProblems(d.type) { problems.append("\(d.type): \(p)") }
        }
        #expect(problems.isEmpty, "\(problems.joined(separator: "\n"))")
        #expect(registry.all.count > 30)
    }

    @Test("the built-in fusable types are the DSP and codec frame processors")
    func fusableTypes() {
        let fusable = Set(BuiltinNodes.registry().all.filter(\.fusable).map(\.type))
        #expect(fusable.isSuperset(of: ["volume", "resample", "slicer", "opus-encode", "opus-decode"]), "\(fusable.sorted())")
        #expect(!fusable.contains("file-source") && !fusable.contains("jsonl-sink") && !fusable.contains("asr"))
    }
}
