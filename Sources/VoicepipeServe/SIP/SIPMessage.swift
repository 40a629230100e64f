import Foundation

/// One SIP message (RFC 3261 §7): a request or a response, its header fields in order, and its body.
///
/// Header names are kept in their long form (a compact `v:` is stored as `Via`), compared without regard
/// to case. Values are unfolded (a continuation line is joined with one space). A field that carries a
/// comma-separated list (`Via: a, b`) is kept as written; ``values(_:)`` splits it.
struct SIPMessage: Sendable, Equatable {
    enum StartLine: Sendable, Equatable {
        case request(method: String, uri: String)
        case response(status: Int, reason: String)
    }

    var start: StartLine
    var headers: [(name: String, value: String)]
    var body: [UInt8]

    init(start: StartLine, headers: [(name: String, value: String)] = [], body: [UInt8] = []) {
        self.start = start
        self.headers = headers
        self.body = body
    }

    static func == (a: SIPMessage, b: SIPMessage) -> Bool {
        a.start == b.start && a.body == b.body && a.headers.map { "\($0.name):\($0.value)" } == b.headers.map { "\($0.name):\($0.value)" }
    }

    // Not inlined: inlined into SIPDialer's call loop, these switches crash Swift 6.3.1's optimizer
    // (CopyPropagation: "Found outside of lifetime use") in a release build.
    @inline(never) var method: String? { if case .request(let m, _) = start { m } else { nil } }
    var requestURI: String? { if case .request(_, let u) = start { u } else { nil } }
    @inline(never) var status: Int? { if case .response(let s, _) = start { s } else { nil } }

    /// The first value of a header field (any case; compact forms are stored long).
    subscript(_ name: String) -> String? {
        let n = name.lowercased()
        return headers.first { $0.name.lowercased() == n }?.value
    }

    /// Every field of that name, in order.
    func all(_ name: String) -> [String] {
        let n = name.lowercased()
        return headers.filter { $0.name.lowercased() == n }.map(\.value)
    }

    /// Every value of that name, comma-separated lists split (commas inside `<…>` or quotes kept).
    func values(_ name: String) -> [String] { all(name).flatMap(SIPHeader.splitList) }

    mutating func set(_ name: String, _ value: String) {
        let n = name.lowercased()
        headers.removeAll { $0.name.lowercased() == n }
        headers.append((name, value))
    }

    mutating func add(_ name: String, _ value: String) { headers.append((name, value)) }

    var callID: String? { self["Call-ID"] }

    /// `CSeq`: its number and method.
    var cseq: (number: UInt32, method: String)? {
        guard let v = self["CSeq"] else { return nil }
        let parts = v.split(whereSeparator: { $0 == " " || $0 == "\t" })
        guard parts.count == 2, let n = UInt32(parts[0]) else { return nil }
        return (n, String(parts[1]))
    }

    /// The wire form; `Content-Length` is always written, from the body.
    func serialized() -> [UInt8] {
        var text: String
        switch start {
        case .request(let m, let u): text = "\(m) \(u) SIP/2.0\r\n"
        case .response(let s, let r): text = "SIP/2.0 \(s) \(r)\r\n"
        }
        for h in headers where h.name.lowercased() != "content-length" { text += "\(h.name): \(h.value)\r\n" }
        text += "Content-Length: \(body.count)\r\n\r\n"
        return Array(text.utf8) + body
    }

    /// A response to this request (RFC 3261 §8.2.6): Via, From, To, Call-ID and CSeq copied; `toTag`
    /// added to To when it has none.
    func response(_ status: Int, _ reason: String? = nil, toTag: String? = nil) -> SIPMessage {
        var r = SIPMessage(start: .response(status: status, reason: reason ?? SIPMessage.reason(status)))
        for h in headers {
            switch h.name.lowercased() {
            case "via", "from", "call-id", "cseq":
                r.add(h.name, h.value)
            case "record-route":
                if status > 100 && status < 300 { r.add(h.name, h.value) }
            case "to":
                if let toTag, status != 100, SIPHeader.parameter(h.value, "tag") == nil {
                    r.add("To", h.value + ";tag=" + toTag)
                } else {
                    r.add("To", h.value)
                }
            default: break
            }
        }
        return r
    }

    static func reason(_ status: Int) -> String {
        switch status {
        case 100: "Trying"
        case 180: "Ringing"
        case 200: "OK"
        case 400: "Bad Request"
        case 405: "Method Not Allowed"
        case 408: "Request Timeout"
        case 413: "Request Entity Too Large"
        case 415: "Unsupported Media Type"
        case 420: "Bad Extension"
        case 481: "Call/Transaction Does Not Exist"
        case 486: "Busy Here"
        case 487: "Request Terminated"
        case 488: "Not Acceptable Here"
        case 491: "Request Pending"
        case 500: "Server Internal Error"
        case 501: "Not Implemented"
        case 503: "Service Unavailable"
        case 505: "Version Not Supported"
        default: status < 300 ? "OK" : "Error"
        }
    }
}

