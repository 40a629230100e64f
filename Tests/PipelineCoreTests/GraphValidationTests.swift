import Testing
import PipelineCore

@Suite("Graph validation")
struct GraphValidationTests {
    let registry = testRegistry()

    func issues(_ yaml: String, env: [String: String] = [:], overrides: [Override] = []) -> [GraphIssue] {
        let spec = GraphLoader.parse(yaml, file: "g.yaml", environment: env, overrides: overrides)
        do {
            _ = try GraphValidator.validate(spec, registry: registry)
            return []
        } catch let e as GraphError {
            return e.issues
        } catch {
            Issue.record("unexpected error \(error)")
            return []
        }
    }

    func expectIssue(_ list: [GraphIssue], _ kind: GraphIssue.Kind, line: Int, column: Int, node: String? = nil,
                     sourceLocation: SourceLocation_ = #_sourceLocation) {
        let hit = list.first { $0.kind == kind && $0.location.line == line && $0.location.column == column && (node == nil || $0.node == node) }
        #expect(hit != nil, "expected \(kind) at \(line):\(column) in \(list.map(\.description))", sourceLocation: sourceLocation)
    }

    @Test("a valid graph validates, in topological order")
    func valid() throws {
        let g = try GraphValidator.validate(GraphLoader.parse("""
            version: 1
            name: ok
            nodes:
              sink: { type: collect, key: k }
              p: { type: pass }
              src: { type: scripted-source, count: 3 }
            links:
              - src -> p -> sink
            """, environment: [:]), registry: registry)
        #expect(g.nodes.map(\.id) == ["src", "p", "sink"])
        #expect(g.links.count == 2)
        #expect(g.links[0].overflow == .block && g.links[0].capacity == GraphLoader.defaultCapacity)
    }

    @Test("YAML syntax errors carry line and column")
    func syntax() {
        let list = issues("nodes:\n  a: { type: [\n")
        #expect(list.count == 1)
        #expect(list[0].kind == .syntax && list[0].location.line == 3)
    }

    @Test("every problem is reported at once, each with file:line:column and node id")
    func allAtOnce() {
        let list = issues("""
            version: 1
            nodes:
              src: { type: scripted-source, bogus: 1 }
              typo: { type: scripted-sorce }
              bad: { type: scripted-source, count: many }
              sink: { type: collect }
              lonely: { type: pass }
            links:
              - src -> sink.nope
              - src -> ghost
            """)
        expectIssue(list, .unknownParameter, line: 3, column: 33, node: "src")
        expectIssue(list, .unknownType, line: 4, column: 17, node: "typo")
        expectIssue(list, .invalidParameter, line: 5, column: 33, node: "bad")
        expectIssue(list, .missingParameter, line: 6, column: 3, node: "sink")
        expectIssue(list, .unconnectedInput, line: 7, column: 3, node: "lonely")
        expectIssue(list, .unknownPort, line: 9, column: 5, node: "sink")
        expectIssue(list, .unknownNode, line: 10, column: 5, node: "ghost")
        #expect(list.allSatisfy { $0.location.file == "g.yaml" })
        #expect(list.first { $0.kind == .unknownType }?.message.contains("did you mean 'scripted-source'") == true)
    }

    @Test("duplicate ids are reported and the rest is still checked")
    func duplicate() {
        let list = issues("""
            nodes:
              a: { type: scripted-source }
              a: { type: scripted-source }
              b: { type: nonsense }
            links: []
            """)
        expectIssue(list, .duplicateID, line: 3, column: 3, node: "a")
        expectIssue(list, .unknownType, line: 4, column: 14, node: "b")
    }

    @Test("a parameter repeated in one node is reported there and leaves the next node whole")
    func repeatedParameter() {
        let list = issues("""
            nodes:
              a:
                type: scripted-source
                type: scripted-source
              b:
                type: nonsense
              c:
                type: scripted-source
              a: { type: scripted-source }
            links: []
            """)
        let repeated = list.filter { $0.kind == .duplicateID }
        #expect(repeated.map { "\($0.location.line):\($0.location.column) \($0.node ?? "-")" }.sorted() == ["4:5 a", "9:3 a"])
        expectIssue(list, .unknownType, line: 6, column: 11, node: "b")
        // Node c keeps its type: the repeat in `a` renamed nothing outside `a`.
        #expect(!list.contains { $0.node == "c" })
        #expect(list.count == 3)
    }

