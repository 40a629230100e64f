/// Decodes a ``NodeConfiguration`` from checked parameter values (`Decoder` over ``ParamValue``).
///
/// Keys: a property's name is looked up as written, then snake-cased (`frameMs` → `frame_ms`).
/// Numbers convert between integer and floating point only when exact; a property of type
/// ``ParamValue`` receives the value as written (for mappings whose values keep their YAML types).
public enum ParameterDecoder {
    /// Decodes `type` from `values`.
    public static func decode<T: Decodable>(_ type: T.Type, from values: [String: ParamValue]) throws -> T {
        try T(from: ParamValueDecoder(value: .map(values), codingPath: []))
    }

    /// Where a configuration's two declarations of its parameters disagree: the ``ParamSpec`` list the
    /// validator checks values against, and the properties its `init(from:)` reads. Found by decoding it
    /// once from a value for every declared parameter (its default, or one its type accepts) and noting
    /// the names read. A name read but not declared never receives a value (a misspelt parameter
    /// decodes as nil or its property's default); a name declared but not read is accepted and ignored.
    public static func schemaProblems<C: NodeConfiguration>(_ type: C.Type, parameters: [ParamSpec]? = nil) -> [String] {
        let specs = parameters ?? C.parameters
        let declared = Set(specs.map(\.name))
        var values: [String: ParamValue] = [:]
        for p in specs { values[p.name] = p.defaultValue ?? p.type.example }
        let recorder = KeyRecorder()
        let decoded = (try? C(from: ParamValueDecoder(value: .map(values), codingPath: [], recorder: recorder))) != nil
        let read = Set(recorder.keys.withLock { $0 }.map(snakeCase))
        var problems: [String] = []
        for name in read.subtracting(declared).sorted() {
            problems.append("the configuration reads '\(name)', which no parameter declares (misspelt, or missing from `parameters`)")
        }
        // A configuration whose decoding stopped early (it refuses the example values) may not have read everything.
        if decoded {
            let raw = Set(recorder.keys.withLock { $0 })
            let ignored = Set(specs.filter(\.ignored).map(\.name))
            for name in declared.subtracting(read).subtracting(raw).subtracting(ignored).sorted() {
                problems.append("parameter '\(name)' is declared but the configuration never reads it (misspelt, or a property missing)")
            }
        }
        return problems
    }

    /// `frameMs` → `frame_ms`; names without capitals are unchanged.
    static func snakeCase(_ name: String) -> String {
        guard name.contains(where: \.isUppercase) else { return name }
        var out = ""
        for c in name {
            if c.isUppercase { out += "_" + c.lowercased() } else { out.append(c) }
        }
        return out
    }
}

struct ParamCodingKey: CodingKey {
    var stringValue: String
    var intValue: Int?
    init(stringValue: String) { self.stringValue = stringValue }
    init(intValue: Int) { self.stringValue = String(intValue); self.intValue = intValue }
}

/// The top-level names a configuration's decoding looked up (``ParameterDecoder/schemaProblems(_:)``).
final class KeyRecorder: Sendable {
    let keys = LockedValue<Set<String>>([])
}

struct ParamValueDecoder: Decoder {
    let value: ParamValue
    let codingPath: [any CodingKey]
    /// Notes the names looked up at the top level, when checking a configuration's declarations.
    var recorder: KeyRecorder? = nil
    var userInfo: [CodingUserInfoKey: Any] { [:] }

    func container<Key: CodingKey>(keyedBy type: Key.Type) throws -> KeyedDecodingContainer<Key> {
        guard case .map(let m) = value else {
            throw DecodingError.typeMismatch([String: ParamValue].self, .init(codingPath: codingPath, debugDescription: "expected a mapping, got \(value.typeName)"))
        }
        return KeyedDecodingContainer(KeyedParams<Key>(map: m, codingPath: codingPath, recorder: codingPath.isEmpty ? recorder : nil))
    }

    func unkeyedContainer() throws -> any UnkeyedDecodingContainer {
        switch value {
        case .list(let l): return UnkeyedParams(list: l, codingPath: codingPath)
        case .null: return UnkeyedParams(list: [], codingPath: codingPath)
        default:
            throw DecodingError.typeMismatch([ParamValue].self, .init(codingPath: codingPath, debugDescription: "expected a list, got \(value.typeName)"))
        }
    }

    func singleValueContainer() throws -> any SingleValueDecodingContainer { SingleParam(value: value, codingPath: codingPath) }
}

/// Conversions shared by the three container kinds.
enum ParamScalar {
    static func mismatch(_ type: Any.Type, _ value: ParamValue, _ path: [any CodingKey]) -> DecodingError {
        .typeMismatch(type, .init(codingPath: path, debugDescription: "expected \(type), got \(value.typeName) \(value)"))
    }

    static func decode<T: Decodable>(_ type: T.Type, _ value: ParamValue, _ path: [any CodingKey]) throws -> T {
        if T.self == ParamValue.self { return value as! T }
        if T.self == String.self {
            switch value {
            case .string(let s): return s as! T
            case .int, .double, .bool: return value.description as! T
            default: throw mismatch(T.self, value, path)
            }
        }
        if T.self == Bool.self {
            if case .bool(let b) = value { return b as! T }
            throw mismatch(T.self, value, path)
        }
        if T.self == Double.self {
            switch value {
            case .double(let d): return d as! T
            case .int(let i): return Double(i) as! T
            default: throw mismatch(T.self, value, path)
            }
        }
        if T.self == Int.self {
            switch value {
            case .int(let i): return i as! T
            case .double(let d):
                if let i = Int(exactly: d) { return i as! T }
                throw mismatch(T.self, value, path)
            default: throw mismatch(T.self, value, path)
            }
        }
        return try T(from: ParamValueDecoder(value: value, codingPath: path))
    }
}

