import Testing
import PipelineCore

/// `${VAR}` lands in one scalar value, whatever it holds: it never adds a key, a node or a link.
@Suite("Graph variables")
struct GraphVariableTests {
    let registry = testRegistry()

    func parse(_ yaml: String, _ env: [String: String]) -> GraphSpec {
        GraphLoader.parse(yaml, file: "g.yaml", environment: env)
    }

    func issues(_ yaml: String, _ env: [String: String]) -> [GraphIssue] {
        do {
            _ = try GraphValidator.validate(parse(yaml, env), registry: registry)
            return []
        } catch let e as GraphError {
            return e.issues
        } catch {
            Issue.record("unexpected error \(error)")
            return []
        }
    }

    /// Values that would change a graph if they were read as YAML.
    static let hostile: [String] = [
        #"x.wav", realtime: true, injected: "1"#,
        "x.wav\", count: 99, bogus: \"1",
        "k }\n  evil: { type: pass",
        "a #comment",
        "key: value",
        "a, b, c",
        "{ type: pass }",
        "[1, 2]",
        "line one\nline two\n  - three",
        "'single' and \"double\" quotes",
        "tail\\",
        "${NESTED}",
        "$$",
        "*alias &anchor !tag %directive @ `",
        "",
        " leading and trailing ",
    ]

    @Test("a value holding quotes, commas, colons, ` #`, braces or newlines is one scalar, verbatim", arguments: hostile)
    func verbatim(value: String) throws {
        for (style, yaml) in [
            ("quoted, flow", """
                nodes:
                  src: { type: scripted-source, count: 2 }
                  sink: { type: collect, key: "${KEY}" }
                links: [ "src -> sink" ]
                """),
            ("plain, block", """
                nodes:
                  src:
                    type: scripted-source
                    count: 2
                  sink:
                    type: collect
                    key: ${KEY}
                links:
                  - src -> sink
                """),
            ("single-quoted", """
                nodes:
                  src: { type: scripted-source, count: 2 }
                  sink: { type: collect, key: '${KEY}' }
                links: [ "src -> sink" ]
                """),
        ] {
            let spec = parse(yaml, ["KEY": value])
            #expect(spec.issues.isEmpty, "\(style): \(spec.issues.map(\.description))")
            #expect(spec.nodes.map(\.id).sorted() == ["sink", "src"], "\(style): nodes \(spec.nodes.map(\.id))")
            let sink = try #require(spec.nodes.first { $0.id == "sink" })
            #expect(sink.paramOrder == ["key"], "\(style): parameters \(sink.paramOrder)")
            let src = try #require(spec.nodes.first { $0.id == "src" })
            #expect(src.paramOrder == ["count"], "\(style): parameters \(src.paramOrder)")
            #expect(spec.links.count == 1)
            // A plain scalar is typed by what it holds (as YAML's core schema would type it); its text is the value.
            let got = sink.params["key"]?.value
            if style.hasPrefix("plain"), value.isEmpty {
                #expect(got == .null, "\(style)")
            } else {
                #expect(got == .string(value), "\(style): \(String(describing: got))")
            }
        }
    }

    @Test("the injection of the report adds no parameter: the path is the whole value")
    func reportedInjection() throws {
        let value = #"x.wav", realtime: true, injected: "1"#
        let spec = parse("""
            nodes:
              src: { type: scripted-source, count: 2 }
              out: { type: collect, key: "${OUT}" }
            links: [ "src -> out" ]
            """, ["OUT": value])
        let g = try GraphValidator.validate(spec, registry: registry)
        #expect(g.node("out")?.config.string("key") == value)
        #expect(g.node("out")?.config.values["injected"] == nil)
    }

    @Test("a variable in a link chain names one endpoint: its arrows add no link")
    func links() throws {
        let yaml = """
            nodes:
              src: { type: scripted-source, count: 2 }
              p: { type: pass }
              sink: { type: collect, key: k }
            links:
              - ${FROM:-src} -> ${TO}
              - p -> sink
            """
        let g = try GraphValidator.validate(parse(yaml, ["TO": "p"]), registry: registry)
        #expect(g.links.map { "\($0.fromNode)->\($0.toNode)" } == ["src->p", "p->sink"])
        let spec = parse(yaml, ["TO": "p -> sink"])
        #expect(spec.links.count == 2)
        #expect(spec.links.first?.to.node == "p -> sink")
        let list = issues(yaml, ["TO": "p -> sink"])
        #expect(list.contains { $0.kind == .unknownNode && $0.location.line == 6 && $0.location.column == 5 }, "\(list.map(\.description))")
    }

