/// A parameter value as written in the graph file (after `${VAR}` substitution and `--set`).
public indirect enum ParamValue: Sendable, Hashable, CustomStringConvertible {
    case string(String)
    case int(Int)
    case double(Double)
    case bool(Bool)
    case list([ParamValue])
    case map([String: ParamValue])
    case null

    public var description: String {
        switch self {
        case .string(let s): s
        case .int(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): String(b)
        case .list(let l): "[" + l.map(\.description).joined(separator: ", ") + "]"
        case .map(let m): "{" + m.keys.sorted().map { "\($0): \(m[$0]!)" }.joined(separator: ", ") + "}"
        case .null: "null"
        }
    }

    /// Short name of the value's type, for error messages.
    public var typeName: String {
        switch self {
        case .string: "string"
        case .int: "integer"
        case .double: "number"
        case .bool: "boolean"
        case .list: "list"
        case .map: "mapping"
        case .null: "null"
        }
    }
}

/// The type a parameter accepts.
public enum ParamType: Sendable, Hashable, CustomStringConvertible {
    case string
    /// A file to read (a model, an audio file, a grammar). Written relative, it is taken from the graph
    /// file's folder when the file is there, else from the working directory (as `--set` values are).
    case path
    case int(ClosedRange<Int>? = nil)
    case double(ClosedRange<Double>? = nil)
    case bool
    /// One of a fixed set of strings.
    case choice([String])
    /// A mapping of strings to scalars (e.g. HTTP headers, extra query parameters).
    case stringMap
    /// A list of strings.
    case stringList
    /// Any mapping (checked by the node).
    case map

    public static var int: ParamType { .int(nil) }
    /// An integer from `r.lowerBound` up.
    public static func int(_ r: PartialRangeFrom<Int>) -> ParamType { .int(r.lowerBound...Int.max) }
    public static var double: ParamType { .double(nil) }

    public var description: String {
        switch self {
        case .string: return "string"
        case .path: return "path"
        case .int(let r): return r.map { "integer in \($0.lowerBound)...\($0.upperBound)" } ?? "integer"
        case .double(let r): return r.map { "number in \($0.lowerBound)...\($0.upperBound)" } ?? "number"
        case .bool: return "boolean"
        case .choice(let c): return "one of " + c.joined(separator: " | ")
        case .stringMap: return "mapping of strings"
        case .stringList: return "list of strings"
        case .map: return "mapping"
        }
    }

    /// Checks `value` and returns it normalized (an integer given for a number becomes a double),
    /// or a message saying what was expected.
    public func check(_ value: ParamValue) -> Result<ParamValue, ParamTypeError> {
        switch (self, value) {
        case (.string, .string), (.path, .string): return .success(value)
        case (.string, .int(let i)): return .success(.string(String(i)))
        case (.string, .double(let d)): return .success(.string(String(d)))
        case (.int(let range), .int(let i)):
            if let range, !range.contains(i) { return .failure(.init("expected \(self), got \(i)")) }
            return .success(value)
        case (.int(let range), .double(let d)) where Int(exactly: d) != nil:
            let i = Int(exactly: d)!
            if let range, !range.contains(i) { return .failure(.init("expected \(self), got \(i)")) }
            return .success(.int(i))
        case (.double(let range), .int(let i)):
            if let range, !range.contains(Double(i)) { return .failure(.init("expected \(self), got \(i)")) }
            return .success(.double(Double(i)))
        case (.double(let range), .double(let d)):
            if let range, !range.contains(d) { return .failure(.init("expected \(self), got \(d)")) }
            return .success(value)
        case (.bool, .bool): return .success(value)
        case (.choice(let options), .string(let s)):
            if options.contains(s) { return .success(value) }
            return .failure(.init("expected \(self), got \"\(s)\""))
        case (.choice(let options), .int(let i)) where options.contains(String(i)):
            // Enumerations that list numbers accept them as YAML numbers too (`driver_type: 2`).
            return .success(.string(String(i)))
        case (.choice(let options), .double(let d)) where Int(exactly: d).map { options.contains(String($0)) } ?? false:
            return .success(.string(String(Int(exactly: d)!)))
        case (.choice(let options), .bool(let b)) where options.contains(String(b)):
            return .success(.string(String(b)))
        case (.stringMap, .map(let m)):
            for (k, v) in m {
                switch v {
                case .string, .int, .double, .bool: continue
                default: return .failure(.init("expected \(self), but \"\(k)\" is a \(v.typeName)"))
                }
            }
            return .success(value)
        case (.stringList, .list(let l)):
            if l.allSatisfy({ if case .string = $0 { true } else { false } }) { return .success(value) }
            return .failure(.init("expected \(self)"))
        case (.stringList, .string(let s)):
            return .success(.list([.string(s)]))
        case (.map, .map): return .success(value)
        default:
            return .failure(.init("expected \(self), got \(value.typeName) \(value)"))
        }
    }
}

/// Why a parameter value was refused.
public struct ParamTypeError: Error, Sendable, Hashable {
    /// What was expected and what was found.
    public var message: String
    init(_ message: String) { self.message = message }
}

