/// The typed configuration of a node type: a `Decodable` value built once, at validation, from the
/// node's parameters in the graph file (after `${VAR}` substitution, `--set` and defaults).
///
/// The parameter schema — name, type and range, default, doc — is declared once, next to the
/// struct, in ``parameters``; the validator checks every value against it, fills in the defaults and
/// then decodes the struct. Swift property names map to parameter names by snake-casing
/// (`intervalMs` reads `interval_ms`); give explicit `CodingKeys` for anything else.
///
/// ```swift
/// struct GainConfiguration: NodeConfiguration {
///     var gainDb: Double
///     var clip: Bool
///     static let parameters: [ParamSpec] = [
///         ParamSpec("gain_db", .double(-60...60), default: 0, doc: "gain in dB"),
///         ParamSpec("clip", .bool, default: true, doc: "saturate instead of wrapping"),
///     ]
/// }
/// ```
///
/// A parameter with a default decodes into a non-optional property; one without a default (and not
/// `required`) decodes into an optional. A type that needs to check combinations of parameters
/// returns the problems from ``problems()``; each is reported with the node's id and location.
public protocol NodeConfiguration: Decodable, Sendable {
    /// Every parameter the node type accepts. Anything else in the YAML is an error.
    static var parameters: [ParamSpec] { get }
    /// Problems with combinations of values (each a message a user can act on). Default: none.
    func problems() -> [String]
    /// The same, for checks that look at the graph's environment variables (where a model is found, say):
    /// the validator calls this one with the variables the graph was loaded with. Default: ``problems()``.
    func problems(environment: [String: String]) -> [String]
    /// The executor class these values call for, when it depends on them (a file source paced at 1x
    /// is timing-critical, one read as fast as possible is not). Default: `nil`, the type's class.
    var executor: ExecutorClass? { get }
}

extension NodeConfiguration {
    public func problems() -> [String] { [] }
    public func problems(environment: [String: String]) -> [String] { problems() }
    public var executor: ExecutorClass? { nil }

    /// Decodes a configuration from parameter values, applying the declared defaults first.
    /// Values are checked against ``parameters``; what is wrong is thrown as a ``ConfigurationError``.
    ///
    /// For tests and embedding apps that build a node without a graph file:
    /// `let c = try VolumeNode.Configuration.decode(["interval_ms": 50])`.
    public static func decode(_ values: [String: ParamValue] = [:]) throws -> Self {
        let checked = try ParamSpec.checked(values, against: parameters)
        let c = try ParameterDecoder.decode(Self.self, from: checked)
        let more = c.problems()
        if !more.isEmpty { throw ConfigurationError(more.joined(separator: "; ")) }
        return c
    }
}

/// A node type without parameters.
public struct NoConfiguration: NodeConfiguration {
    public static let parameters: [ParamSpec] = []
    public init() {}
}

/// A configuration that cannot be used, with a message for the user. Thrown from a configuration's
/// `init(from:)` (or by ``NodeConfiguration/decode(_:)``); the validator reports it with the node's
/// id and location.
public struct ConfigurationError: Error, Sendable, CustomStringConvertible {
    /// What is wrong and what to do.
    public var message: String
    /// Creates an error.
    public init(_ message: String) { self.message = message }
    public var description: String { message }
}
