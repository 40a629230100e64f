import Foundation

/// One event of the Wyoming protocol (Home Assistant's voice protocol): a type, a JSON object of
/// data and an optional binary payload (PCM for `audio-chunk`).
///
/// On the wire each event is a one-line JSON header (`type`, optional inline `data`, `data_length`,
/// `payload_length`, `version`) ending in `\n`, then `data_length` bytes of JSON data, then
/// `payload_length` bytes of payload. Data given both inline and as a block is merged, the block
/// winning.
public struct WyomingEvent: Sendable, Equatable {
    /// Event type (`audio-chunk`, `transcript`, ...).
    public var type: String
    /// The event's data as a JSON object (serialized).
    public var data: Data
    /// Binary payload.
    public var payload: [UInt8]

    /// The protocol version written in headers.
    public static let version = "1.5.2"

    /// Creates an event from JSON-compatible data.
    public init(type: String, data: [String: any Sendable] = [:], payload: [UInt8] = []) {
        self.type = type
        self.data = data.isEmpty ? Data() : ((try? JSONSerialization.data(withJSONObject: data, options: [.sortedKeys])) ?? Data())
        self.payload = payload
    }

    package init(type: String, rawData: Data, payload: [UInt8]) {
        self.type = type
        self.data = rawData
        self.payload = payload
    }

    /// The data decoded once into `T` (fields absent, null or of another type decode as nil in an
    /// all-optional `T`); nil when the data is not an object of that shape.
    public func decode<T: Decodable>(_ type: T.Type) -> T? {
        try? JSONDecoder().decode(T.self, from: data.isEmpty ? Data("{}".utf8) : data)
    }

    /// The bytes of the event on the wire.
    public func encoded() -> [UInt8] {
        var header = "{\"type\":" + Self.quote(type) + ",\"version\":\"\(Self.version)\""
        if !data.isEmpty { header += ",\"data_length\":\(data.count)" }
        if !payload.isEmpty { header += ",\"payload_length\":\(payload.count)" }
        header += "}\n"
        var out = Array(header.utf8)
        out.reserveCapacity(out.count + data.count + payload.count)
        out.append(contentsOf: data)
        out.append(contentsOf: payload)
        return out
    }

    private static func quote(_ s: String) -> String {
        let d = (try? JSONSerialization.data(withJSONObject: [s])) ?? Data("[\"\"]".utf8)
        return String(decoding: d.dropFirst().dropLast(), as: UTF8.self)
    }
}

/// The data of `transcript` and `transcript-chunk` events (and the text of `error`).
public struct WyomingText: Decodable, Sendable, Equatable {
    /// The text; nil when absent or not a string.
    public var text: String?
    /// The error code of an `error` event.
    public var code: String?
    /// The language, when the peer says.
    public var language: String?

    enum CodingKeys: String, CodingKey { case text, code, language }

    /// Each field on its own: one of the wrong type does not lose the others.
    public init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        text = try? c.decodeIfPresent(String.self, forKey: .text)
        code = try? c.decodeIfPresent(String.self, forKey: .code)
        language = try? c.decodeIfPresent(String.self, forKey: .language)
    }
}

/// A malformed event from the peer.
public struct WyomingProtocolError: Error, Sendable, CustomStringConvertible {
    /// What is wrong.
    public var message: String
    public var description: String { message }
    package init(_ message: String) { self.message = message }
}

/// Cuts a byte stream into ``WyomingEvent``s. A pure state machine: feed it what the socket
/// read, take the complete events; it keeps the incomplete rest. Every length is bounded, so a
/// peer cannot make it allocate without limit.
public struct WyomingDecoder: Sendable {
    /// Longest header line.
    public var maxHeaderBytes = 65_536
    /// Largest data block.
    public var maxDataBytes = 1 << 20
    /// Largest payload.
    public var maxPayloadBytes = 16 << 20

    private var buffer: [UInt8] = []
    private var start = 0
    private var pending: (type: String, inline: Data?, dataLength: Int, payloadLength: Int)?

    /// An empty decoder.
    public init() {}