    @Test("a variable cannot add a node, whatever it holds")
    func noNewNode() {
        let spec = parse("""
            nodes:
              src: { type: scripted-source, count: ${COUNT:-3} }
              sink: { type: collect, key: k }
            links: [ "src -> sink" ]
            """, ["COUNT": "3 }\n  evil: { type: pass }\n  x: { type: pass"])
        #expect(spec.nodes.map(\.id).sorted() == ["sink", "src"])
    }

    @Test("a number from a variable is converted where it lands; a bad one is reported at its line and column")
    func numbers() throws {
        let yaml = """
            nodes:
              src: { type: scripted-source, count: "${COUNT}", rate: ${RATE:-16000} }
              sink: { type: collect, key: k }
            links: [ "src -> sink" ]
            """
        let g = try GraphValidator.validate(parse(yaml, ["COUNT": "7"]), registry: registry)
        #expect(g.node("src")?.config.int("count") == 7)
        #expect(g.node("src")?.config.int("rate") == 16000)
        let list = issues(yaml, ["COUNT": "7, rate: 8000"])
        #expect(list.contains { $0.kind == .invalidParameter && $0.location.line == 2 && $0.location.column == 33 }, "\(list.map(\.description))")
        let plain = issues(yaml, ["COUNT": "1", "RATE": "8000 # and more"])
        #expect(plain.contains { $0.kind == .invalidParameter && $0.location.line == 2 && $0.location.column == 52 }, "\(plain.map(\.description))")
    }

    @Test("columns after a reference are the file's own, however long the value")
    func columns() {
        let list = issues("""
            nodes:
              src: { type: scripted-source, count: ${COUNT}, bogus: 1 }
              sink: { type: collect, key: k }
            links: [ "src -> sink" ]
            """, ["COUNT": "1234567890123"])
        #expect(list.contains { $0.kind == .unknownParameter && $0.location.line == 2 && $0.location.column == 50 }, "\(list.map(\.description))")
    }

    @Test("an undefined variable is reported where it is written; one in a comment is not read")
    func undefined() {
        let list = issues("""
            # set ${NOT_READ} to nothing
            nodes:
              src: { type: scripted-source, count: 2 }
              sink: { type: collect, key: "x${MISSING}y" }
            links: [ "src -> sink" ]
            """, [:])
        #expect(list.count == 1, "\(list.map(\.description))")
        #expect(list.first?.kind == .undefinedVariable && list.first?.location.line == 4 && list.first?.location.column == 33)
    }

    @Test("an alias picked by a variable still works; a value that is not a name is refused")
    func aliasName() throws {
        let yaml = """
            x-sinks:
              a: &a-sink { type: collect, key: first }
              b: &b-sink { type: collect, key: second }
            nodes:
              src: { type: scripted-source, count: 2 }
              sink: *${WHICH:-a}-sink
            links: [ "src -> sink" ]
            """
        #expect(try GraphValidator.validate(parse(yaml, [:]), registry: registry).node("sink")?.config.string("key") == "first")
        #expect(try GraphValidator.validate(parse(yaml, ["WHICH": "b"]), registry: registry).node("sink")?.config.string("key") == "second")
        let list = issues(yaml, ["WHICH": "a-sink, injected: 1 } #"])
        #expect(list.contains { $0.kind == .undefinedVariable && $0.location.line == 6 && $0.location.column == 10 }, "\(list.map(\.description))")
    }

    @Test("two keys that a variable makes equal are reported")
    func duplicateKeys() {
        let spec = parse("""
            nodes:
              src: { type: scripted-source, count: 2 }
              ${ID}: { type: collect, key: k }
            links: [ "src -> sink" ]
            """, ["ID": "src"])
        #expect(spec.issues.contains { $0.kind == .duplicateID && $0.location.line == 3 }, "\(spec.issues.map(\.description))")
        #expect(spec.nodes.count == 1)
    }

    @Test("$$ is a literal $")
    func dollar() throws {
        let g = try GraphValidator.validate(parse("""
            nodes:
              src: { type: scripted-source, count: 2 }
              sink: { type: collect, key: "cost $$5 ${A}" }
            links: [ "src -> sink" ]
            """, ["A": "$$"]), registry: registry)
        #expect(g.node("sink")?.config.string("key") == "cost $5 $$")
    }
}
