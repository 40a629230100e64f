/// A position in a graph file.
public struct SourceLocation: Sendable, Hashable, CustomStringConvertible {
    /// File path as given (or `<string>` / `<command line>`).
    public var file: String
    /// Line from 1 (0 when unknown).
    public var line: Int
    /// Column from 1 (0 when unknown).
    public var column: Int
    /// The value came from the command line (`--set`), not from a file.
    public var isCommandLine = false
    /// The value was declared in Swift code (``GraphBuilder``): `file` is the declaring source file,
    /// not a folder relative paths are taken from.
    public var inCode = false

    /// Creates a location.
    public init(file: String, line: Int, column: Int) {
        self.file = file
        self.line = line
        self.column = column
    }

    /// A value given on the command line; `detail` says which (`--set mic.type`).
    public static func commandLine(_ detail: String? = nil) -> SourceLocation {
        var l = SourceLocation(file: "<command line>" + (detail.map { " " + $0 } ?? ""), line: 0, column: 0)
        l.isCommandLine = true
        return l
    }

    /// A place in Swift source code (`#fileID`, `#line`, `#column`).
    public static func code(file: String, line: Int, column: Int) -> SourceLocation {
        var l = SourceLocation(file: file, line: line, column: column)
        l.inCode = true
        return l
    }

    public var description: String { line > 0 ? "\(file):\(line):\(column)" : file }
}

/// One problem found in a graph, with where it is and which node it concerns.
public struct GraphIssue: Error, Sendable, Hashable, CustomStringConvertible {
    /// The kind of problem.
    public enum Kind: String, Sendable, Hashable {
        case syntax, unknownType = "unknown_type", unknownParameter = "unknown_parameter"
        case missingParameter = "missing_parameter", invalidParameter = "invalid_parameter"
        case duplicateID = "duplicate_id", unknownNode = "unknown_node", unknownPort = "unknown_port"
        case incompatibleLink = "incompatible_link", cycle, unconnectedInput = "unconnected_input"
        case invalidLink = "invalid_link", undefinedVariable = "undefined_variable", invalidOverride = "invalid_override"
        case structure, plugin
    }
    /// The kind of problem.
    public var kind: Kind
    /// Where.
    public var location: SourceLocation
    /// The node concerned, if any.
    public var node: String?
    /// What is wrong and what was expected.
    public var message: String

    /// Creates an issue.
    public init(_ kind: Kind, at location: SourceLocation, node: String? = nil, _ message: String) {
        self.kind = kind
        self.location = location
        self.node = node
        self.message = message
    }

    /// A place in Swift source code (`#fileID`, `#line`, `#column`).
    public static func code(file: String, line: Int, column: Int) -> SourceLocation {
        var l = SourceLocation(file: file, line: line, column: column)
        l.inCode = true
        return l
    }

    public var description: String {
        "\(location): " + (node.map { "node '\(GraphValidator.shown($0))': " } ?? "") + message
    }
}

/// Every problem found in a graph, reported at once. `voicepipe` exits with code 2 on this error.
public struct GraphError: Error, Sendable, CustomStringConvertible {
    /// The problems, in file order.
    public var issues: [GraphIssue]

    /// Creates the error.
    public init(_ issues: [GraphIssue]) { self.issues = issues }

    /// A place in Swift source code (`#fileID`, `#line`, `#column`).
    public static func code(file: String, line: Int, column: Int) -> SourceLocation {
        var l = SourceLocation(file: file, line: line, column: column)
        l.inCode = true
        return l
    }

    public var description: String {
        // A hostile file can hold millions of problems: the first hundred say enough.
        let shown = issues.prefix(100).map(\.description)
        return (shown + (issues.count > 100 ? ["… and \(issues.count - 100) more problems"] : [])).joined(separator: "\n")
    }
}