struct KeyedParams<Key: CodingKey>: KeyedDecodingContainerProtocol {
    let map: [String: ParamValue]
    let codingPath: [any CodingKey]
    var recorder: KeyRecorder? = nil

    var allKeys: [Key] { map.keys.compactMap { Key(stringValue: $0) } }

    private func lookup(_ key: Key) -> ParamValue? {
        if let recorder { _ = recorder.keys.withLock { $0.insert(key.stringValue) } }
        if let v = map[key.stringValue] { return v }
        return map[ParameterDecoder.snakeCase(key.stringValue)]
    }

    func contains(_ key: Key) -> Bool { lookup(key) != nil }

    func decodeNil(forKey key: Key) throws -> Bool {
        switch lookup(key) {
        case nil, .null?: true
        default: false
        }
    }

    func decode<T: Decodable>(_ type: T.Type, forKey key: Key) throws -> T {
        guard let v = lookup(key) else {
            throw DecodingError.keyNotFound(key, .init(codingPath: codingPath, debugDescription: "parameter '\(ParameterDecoder.snakeCase(key.stringValue))' has no value and no default"))
        }
        return try ParamScalar.decode(type, v, codingPath + [key])
    }

    func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type, forKey key: Key) throws -> KeyedDecodingContainer<NestedKey> {
        try ParamValueDecoder(value: lookup(key) ?? .map([:]), codingPath: codingPath + [key]).container(keyedBy: type)
    }

    func nestedUnkeyedContainer(forKey key: Key) throws -> any UnkeyedDecodingContainer {
        try ParamValueDecoder(value: lookup(key) ?? .list([]), codingPath: codingPath + [key]).unkeyedContainer()
    }

    func superDecoder() throws -> any Decoder { ParamValueDecoder(value: .map(map), codingPath: codingPath) }
    func superDecoder(forKey key: Key) throws -> any Decoder { ParamValueDecoder(value: lookup(key) ?? .null, codingPath: codingPath + [key]) }
}

struct UnkeyedParams: UnkeyedDecodingContainer {
    let list: [ParamValue]
    let codingPath: [any CodingKey]
    var currentIndex = 0
    var count: Int? { list.count }
    var isAtEnd: Bool { currentIndex >= list.count }

    init(list: [ParamValue], codingPath: [any CodingKey]) {
        self.list = list
        self.codingPath = codingPath
    }

    private mutating func next() throws -> (ParamValue, [any CodingKey]) {
        guard !isAtEnd else {
            throw DecodingError.valueNotFound(ParamValue.self, .init(codingPath: codingPath, debugDescription: "list ended"))
        }
        defer { currentIndex += 1 }
        return (list[currentIndex], codingPath + [ParamCodingKey(intValue: currentIndex)])
    }

    mutating func decodeNil() throws -> Bool {
        if !isAtEnd, list[currentIndex] == .null { currentIndex += 1; return true }
        return false
    }

    mutating func decode<T: Decodable>(_ type: T.Type) throws -> T {
        let (v, path) = try next()
        return try ParamScalar.decode(type, v, path)
    }

    mutating func nestedContainer<NestedKey: CodingKey>(keyedBy type: NestedKey.Type) throws -> KeyedDecodingContainer<NestedKey> {
        let (v, path) = try next()
        return try ParamValueDecoder(value: v, codingPath: path).container(keyedBy: type)
    }

    mutating func nestedUnkeyedContainer() throws -> any UnkeyedDecodingContainer {
        let (v, path) = try next()
        return try ParamValueDecoder(value: v, codingPath: path).unkeyedContainer()
    }

    mutating func superDecoder() throws -> any Decoder {
        let (v, path) = try next()
        return ParamValueDecoder(value: v, codingPath: path)
    }
}

struct SingleParam: SingleValueDecodingContainer {
    let value: ParamValue
    let codingPath: [any CodingKey]
    func decodeNil() -> Bool { value == .null }
    func decode<T: Decodable>(_ type: T.Type) throws -> T { try ParamScalar.decode(type, value, codingPath) }
}

extension ParamValue: Decodable {
    /// Decodes a value as written (from JSON or from a graph's parameters).
    public init(from decoder: any Decoder) throws {
        if let d = decoder as? ParamValueDecoder { self = d.value; return }
        let c = try decoder.singleValueContainer()
        if c.decodeNil() { self = .null }
        else if let b = try? c.decode(Bool.self) { self = .bool(b) }
        else if let i = try? c.decode(Int.self) { self = .int(i) }
        else if let d = try? c.decode(Double.self) { self = .double(d) }
        else if let s = try? c.decode(String.self) { self = .string(s) }
        else if let l = try? c.decode([ParamValue].self) { self = .list(l) }
        else { self = .map(try c.decode([String: ParamValue].self)) }
    }
}

extension ParamValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}