extension ParamType {
    /// A value of this type (for checking a configuration's declarations, not for use).
    var example: ParamValue {
        switch self {
        case .string, .path: .string("x")
        case .int(let r): .int(r?.lowerBound ?? 0)
        case .double(let r): .double(r?.lowerBound ?? 0)
        case .bool: .bool(false)
        case .choice(let c): .string(c.first ?? "")
        case .stringMap, .map: .map([:])
        case .stringList: .list([])
        }
    }
}

/// One parameter of a node type: name, type, default and a doc string for `voicepipe nodes`.
public struct ParamSpec: Sendable, Hashable {
    /// Name as written in YAML.
    public var name: String
    /// Accepted type.
    public var type: ParamType
    /// Default; `nil` with `required: false` means "absent unless given".
    public var defaultValue: ParamValue?
    /// Must be given.
    public var required: Bool
    /// One line for `voicepipe nodes`.
    public var doc: String
    /// Never printed (secrets such as keys and tokens).
    public var secret: Bool
    /// Accepted and checked, but read by nothing (so that one node type can stand in for another that
    /// takes it: a file sink for a loudspeaker). The configuration has no property for it.
    public var ignored: Bool

    /// Creates a parameter specification.
    public init(_ name: String, _ type: ParamType, default defaultValue: ParamValue? = nil, required: Bool = false, secret: Bool = false,
                ignored: Bool = false, doc: String) {
        self.name = name
        self.type = type
        self.defaultValue = defaultValue
        self.required = required
        self.doc = doc
        self.secret = secret
        self.ignored = ignored
    }
}

extension ParamSpec {
    /// Checks `values` against `specs` and fills in defaults; throws every problem at once.
    /// (The graph validator does the same with file locations; this serves code that builds
    /// configurations directly, such as tests and embedding apps.)
    public static func checked(_ values: [String: ParamValue], against specs: [ParamSpec]) throws -> [String: ParamValue] {
        var checked: [String: ParamValue] = [:]
        var problems: [String] = []
        for key in values.keys.sorted() {
            guard let spec = specs.first(where: { $0.name == key }) else {
                problems.append("unknown parameter '\(key)'; accepted: \(specs.map(\.name).joined(separator: ", "))")
                continue
            }
            switch spec.type.check(values[key]!) {
            case .success(let v): checked[key] = v
            case .failure(let e): problems.append("parameter '\(key)': \(e.message)")
            }
        }
        for p in specs where checked[p.name] == nil {
            if let d = p.defaultValue { checked[p.name] = d } else if p.required { problems.append("missing required parameter '\(p.name)'") }
        }
        if !problems.isEmpty { throw ConfigurationError(problems.joined(separator: "; ")) }
        return checked
    }
}

/// The validated parameters of one node, with defaults filled in.
///
/// Values here were checked against the node type's ``ParamSpec``s at load time, so the typed
/// accessors only fall back when a parameter is absent and has no default.
public struct NodeConfig: Sendable {
    /// The node's id in the graph.
    public var id: String
    /// The node type.
    public var type: String
    /// Parameter values (defaults applied), without `type` and `restart`.
    public var values: [String: ParamValue]

    /// Creates a configuration.
    public init(id: String, type: String, values: [String: ParamValue]) {
        self.id = id
        self.type = type
        self.values = values
    }

    /// True when the parameter has a value.
    public func has(_ key: String) -> Bool {
        if let v = values[key], v != .null { return true }
        return false
    }

    /// A string parameter.
    public func string(_ key: String) -> String? {
        switch values[key] {
        case .string(let s): s
        case .int(let i): String(i)
        case .double(let d): String(d)
        case .bool(let b): String(b)
        default: nil
        }
    }
    /// A string parameter with a fallback.
    public func string(_ key: String, default d: String) -> String { string(key) ?? d }

    /// An integer parameter.
    public func int(_ key: String) -> Int? {
        switch values[key] {
        case .int(let i): i
        case .double(let d): Int(exactly: d)
        case .string(let s): Int(s)
        default: nil
        }
    }
    /// An integer parameter with a fallback.
    public func int(_ key: String, default d: Int) -> Int { int(key) ?? d }

    /// A number parameter.
    public func double(_ key: String) -> Double? {
        switch values[key] {
        case .int(let i): Double(i)
        case .double(let d): d
        case .string(let s): Double(s)
        default: nil
        }
    }
    /// A number parameter with a fallback.
    public func double(_ key: String, default d: Double) -> Double { double(key) ?? d }

    /// A boolean parameter.
    public func bool(_ key: String) -> Bool? {
        switch values[key] {
        case .bool(let b): b
        case .string(let s): ["true", "yes", "on", "1"].contains(s.lowercased())
        case .int(let i): i != 0
        default: nil
        }
    }
    /// A boolean parameter with a fallback.
    public func bool(_ key: String, default d: Bool) -> Bool { bool(key) ?? d }

    /// A mapping of strings (e.g. headers).
    public func stringMap(_ key: String) -> [String: String] {
        guard case .map(let m)? = values[key] else { return [:] }
        var out: [String: String] = [:]
        for (k, v) in m { out[k] = v.description }
        return out
    }

    /// A list of strings.
    public func stringList(_ key: String) -> [String] {
        switch values[key] {
        case .list(let l): l.map(\.description)
        case .string(let s): [s]
        default: []
        }
    }
}
