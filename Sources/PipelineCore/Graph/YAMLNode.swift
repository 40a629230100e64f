import Yams

/// A composed YAML document node with its position, for the configuration files other than graphs
/// (`voicepipe serve`'s): the project's one YAML parser (libyaml through Yams) lives here, in
/// libPipelineCore.so, so that no other module links a second copy of it.
public struct YAMLNode {
    let node: Yams.Node

    /// Where a node starts (1-based line and column, as in every message).
    public struct Mark: Sendable, Hashable {
        public var line: Int
        public var column: Int
    }

    /// A scalar's text.
    public struct Scalar: Sendable, Hashable {
        public var string: String
    }

    /// A mapping: its pairs in document order, and look-up by key text.
    public struct Mapping: Sequence {
        let pairs: [(key: YAMLNode, value: YAMLNode)]
        public func makeIterator() -> IndexingIterator<[(key: YAMLNode, value: YAMLNode)]> { pairs.makeIterator() }
        public subscript(key: String) -> YAMLNode? { pairs.first { $0.key.string == key }?.value }
        public var count: Int { pairs.count }
    }

    /// Parses `yaml` into its root node (nil for an empty document); throws on a syntax error, the
    /// error's description naming the line and column.
    public static func compose(yaml: String) throws -> YAMLNode? {
        try Yams.compose(yaml: yaml).map(YAMLNode.init(node:))
    }

    /// Parses `yaml` and substitutes its `${VAR}` references into the scalars they stand in (keys too),
    /// as a graph's are (``GraphVariables``): a value never changes the document's structure. Undefined
    /// variables are added to `issues`; throws on a syntax error.
    public static func compose(yaml: String, file: String, environment: [String: String], issues: inout [GraphIssue]) throws -> YAMLNode? {
        var variables = GraphVariables(yaml, file: file, environment: environment, issues: &issues)
        guard let root = try Yams.compose(yaml: variables.text) else { return nil }
        return YAMLNode(node: variables.substitute(root, issues: &issues))
    }

    public var mark: Mark? { node.mark.map { Mark(line: $0.line, column: $0.column) } }
    public var scalar: Scalar? { node.scalar.map { Scalar(string: $0.string) } }
    /// A scalar's text; nil for a mapping or a sequence.
    public var string: String? { node.string }
    public var mapping: Mapping? { node.mapping.map { m in Mapping(pairs: m.map { (YAMLNode(node: $0.key), YAMLNode(node: $0.value)) }) } }
    public var sequence: [YAMLNode]? { node.sequence.map { $0.map(YAMLNode.init(node:)) } }
}