/// Why bytes are not a SIP message. `partial` holds what could be read (the start line and the header
/// fields before the problem), so that a request can still be answered with a 400.
struct SIPParseError: Error, Sendable, CustomStringConvertible {
    var message: String
    var partial: SIPMessage?
    var description: String { message }
}

/// Reads SIP messages (RFC 3261 §7, §25): a start line, header fields (compact forms, folded lines,
/// any case), an empty line and a body of exactly `Content-Length` bytes.
enum SIPParser {
    /// Largest message accepted (a datagram, or one message on a stream).
    static let maxMessageBytes = 32 * 1024
    /// Most header fields in one message.
    static let maxHeaders = 128

    static let compactForms: [String: String] = [
        "i": "Call-ID", "m": "Contact", "e": "Content-Encoding", "l": "Content-Length", "c": "Content-Type",
        "f": "From", "s": "Subject", "k": "Supported", "t": "To", "v": "Via", "o": "Event", "r": "Refer-To",
        "x": "Session-Expires", "u": "Allow-Events", "b": "Referred-By", "a": "Accept-Contact", "j": "Reject-Contact",
        "d": "Request-Disposition", "y": "Identity", "n": "Identity-Info",
    ]

    /// The canonical spelling of the fields voicepipe reads.
    static let canonical: [String: String] = Dictionary(uniqueKeysWithValues: [
        "Call-ID", "Contact", "Content-Length", "Content-Type", "From", "To", "Via", "CSeq", "Max-Forwards", "Session-Expires",
        "Min-SE", "Supported", "Require", "Allow", "Record-Route", "Route", "Event", "Subject", "Accept", "User-Agent", "Expires",
        "WWW-Authenticate", "Proxy-Authenticate", "Authorization", "Proxy-Authorization", "Reason",
    ].map { ($0.lowercased(), $0) })

    /// One whole message (a UDP datagram). Bytes after the body (beyond Content-Length) are refused.
    static func parse(_ bytes: [UInt8]) throws(SIPParseError) -> SIPMessage {
        guard bytes.count <= maxMessageBytes else {
            throw SIPParseError(message: "message of \(bytes.count) bytes is larger than \(maxMessageBytes)")
        }
        guard let end = headEnd(bytes) else {
            throw SIPParseError(message: "no empty line ends the header fields", partial: try? parseHead(bytes, lenient: true))
        }
        var message = try parseHead(Array(bytes[..<end.head]), lenient: false)
        let available = bytes.count - end.body
        let length: Int
        if let l = message["Content-Length"] {
            guard let n = Int(l.trimmingCharacters(in: .whitespaces)), n >= 0 else {
                throw SIPParseError(message: "Content-Length '\(l)' is not a number", partial: message)
            }
            length = n
        } else {
            // Over UDP the body runs to the end of the datagram (RFC 3261 §18.3).
            length = available
        }
        guard length <= available else {
            throw SIPParseError(message: "Content-Length \(length) is more than the \(available) bytes of body received", partial: message)
        }
        message.body = Array(bytes[end.body..<(end.body + length)])
        try check(message)
        return message
    }

    /// Where the head ends: index of the blank line and of the body's first byte (CRLFCRLF or LFLF).
    static func headEnd(_ bytes: [UInt8]) -> (head: Int, body: Int)? {
        var i = 0
        while i + 1 < bytes.count {
            if bytes[i] == 10 && bytes[i + 1] == 10 { return (i, i + 2) }
            if i + 3 < bytes.count && bytes[i] == 13 && bytes[i + 1] == 10 && bytes[i + 2] == 13 && bytes[i + 3] == 10 { return (i, i + 4) }
            i += 1
        }
        return nil
    }

