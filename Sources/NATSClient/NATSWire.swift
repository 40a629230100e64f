import Foundation

/// A message the server delivered on a subscription (`MSG` or, with headers, `HMSG`).
public struct NATSMessage: Sendable, Equatable {
    /// Subject it was published to.
    public var subject: String
    /// Subscription id it arrived on.
    public var sid: String
    /// Reply subject, if the publisher gave one.
    public var replyTo: String?
    /// Status code of the header block (`NATS/1.0 503` → 503), if it had one.
    public var status: Int?
    /// Description after the status code (`No Responders`), if any.
    public var statusDescription: String?
    /// Headers in the order sent (a name may repeat).
    public var headers: [(String, String)]
    /// Payload bytes.
    public var payload: [UInt8]

    /// Creates a message.
    public init(subject: String, sid: String, replyTo: String? = nil, status: Int? = nil, statusDescription: String? = nil,
                headers: [(String, String)] = [], payload: [UInt8] = []) {
        self.subject = subject; self.sid = sid; self.replyTo = replyTo; self.status = status
        self.statusDescription = statusDescription; self.headers = headers; self.payload = payload
    }

    /// The first header of that name (case-insensitive, as NATS headers are).
    public func header(_ name: String) -> String? {
        headers.first { $0.0.caseInsensitiveCompare(name) == .orderedSame }?.1
    }

    public static func == (a: NATSMessage, b: NATSMessage) -> Bool {
        a.subject == b.subject && a.sid == b.sid && a.replyTo == b.replyTo && a.status == b.status
            && a.statusDescription == b.statusDescription && a.payload == b.payload
            && a.headers.map { [$0.0, $0.1] } == b.headers.map { [$0.0, $0.1] }
    }
}

/// What a NATS server sends a client (the client protocol, docs.nats.io "Client Protocol").
public enum NATSServerOperation: Sendable, Equatable {
    /// `INFO {json}`: the server's identity and limits; sent first, and again when the cluster changes.
    case info(NATSServerInfo)
    /// `MSG` / `HMSG`.
    case message(NATSMessage)
    /// `PING`: must be answered with `PONG`.
    case ping
    /// `PONG`: the answer to our `PING`.
    case pong
    /// `+OK` (verbose mode only).
    case ok
    /// `-ERR 'text'`: most close the connection (authorization, parser errors); some do not (bad subject).
    case error(String)
}

/// The fields of `INFO` a client acts on.
public struct NATSServerInfo: Sendable, Equatable {
    public var serverID = ""
    public var version = ""
    /// Largest payload the server accepts (bytes).
    public var maxPayload = 1_048_576
    public var headers = false
    public var authRequired = false
    public var tlsRequired = false
    /// The server takes TLS if the client starts it (`tls_available`).
    public var tlsAvailable = false
    /// Present when the server wants the nonce signed (NKEY / JWT authentication).
    public var nonce: String?
    public var jetStream = false
    /// The cluster's other servers that clients may use (`connect_urls`, `host:port`), kept current by the
    /// server's later INFOs as the cluster changes.
    public var connectURLs: [String] = []

    public init() {}

    /// Parses the JSON after `INFO `; unknown fields are ignored.
    public init(json: [UInt8]) throws {
        guard let object = try? JSONSerialization.jsonObject(with: Data(json)) as? [String: Any] else {
            throw NATSProtocolError.malformed("INFO is not a JSON object")
        }
        serverID = object["server_id"] as? String ?? ""
        version = object["version"] as? String ?? ""
        if let n = object["max_payload"] as? Int, n > 0 { maxPayload = n }
        headers = object["headers"] as? Bool ?? false
        authRequired = object["auth_required"] as? Bool ?? false
        tlsRequired = object["tls_required"] as? Bool ?? false
        tlsAvailable = object["tls_available"] as? Bool ?? false
        nonce = object["nonce"] as? String
        jetStream = object["jetstream"] as? Bool ?? false
        connectURLs = (object["connect_urls"] as? [String] ?? []).prefix(64).filter { $0.utf8.count <= 300 }
    }
}

/// A violation of the protocol by the other side, or a limit it exceeded.
public enum NATSProtocolError: Error, Sendable, Equatable, CustomStringConvertible {
    case malformed(String)
    case tooLarge(String)

    public var description: String {
        switch self {
        case .malformed(let m): "malformed NATS protocol data: \(m)"
        case .tooLarge(let m): "NATS protocol data over its limit: \(m)"
        }
    }
}