    @Test("a parameter repeated in a one-line node is reported at the repeat, and the rest is still checked")
    func repeatedFlowParameter() {
        let list = issues("""
            nodes:
              a: { type: scripted-source, count: 2, count: 3, count: 4, bogus: 1 }
              b: { type: nonsense }
            links: []
            """)
        let repeated = list.filter { $0.kind == .duplicateID }
        #expect(repeated.map { "\($0.location.line):\($0.location.column) \($0.node ?? "-")" } == ["2:41 a", "2:51 a"])
        // Positions after the repeats on the same line are still those of the file.
        expectIssue(list, .unknownParameter, line: 2, column: 61, node: "a")
        expectIssue(list, .unknownType, line: 3, column: 14, node: "b")
    }

    @Test("repeats the parser sees however they are written: quoted either way, in a flow mapping across lines, a quoted node id")
    func repeatsAsTheParserSeesThem() {
        let list = issues("""
            nodes:
              a: { type: scripted-source, "count": 2,
                   'count': 3 }
              b: {
                type: pass,
                type: pass
              }
              "c": { type: collect, key: k }
              c: { type: collect, key: k }
            links: [ "a -> b -> c" ]
            """)
        let repeated = list.filter { $0.kind == .duplicateID }
        #expect(repeated.map { "\($0.location.line):\($0.location.column) \($0.node ?? "-")" } == ["3:8 a", "6:5 b", "9:3 c"], "\(list)")
        // Nothing else is wrong: each node kept its first value and the links resolve.
        #expect(list.count == 3, "\(list)")
    }

    @Test("links between incompatible kinds or formats are refused")
    func incompatible() {
        let list = issues("""
            nodes:
              src: { type: scripted-source }
              txt: { type: texter }
              src8: { type: scripted-source, rate: 8000 }
              only16: { type: mono16k }
              s1: { type: collect, key: a }
              s2: { type: collect, key: b }
            links:
              - src -> txt
              - src8 -> only16
              - txt -> s1
              - only16 -> s2
            """)
        expectIssue(list, .incompatibleLink, line: 9, column: 5, node: "txt")
        expectIssue(list, .incompatibleLink, line: 10, column: 5, node: "only16")
        #expect(list.first { $0.node == "only16" }?.message.contains("8000 Hz") == true)
    }

    @Test("cycles are refused")
    func cycle() {
        let list = issues("""
            nodes:
              a: { type: pass }
              b: { type: pass }
            links:
              - a -> b
              - b -> a
            """)
        #expect(list.contains { $0.kind == .cycle })
    }

    @Test("bad link settings: unknown overflow, zero capacity")
    func linkSettings() {
        let list = issues("""
            nodes:
              src: { type: scripted-source }
              sink: { type: collect, key: k }
            links:
              - { from: src, to: sink, capacity: 0, overflow: sometimes }
            """)
        expectIssue(list, .invalidLink, line: 5, column: 38)
        expectIssue(list, .invalidLink, line: 5, column: 51)
    }

    @Test("${VAR} and ${VAR:-default} are substituted; an unset variable without default is an error")
    func variables() throws {
        let yaml = """
            nodes:
              src: { type: "${KIND:-scripted-source}", count: ${COUNT} }
              sink: { type: collect, key: k }
            links: [ "src -> sink" ]
            """
        let g = try GraphValidator.validate(GraphLoader.parse(yaml, environment: ["COUNT": "7"]), registry: registry)
        #expect(g.node("src")?.config.int("count") == 7)
        let list = issues(yaml)
        expectIssue(list, .undefinedVariable, line: 2, column: 51)
    }

    @Test("--set overrides parameters and swaps types; unknown ids are reported")
    func overrides() throws {
        let yaml = """
            nodes:
              src: { type: scripted-source, count: 3 }
              p: { type: flaky }
              sink: { type: collect, key: k }
            links: [ "src -> p -> sink" ]
            """
        let g = try GraphValidator.validate(GraphLoader.parse(yaml, environment: [:], overrides: [
            Override(node: "src", key: "count", value: "9"), Override(node: "p", key: "type", value: "pass"),
        ]), registry: registry)
        #expect(g.node("src")?.config.int("count") == 9)
        #expect(g.node("p")?.descriptor.type == "pass")
        let list = issues(yaml, overrides: [Override(node: "nope", key: "x", value: "1")])
        #expect(list.contains { $0.kind == .invalidOverride && $0.node == "nope" })
        #expect(throws: GraphError.self) { try Override(parsing: "novalue") }
    }
}

typealias SourceLocation_ = Testing.SourceLocation