    /// Adds bytes; returns the events they complete. Throws on a malformed or oversized event
    /// (the stream cannot be resynchronized: close the connection).
    public mutating func push(_ bytes: some Collection<UInt8>) throws(WyomingProtocolError) -> [WyomingEvent] {
        buffer.append(contentsOf: bytes)
        var events: [WyomingEvent] = []
        while true {
            if pending == nil {
                guard let nl = buffer[start...].firstIndex(of: UInt8(ascii: "\n")) else {
                    if buffer.count - start > maxHeaderBytes { throw WyomingProtocolError("header line longer than \(maxHeaderBytes) bytes") }
                    break
                }
                if nl - start > maxHeaderBytes { throw WyomingProtocolError("header line longer than \(maxHeaderBytes) bytes") }
                let line = Data(buffer[start..<nl])
                start = nl + 1
                if line.allSatisfy({ $0 == 0x20 || $0 == 0x0D }) { continue }
                pending = try Self.header(line, maxData: maxDataBytes, maxPayload: maxPayloadBytes)
            }
            guard let p = pending, buffer.count - start >= p.dataLength + p.payloadLength else { break }
            let dataBytes = Data(buffer[start..<(start + p.dataLength)])
            let payload = Array(buffer[(start + p.dataLength)..<(start + p.dataLength + p.payloadLength)])
            start += p.dataLength + p.payloadLength
            pending = nil
            events.append(WyomingEvent(type: p.type, rawData: try Self.merge(p.inline, dataBytes), payload: payload))
        }
        if start > 0 && (start == buffer.count || start > 65_536) {
            buffer.removeFirst(start)
            start = 0
        }
        return events
    }

    private static func header(_ line: Data, maxData: Int, maxPayload: Int) throws(WyomingProtocolError)
        -> (type: String, inline: Data?, dataLength: Int, payloadLength: Int) {
        guard let object = try? JSONSerialization.jsonObject(with: line), let h = object as? [String: Any] else {
            throw WyomingProtocolError("header is not a JSON object: \(String(decoding: line.prefix(80), as: UTF8.self))")
        }
        guard let type = h["type"] as? String, !type.isEmpty else { throw WyomingProtocolError("header without a type") }
        func length(_ key: String, max: Int) throws(WyomingProtocolError) -> Int {
            guard let v = h[key], !(v is NSNull) else { return 0 }
            let value: Int?
            switch v {
            case let i as Int: value = i
            case let d as Double: value = d.isFinite ? Int(exactly: d) : nil
            case let n as NSNumber: value = n.doubleValue.isFinite ? Int(exactly: n.doubleValue) : nil
            default: value = nil
            }
            guard let i = value, i >= 0 else {
                throw WyomingProtocolError("\(key) of \(type) is not a non-negative integer")
            }
            guard i <= max else { throw WyomingProtocolError("\(key) \(i) of \(type) exceeds \(max) bytes") }
            return i
        }
        var inline: Data?
        if let d = h["data"], !(d is NSNull) {
            guard let o = d as? [String: Any], let bytes = try? JSONSerialization.data(withJSONObject: o) else {
                throw WyomingProtocolError("inline data of \(type) is not an object")
            }
            inline = bytes
        }
        return (type, inline, try length("data_length", max: maxData), try length("payload_length", max: maxPayload))
    }

    private static func merge(_ inline: Data?, _ block: Data) throws(WyomingProtocolError) -> Data {
        if block.isEmpty, let inline { return inline }
        var merged = inline.flatMap { try? JSONSerialization.jsonObject(with: $0) as? [String: Any] } ?? [:]
        if !block.isEmpty {
            guard let o = try? JSONSerialization.jsonObject(with: block), let d = o as? [String: Any] else {
                throw WyomingProtocolError("data block is not a JSON object")
            }
            merged.merge(d) { _, new in new }
        }
        if merged.isEmpty { return Data() }
        guard let out = try? JSONSerialization.data(withJSONObject: merged, options: [.sortedKeys]) else {
            throw WyomingProtocolError("data cannot be re-encoded")
        }
        return out
    }
}