/// Incremental decoder of the server → client byte stream. Bounded: a control line longer than
/// `maxControlLine` or a payload longer than `maxPayload` is an error (nothing is buffered past them).
/// Feed bytes in any split; ``next()`` returns whole operations.
public struct NATSParser: Sendable {
    /// Longest control line accepted (the server's own default is 4 KiB).
    public var maxControlLine = 4096
    /// Largest payload (headers included) accepted; raise to the server's `max_payload` after `INFO`.
    public var maxPayload = 8 << 20

    private var buffer: [UInt8] = []
    private var start = 0

    public init() {}

    /// Appends received bytes.
    public mutating func feed<C: Collection>(_ bytes: C) where C.Element == UInt8 {
        if start > 0 && start >= buffer.count / 2 {
            buffer.removeFirst(start)
            start = 0
        }
        buffer.append(contentsOf: bytes)
    }

    /// Bytes received but not yet decoded.
    public var pending: Int { buffer.count - start }

    /// The next whole operation, or nil when more bytes are needed.
    public mutating func next() throws -> NATSServerOperation? {
        guard let lineEnd = findCRLF(from: start) else {
            if buffer.count - start > maxControlLine { throw NATSProtocolError.tooLarge("control line over \(maxControlLine) bytes") }
            return nil
        }
        if lineEnd - start > maxControlLine { throw NATSProtocolError.tooLarge("control line over \(maxControlLine) bytes") }
        let line = buffer[start..<lineEnd]
        let (op, rest) = Self.splitOperation(line)
        switch op {
        case "PING":
            start = lineEnd + 2; return .ping
        case "PONG":
            start = lineEnd + 2; return .pong
        case "+OK":
            start = lineEnd + 2; return .ok
        case "-ERR":
            start = lineEnd + 2
            var text = String(decoding: rest, as: UTF8.self).trimmingCharacters(in: .whitespaces)
            if text.hasPrefix("'") && text.hasSuffix("'") && text.count >= 2 { text = String(text.dropFirst().dropLast()) }
            return .error(text)
        case "INFO":
            start = lineEnd + 2
            return .info(try NATSServerInfo(json: Array(rest)))
        case "MSG", "HMSG":
            let args = rest.split(separator: UInt8(ascii: " "), omittingEmptySubsequences: true).map { String(decoding: $0, as: UTF8.self) }
            let hasHeaders = op == "HMSG"
            let counts = hasHeaders ? 2 : 1
            guard args.count == 2 + counts || args.count == 3 + counts else {
                throw NATSProtocolError.malformed("\(op) with \(args.count) arguments")
            }
            guard let total = Int(args[args.count - 1]), total >= 0 else { throw NATSProtocolError.malformed("\(op) size '\(args[args.count - 1])'") }
            var headerBytes = 0
            if hasHeaders {
                guard let h = Int(args[args.count - 2]), h >= 0, h <= total else { throw NATSProtocolError.malformed("HMSG header size '\(args[args.count - 2])'") }
                headerBytes = h
            }
            if total > maxPayload { throw NATSProtocolError.tooLarge("message of \(total) bytes (limit \(maxPayload))") }
            let payloadStart = lineEnd + 2
            guard buffer.count >= payloadStart + total + 2 else { return nil }
            guard buffer[payloadStart + total] == 13, buffer[payloadStart + total + 1] == 10 else {
                throw NATSProtocolError.malformed("\(op) payload not followed by CRLF")
            }
            var message = NATSMessage(subject: args[0], sid: args[1], replyTo: args.count == 3 + counts ? args[2] : nil)
            if hasHeaders {
                try Self.parseHeaders(buffer[payloadStart..<(payloadStart + headerBytes)], into: &message)
            }
            message.payload = Array(buffer[(payloadStart + headerBytes)..<(payloadStart + total)])
            start = payloadStart + total + 2
            return .message(message)
        default:
            throw NATSProtocolError.malformed("unknown operation '\(String(decoding: line.prefix(16), as: UTF8.self))'")
        }
    }

    private func findCRLF(from: Int) -> Int? {
        var i = from
        let end = min(buffer.count - 1, from + maxControlLine + 1)
        while i < end {
            if buffer[i] == 13 && buffer[i + 1] == 10 { return i }
            i += 1
        }
        return nil
    }