    /// The start line and header fields (without the blank line).
    static func parseHead(_ bytes: [UInt8], lenient: Bool) throws(SIPParseError) -> SIPMessage {
        guard let text = String(validating: bytes, as: UTF8.self) else { throw SIPParseError(message: "the header is not UTF-8 text") }
        // "\r\n" is one Character in Swift: split on any line break.
        var lines = text.split(omittingEmptySubsequences: false, whereSeparator: { $0.isNewline }).map(String.init)
        // Leading blank lines (keep-alives on a stream) are skipped (RFC 3261 §7.5).
        while let first = lines.first, first.isEmpty { lines.removeFirst() }
        guard let first = lines.first else { throw SIPParseError(message: "empty message") }
        let start = try startLine(first)
        var message = SIPMessage(start: start)
        var unfolded: [String] = []
        for line in lines.dropFirst() {
            if line.isEmpty { continue }
            if line.first == " " || line.first == "\t" {
                guard !unfolded.isEmpty else {
                    throw SIPParseError(message: "a continuation line before any header field", partial: message)
                }
                unfolded[unfolded.count - 1] += " " + line.trimmingCharacters(in: .whitespaces)
            } else {
                unfolded.append(line)
            }
        }
        guard unfolded.count <= maxHeaders else {
            throw SIPParseError(message: "\(unfolded.count) header fields is more than \(maxHeaders)", partial: message)
        }
        var problem: String?
        for line in unfolded {
            guard let colon = line.firstIndex(of: ":") else {
                problem = problem ?? "header line '\(line.prefix(60))' has no ':'"
                continue
            }
            let rawName = line[..<colon].trimmingCharacters(in: .whitespaces)
            guard !rawName.isEmpty, rawName.allSatisfy({ $0.isASCII && ($0.isLetter || $0.isNumber || "-.!%*_+`'~".contains($0)) }) else {
                problem = problem ?? "header field name '\(rawName.prefix(40))' is not a token"
                continue
            }
            let value = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            let lower = rawName.lowercased()
            let name = compactForms[lower] ?? canonical[lower] ?? rawName
            message.add(name, value)
        }
        if let problem, !lenient { throw SIPParseError(message: problem, partial: message) }
        return message
    }

    static func startLine(_ line: String) throws(SIPParseError) -> SIPMessage.StartLine {
        let parts = line.split(separator: " ", maxSplits: 2, omittingEmptySubsequences: true)
        if line.hasPrefix("SIP/") {
            guard parts.count >= 2, parts[0] == "SIP/2.0", let status = Int(parts[1]), (100...699).contains(status) else {
                throw SIPParseError(message: "bad status line '\(line.prefix(80))'")
            }
            return .response(status: status, reason: parts.count > 2 ? String(parts[2]) : "")
        }
        guard parts.count == 3 else { throw SIPParseError(message: "bad request line '\(line.prefix(80))': expected METHOD URI SIP/2.0") }
        let method = String(parts[0]), uri = String(parts[1]), version = String(parts[2])
        guard method.allSatisfy({ $0.isASCII && ($0.isUppercase || $0.isNumber || $0 == "-" || $0 == "_") }), !method.isEmpty else {
            throw SIPParseError(message: "bad request method '\(method.prefix(30))'")
        }
        guard version == "SIP/2.0" else {
            throw SIPParseError(message: "SIP version '\(version.prefix(20))' is not supported", partial: SIPMessage(start: .request(method: method, uri: uri)))
        }
        guard uri.contains(":"), !uri.contains(where: { $0.isWhitespace }) else {
            throw SIPParseError(message: "request URI '\(uri.prefix(60))' is not a URI", partial: SIPMessage(start: .request(method: method, uri: uri)))
        }
        return .request(method: method, uri: uri)
    }

    /// The fields every message must have (RFC 3261 §8.1.1): To, From, Call-ID, CSeq, Via (Max-Forwards is not required here).
    static func check(_ m: SIPMessage) throws(SIPParseError) {
        for name in ["Via", "From", "To", "Call-ID", "CSeq"] where m[name] == nil {
            throw SIPParseError(message: "missing \(name) header field", partial: m)
        }
        guard let cseq = m.cseq else { throw SIPParseError(message: "CSeq '\(m["CSeq"] ?? "")' is not 'NUMBER METHOD'", partial: m) }
        if let method = m.method, method != cseq.method, !(method == "ACK" || method == "CANCEL") {
            throw SIPParseError(message: "CSeq method \(cseq.method) does not match the request method \(method)", partial: m)
        }
        if let method = m.method, (method == "ACK" || method == "CANCEL"), cseq.method != method {
            throw SIPParseError(message: "CSeq method \(cseq.method) does not match the request method \(method)", partial: m)
        }
        if let from = m["From"], SIPHeader.uri(from) == nil { throw SIPParseError(message: "From '\(from.prefix(60))' has no URI", partial: m) }
        if let to = m["To"], SIPHeader.uri(to) == nil { throw SIPParseError(message: "To '\(to.prefix(60))' has no URI", partial: m) }
        if m.callID?.isEmpty ?? true { throw SIPParseError(message: "empty Call-ID", partial: m) }
    }
}

/// Splits a byte stream (SIP over TCP) into messages by their `Content-Length`.
struct SIPStreamFramer {
    private var buffer: [UInt8] = []

    var pending: Int { buffer.count }

