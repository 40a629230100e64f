import Foundation

/// A field value of an event: what JSON can hold.
public enum EventValue: Sendable, Hashable {
    case string(String)
    case int(Int64)
    case double(Double)
    case bool(Bool)
    case array([EventValue])
    case object([String: EventValue])
    case null
}

extension EventValue: ExpressibleByStringLiteral, ExpressibleByIntegerLiteral, ExpressibleByFloatLiteral, ExpressibleByBooleanLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(Int64(value)) }
    public init(floatLiteral value: Double) { self = .double(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension EventValue {
    /// The string, if this is a string.
    public var stringValue: String? { if case .string(let s) = self { s } else { nil } }
    /// The number as a double, if this is a number.
    public var doubleValue: Double? {
        switch self {
        case .double(let d): d
        case .int(let i): Double(i)
        default: nil
        }
    }
    /// The integer, if this is an integer.
    public var intValue: Int64? { if case .int(let i) = self { i } else { nil } }
    /// The boolean, if this is a boolean.
    public var boolValue: Bool? { if case .bool(let b) = self { b } else { nil } }
}

/// A named event with fields, as written by `jsonl-sink`:
/// `{"ts": <seconds since start>, "node": "<id>", "event": "<name>", ...fields}`.
public struct Event: Sendable {
    /// Event name, e.g. `speech_start`, `transcript`, `error` (``EventName``).
    public var name: EventName
    /// Id of the node that emitted it (stamped by the runtime when empty).
    public var node: String
    /// Seconds since the pipeline started (stamped by the runtime when nil).
    public var ts: Double?
    /// Fields, in the order they were given.
    public var fields: [(String, EventValue)]

    /// Creates an event.
    public init(_ name: EventName, node: String = "", ts: Double? = nil, fields: [(String, EventValue)] = []) {
        self.name = name
        self.node = node
        self.ts = ts
        self.fields = fields
    }

    /// The value of a field.
    public subscript(_ key: String) -> EventValue? {
        fields.first(where: { $0.0 == key })?.1
    }

    /// An `error` event: `{"event":"error","node":..,"code":..,"message":..}`.
    public static func error(code: String, message: String) -> Event {
        Event(.error, fields: [("code", .string(code)), ("message", .string(message))])
    }

    /// An `error` event about one flow: `voice_id` names it (omitted when `nil`).
    public static func error(code: String, message: String, voiceID: String?) -> Event {
        var e = error(code: code, message: message)
        if let voiceID { e.fields.append(("voice_id", .string(voiceID))) }
        return e
    }

    /// The event as one line of JSON (no trailing newline).
    public func jsonLine() -> String {
        var out = "{"
        out += "\"ts\":" + EventJSON.number(((ts ?? 0) * 1000).rounded() / 1000)
        out += ",\"node\":" + EventJSON.quote(node)
        out += ",\"event\":" + EventJSON.quote(name.rawValue)
        for (k, v) in fields where k != "ts" && k != "node" && k != "event" {
            out += "," + EventJSON.quote(k) + ":" + EventJSON.encode(v)
        }
        out += "}"
        return out
    }
}

/// Minimal, allocation-light JSON writing for events.
public enum EventJSON {
    /// A JSON string literal.
    public static func quote(_ s: String) -> String {
        var out = "\""
        out.reserveCapacity(s.utf8.count + 2)
        for scalar in s.unicodeScalars {
            switch scalar {
            case "\"": out += "\\\""
            case "\\": out += "\\\\"
            case "\n": out += "\\n"
            case "\r": out += "\\r"
            case "\t": out += "\\t"
            default:
                // C0/C1 controls, DEL and bidi overrides are escaped: the JSON means the same, and a
                // terminal showing it is not driven by a server's text.
                if scalar.value < 0x20 || TerminalText.needsEscape(scalar, keepNewlines: false) {
                    out += String(format: "\\u%04x", scalar.value)
                } else {
                    out.unicodeScalars.append(scalar)
                }
            }
        }
        out += "\""
        return out
    }

    /// A JSON number (non-finite values become null).
    public static func number(_ d: Double) -> String {
        guard d.isFinite else { return "null" }
        if d == d.rounded(), abs(d) < 1e15 { return String(Int64(d)) }
        return String(d)
    }

    /// Any value.
    public static func encode(_ v: EventValue) -> String {
        switch v {
        case .string(let s): return quote(s)
        case .int(let i): return String(i)
        case .double(let d): return number(d)
        case .bool(let b): return b ? "true" : "false"
        case .null: return "null"
        case .array(let a): return "[" + a.map(encode).joined(separator: ",") + "]"
        case .object(let o): return "{" + o.keys.sorted().map { quote($0) + ":" + encode(o[$0]!) }.joined(separator: ",") + "}"
        }
    }
}