    private static func splitOperation(_ line: ArraySlice<UInt8>) -> (String, ArraySlice<UInt8>) {
        var i = line.startIndex
        while i < line.endIndex && line[i] != UInt8(ascii: " ") && line[i] != UInt8(ascii: "\t") { i += 1 }
        let op = String(decoding: line[line.startIndex..<i], as: UTF8.self).uppercased()
        while i < line.endIndex && (line[i] == UInt8(ascii: " ") || line[i] == UInt8(ascii: "\t")) { i += 1 }
        return (op, line[i..<line.endIndex])
    }

    /// `NATS/1.0[ status[ description]]\r\n(Name: value\r\n)*\r\n`.
    static func parseHeaders(_ bytes: ArraySlice<UInt8>, into message: inout NATSMessage) throws {
        let text = String(decoding: bytes, as: UTF8.self)
        var lines = text.components(separatedBy: "\r\n")
        guard let first = lines.first, first.hasPrefix("NATS/") else { throw NATSProtocolError.malformed("header block without NATS/1.0") }
        lines.removeFirst()
        let parts = first.split(separator: " ", maxSplits: 2).map(String.init)
        if parts.count >= 2 { message.status = Int(parts[1]) }
        if parts.count == 3 { message.statusDescription = parts[2] }
        for line in lines where !line.isEmpty {
            guard let colon = line.firstIndex(of: ":") else { throw NATSProtocolError.malformed("header line without ':'") }
            message.headers.append((String(line[..<colon]), line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)))
        }
    }
}

/// Encoders of the client → server operations.
public enum NATSEncoder {
    /// `PUB` (no headers) or `HPUB` (headers) of `payload` to `subject`.
    public static func publish(subject: String, replyTo: String? = nil, headers: [(String, String)] = [], payload: [UInt8], into out: inout [UInt8]) {
        let reply = replyTo.map { " " + $0 } ?? ""
        if headers.isEmpty {
            out.append(contentsOf: Array("PUB \(subject)\(reply) \(payload.count)\r\n".utf8))
        } else {
            var block = "NATS/1.0\r\n"
            for (k, v) in headers { block += "\(k): \(v)\r\n" }
            block += "\r\n"
            let h = Array(block.utf8)
            out.append(contentsOf: Array("HPUB \(subject)\(reply) \(h.count) \(h.count + payload.count)\r\n".utf8))
            out.append(contentsOf: h)
        }
        out.append(contentsOf: payload)
        out.append(contentsOf: [13, 10])
    }

    /// `SUB subject [queue] sid`.
    public static func subscribe(subject: String, queue: String? = nil, sid: String) -> [UInt8] {
        Array("SUB \(subject)\(queue.map { " " + $0 } ?? "") \(sid)\r\n".utf8)
    }

    /// `UNSUB sid [max]`.
    public static func unsubscribe(sid: String, after max: Int? = nil) -> [UInt8] {
        Array("UNSUB \(sid)\(max.map { " \($0)" } ?? "")\r\n".utf8)
    }

    /// `CONNECT {json}`.
    public static func connect(_ fields: [String: Any]) -> [UInt8] {
        let data = (try? JSONSerialization.data(withJSONObject: fields, options: [.sortedKeys])) ?? Data("{}".utf8)
        return Array("CONNECT ".utf8) + Array(data) + [13, 10]
    }

    public static let ping: [UInt8] = Array("PING\r\n".utf8)
    public static let pong: [UInt8] = Array("PONG\r\n".utf8)
}

/// Subjects: dot-separated tokens without whitespace; `*` and `>` are wildcards for subscribers only.
public enum NATSSubject {
    /// `text` made safe as one token: every character outside `[A-Za-z0-9_-]` becomes `_`; empty → `_`.
    public static func token(_ text: String) -> String {
        var out = ""
        for u in text.unicodeScalars.prefix(128) {
            switch u {
            case "a"..."z", "A"..."Z", "0"..."9", "_", "-": out.unicodeScalars.append(u)
            default: out += "_"
            }
        }
        return out.isEmpty ? "_" : out
    }

    /// True when `subject` is a valid subject to publish to (no wildcards, no empty tokens, no whitespace).
    public static func isValidForPublish(_ subject: String) -> Bool {
        guard !subject.isEmpty else { return false }
        for token in subject.split(separator: ".", omittingEmptySubsequences: false) {
            if token.isEmpty || token == "*" || token == ">" { return false }
            if token.contains(where: { $0.isWhitespace }) { return false }
        }
        return true
    }
}