    mutating func push(_ bytes: [UInt8]) throws(SIPParseError) -> [SIPMessage] {
        buffer += bytes
        var out: [SIPMessage] = []
        while true {
            // CRLF keep-alives between messages (RFC 5626 §3.5.1).
            while let f = buffer.first, f == 13 || f == 10 { buffer.removeFirst() }
            guard let end = SIPParser.headEnd(buffer) else {
                if buffer.count > SIPParser.maxMessageBytes { throw SIPParseError(message: "header of more than \(SIPParser.maxMessageBytes) bytes") }
                return out
            }
            let head = try SIPParser.parseHead(Array(buffer[..<end.head]), lenient: false)
            guard let l = head["Content-Length"], let length = Int(l.trimmingCharacters(in: .whitespaces)), length >= 0 else {
                throw SIPParseError(message: "a message on a stream needs a valid Content-Length (got '\(head["Content-Length"] ?? "none")')", partial: head)
            }
            guard end.body + length <= SIPParser.maxMessageBytes else {
                throw SIPParseError(message: "message of \(end.body + length) bytes is larger than \(SIPParser.maxMessageBytes)", partial: head)
            }
            guard buffer.count >= end.body + length else { return out }
            let whole = Array(buffer[..<(end.body + length)])
            buffer.removeFirst(end.body + length)
            out.append(try SIPParser.parse(whole))
        }
    }
}

/// Reading header field values: name-addr URIs, parameters, lists.
enum SIPHeader {
    /// The URI of a name-addr or addr-spec (`"Bob" <sip:bob@host>;tag=1` → `sip:bob@host`).
    static func uri(_ value: String) -> String? {
        if let open = value.firstIndex(of: "<") {
            guard let close = value[open...].firstIndex(of: ">") else { return nil }
            let u = String(value[value.index(after: open)..<close])
            return u.contains(":") ? u : nil
        }
        let u = value.split(separator: ";", maxSplits: 1).first.map { $0.trimmingCharacters(in: .whitespaces) } ?? ""
        return u.contains(":") && !u.contains(" ") ? u : nil
    }

    /// A header parameter (`;tag=abc`) after the URI part.
    static func parameter(_ value: String, _ name: String) -> String? {
        var rest = Substring(value)
        if let close = value.lastIndex(of: ">") { rest = value[value.index(after: close)...] }
        for p in rest.split(separator: ";").dropFirst(rest.hasPrefix(";") ? 0 : 1) {
            let kv = p.split(separator: "=", maxSplits: 1)
            if kv.first?.trimmingCharacters(in: .whitespaces).lowercased() == name.lowercased() {
                return kv.count > 1 ? kv[1].trimmingCharacters(in: .whitespaces) : ""
            }
        }
        return nil
    }

    /// Splits `a, b, <sip:x,y>` on commas outside quotes and angle brackets.
    static func splitList(_ value: String) -> [String] {
        var out: [String] = [], current = "", quoted = false, angle = false
        for ch in value {
            switch ch {
            case "\"": quoted.toggle(); current.append(ch)
            case "<" where !quoted: angle = true; current.append(ch)
            case ">" where !quoted: angle = false; current.append(ch)
            case "," where !quoted && !angle:
                out.append(current.trimmingCharacters(in: .whitespaces)); current = ""
            default: current.append(ch)
            }
        }
        let last = current.trimmingCharacters(in: .whitespaces)
        if !last.isEmpty { out.append(last) }
        return out
    }

    /// Host and port of a SIP URI (`sip:user@host:port;params`).
    static func hostPort(_ uri: String) -> (host: String, port: Int?)? {
        guard let colon = uri.firstIndex(of: ":") else { return nil }
        var rest = uri[uri.index(after: colon)...]
        if let at = rest.lastIndex(of: "@") { rest = rest[rest.index(after: at)...] }
        if let semi = rest.firstIndex(where: { $0 == ";" || $0 == "?" || $0 == ">" }) { rest = rest[..<semi] }
        if rest.hasPrefix("["), let close = rest.firstIndex(of: "]") {
            let host = String(rest[rest.index(after: rest.startIndex)..<close])
            let after = rest[rest.index(after: close)...]
            return (host, after.hasPrefix(":") ? Int(after.dropFirst()) : nil)
        }
        let parts = rest.split(separator: ":", maxSplits: 1)
        guard let h = parts.first, !h.isEmpty else { return nil }
        return (String(h), parts.count > 1 ? Int(parts[1]) : nil)
    }

    /// The user part of a SIP URI, if any.
    static func user(_ uri: String) -> String? {
        guard let colon = uri.firstIndex(of: ":"), let at = uri.lastIndex(of: "@"), colon < at else { return nil }
        return String(uri[uri.index(after: colon)..<at])
    }

    /// A random token for tags and branches.
    static func token(_ length: Int = 10) -> String {
        let chars = Array("abcdefghijklmnopqrstuvwxyz0123456789")
        return String((0..<length).map { _ in chars.randomElement()! })
    }
}
