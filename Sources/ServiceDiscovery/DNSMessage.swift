/// A DNS message in wire format (RFC 1035 §4), with the multicast DNS details of RFC 6762: the
/// cache-flush bit of a record's class (§10.2) and the unicast-response ("QU") bit of a question's
/// class (§5.4).
///
/// Questions and PTR, SRV, TXT, A and AAAA records are decoded into typed values; any other record
/// keeps its type and raw RDATA (``RecordData/other(type:rdata:)``), which is re-encoded verbatim and
/// is only meaningful for types whose RDATA holds no compressed name.
///
/// Decoding takes untrusted bytes and never traps: every read is bounds-checked, names are limited to
/// 255 bytes and 63-byte labels, and a compression pointer must point before itself, which rules out
/// loops (the number of pointer hops is bounded too).
///
/// ```swift
/// let query = DNSMessage(questions: [.init(name: DNSMessage.Name("_voicepipe-intercom._udp.local"), type: .ptr)])
/// let wire = try query.encode()
/// let back = try DNSMessage.decode(wire)
/// ```
public struct DNSMessage: Sendable, Hashable {
    /// Query identifier; 0 in multicast DNS, echoed in a reply to a legacy unicast query.
    public var id: UInt16
    /// The header flags word (QR, opcode, AA, TC, RD, RA, Z, RCODE).
    public var flags: UInt16
    /// Question section.
    public var questions: [Question]
    /// Answer section (in a query: known answers, RFC 6762 §7.1).
    public var answers: [Record]
    /// Authority section (in a query: the records being probed for, RFC 6762 §8.2).
    public var authorities: [Record]
    /// Additional section.
    public var additionals: [Record]

    /// Flags of a multicast DNS response: QR and AA set (RFC 6762 §18).
    public static let responseFlags: UInt16 = 0x8400
    /// Largest message encoded or decoded here (a jumbo-frame datagram, RFC 6762 §17).
    public static let maxMessageSize = 9000

    /// Creates a message; the default is a multicast DNS query with no questions.
    public init(id: UInt16 = 0, flags: UInt16 = 0, questions: [Question] = [], answers: [Record] = [],
                authorities: [Record] = [], additionals: [Record] = []) {
        self.id = id
        self.flags = flags
        self.questions = questions
        self.answers = answers
        self.authorities = authorities
        self.additionals = additionals
    }

    /// QR bit: a response rather than a query.
    public var isResponse: Bool {
        get { flags & 0x8000 != 0 }
        set { flags = newValue ? flags | 0x8000 : flags & ~0x8000 }
    }

    /// Opcode (0: standard query; multicast DNS ignores messages with any other, RFC 6762 §18.3).
    public var opcode: UInt8 { UInt8((flags >> 11) & 0x0F) }

    /// TC bit: more known answers follow in another packet (RFC 6762 §7.2).
    public var isTruncated: Bool { flags & 0x0200 != 0 }

    /// Answers, authorities and additionals, in that order.
    public var allRecords: [Record] { answers + authorities + additionals }

    // MARK: - Names

    /// A domain name as a sequence of labels.
    ///
    /// A label is kept as text and may contain dots (an instance label such as `Kitchen 1.2`), so a
    /// name is never split on dots after decoding. Comparison and hashing ignore ASCII case
    /// (RFC 6762 §16); the root name has no labels.
    public struct Name: Sendable, Hashable, CustomStringConvertible, ExpressibleByStringLiteral {
        /// The labels, most specific first, without the root.
        public var labels: [String]

        /// A name from its labels.
        public init(labels: [String]) { self.labels = labels }

        /// A name from dotted text (`_voicepipe-intercom._udp.local`); a trailing dot is ignored.
        /// No escapes: build a name whose labels contain dots with ``init(labels:)``.
        public init(_ text: String) {
            labels = text.split(separator: ".", omittingEmptySubsequences: true).map(String.init)
        }

        public init(stringLiteral value: String) { self.init(value) }

        /// This name with `label` in front (`instance` + `_type._udp.local`).
        public func prepending(_ label: String) -> Name { Name(labels: [label] + labels) }

        /// Dotted text; dots and backslashes inside a label are escaped with a backslash.
        public var description: String {
            labels.map { $0.replacingAll("\\", with: "\\\\").replacingAll(".", with: "\\.") }.joined(separator: ".")
        }

        /// The name with ASCII letters lowered: the form used for comparison.
        public var canonical: [String] { labels.map(Self.lowerASCII) }

        public static func == (a: Name, b: Name) -> Bool {
            guard a.labels.count == b.labels.count else { return false }
            for (x, y) in zip(a.labels, b.labels) where Self.lowerASCII(x) != Self.lowerASCII(y) { return false }
            return true
        }

        public func hash(into hasher: inout Hasher) { hasher.combine(canonical) }

        static func lowerASCII(_ s: String) -> String {
            String(decoding: s.utf8.map { $0 >= 0x41 && $0 <= 0x5A ? $0 + 0x20 : $0 }, as: UTF8.self)
        }
    }

    // MARK: - Types

    /// A record or question type.
    public struct RecordType: RawRepresentable, Sendable, Hashable, CustomStringConvertible {
        public var rawValue: UInt16
        public init(rawValue: UInt16) { self.rawValue = rawValue }

        public static let a = RecordType(rawValue: 1)
        public static let ptr = RecordType(rawValue: 12)
        public static let txt = RecordType(rawValue: 16)
        public static let aaaa = RecordType(rawValue: 28)
        public static let srv = RecordType(rawValue: 33)
        public static let nsec = RecordType(rawValue: 47)
        /// Question type matching every record type.
        public static let any = RecordType(rawValue: 255)

        public var description: String {
            switch self {
            case .a: "A"
            case .ptr: "PTR"
            case .txt: "TXT"
            case .aaaa: "AAAA"
            case .srv: "SRV"
            case .nsec: "NSEC"
            case .any: "ANY"
            default: "TYPE\(rawValue)"
            }
        }
    }

    /// Class IN, the only one multicast DNS uses.
    public static let classIN: UInt16 = 1

    /// A question.
    public struct Question: Sendable, Hashable {
        public var name: Name
        public var type: RecordType
        /// The class without its top bit (1, IN).
        public var recordClass: UInt16
        /// The top bit of the class: the querier prefers a unicast response ("QU", RFC 6762 §5.4).
        public var unicastResponse: Bool

        public init(name: Name, type: RecordType, recordClass: UInt16 = DNSMessage.classIN, unicastResponse: Bool = false) {
            self.name = name
            self.type = type
            self.recordClass = recordClass
            self.unicastResponse = unicastResponse
        }
    }

    /// The data of a record.
    public enum RecordData: Sendable, Hashable {
        /// A pointer to another name (DNS-SD: service type → instance).
        case ptr(Name)
        /// A service location (RFC 2782).
        case srv(priority: UInt16, weight: UInt16, port: UInt16, target: Name)
        /// Character strings, each up to 255 bytes. An empty list encodes as one empty string.
        case txt([[UInt8]])
        /// An IPv4 address, 4 bytes in network order.
        case a([UInt8])
        /// An IPv6 address, 16 bytes in network order.
        case aaaa([UInt8])
        /// Any other type: its raw RDATA.
        case other(type: RecordType, rdata: [UInt8])

        /// The record type this data belongs to.
        public var type: RecordType {
            switch self {
            case .ptr: .ptr
            case .srv: .srv
            case .txt: .txt
            case .a: .a
            case .aaaa: .aaaa
            case .other(let type, _): type
            }
        }
    }

    /// A resource record.
    public struct Record: Sendable, Hashable {
        public var name: Name
        /// Seconds the record stays valid; 0 in a multicast DNS response is a goodbye (RFC 6762 §10.1).
        public var ttl: UInt32
        /// The class without its top bit (1, IN).
        public var recordClass: UInt16
        /// The top bit of the class: this unique record replaces cached ones of the same name and type
        /// (RFC 6762 §10.2).
        public var cacheFlush: Bool
        public var data: RecordData

        public init(name: Name, ttl: UInt32, data: RecordData, cacheFlush: Bool = false, recordClass: UInt16 = DNSMessage.classIN) {
            self.name = name
            self.ttl = ttl
            self.data = data
            self.cacheFlush = cacheFlush
            self.recordClass = recordClass
        }

        public var type: RecordType { data.type }
    }

    /// Why bytes are not a usable DNS message, or a message cannot be encoded.
    public enum FormatError: Error, Sendable, Hashable {
        /// The message ends inside a header, name, question or record.
        case truncated
        /// A label length byte uses the reserved 0x40/0x80 forms.
        case badLabelType
        /// A compression pointer points at or after itself, or too many pointers were followed.
        case badPointer
        /// A name is longer than 255 bytes, or a label longer than 63 (or empty, when encoding).
        case badName
        /// RDATA does not match its type (length of A/AAAA, a TXT string running past the end, …).
        case badRData
        /// The encoded message would exceed ``DNSMessage/maxMessageSize`` or a section 65,535 entries.
        case tooLarge
    }

    // MARK: - Decoding

    /// Decodes a message. Throws ``FormatError`` on anything malformed; never traps.
    public static func decode(_ bytes: [UInt8]) throws(FormatError) -> DNSMessage {
        guard bytes.count <= maxMessageSize else { throw .tooLarge }
        var r = WireReader(bytes: bytes)
        let id = try r.u16()
        let flags = try r.u16()
        let qd = try r.u16(), an = try r.u16(), ns = try r.u16(), ar = try r.u16()
        var message = DNSMessage(id: id, flags: flags)
        // Counts come from the packet; every entry takes at least 5 bytes, so a lying count ends in
        // `.truncated` rather than a long loop.
        for _ in 0..<Int(qd) {
            let name = try r.name()
            let type = try r.u16()
            let cls = try r.u16()
            message.questions.append(Question(name: name, type: RecordType(rawValue: type), recordClass: cls & 0x7FFF,
                                              unicastResponse: cls & 0x8000 != 0))
        }
        for _ in 0..<Int(an) { message.answers.append(try r.record()) }
        for _ in 0..<Int(ns) { message.authorities.append(try r.record()) }
        for _ in 0..<Int(ar) { message.additionals.append(try r.record()) }
        return message
    }

    // MARK: - Encoding

    /// Encodes the message. With `compress`, names and name suffixes already written are replaced by
    /// pointers (RFC 1035 §4.1.4), also inside PTR and SRV data. TTLs are written as they are.
    public func encode(compress: Bool = true) throws(FormatError) -> [UInt8] {
        var w = WireWriter(compress: compress)
        for count in [questions.count, answers.count, authorities.count, additionals.count] where count > 0xFFFF {
            throw .tooLarge
        }
        w.u16(id)
        w.u16(flags)
        w.u16(UInt16(questions.count))
        w.u16(UInt16(answers.count))
        w.u16(UInt16(authorities.count))
        w.u16(UInt16(additionals.count))
        for q in questions {
            try w.name(q.name)
            w.u16(q.type.rawValue)
            w.u16((q.recordClass & 0x7FFF) | (q.unicastResponse ? 0x8000 : 0))
        }
        for record in answers { try w.record(record) }
        for record in authorities { try w.record(record) }
        for record in additionals { try w.record(record) }
        guard w.bytes.count <= Self.maxMessageSize else { throw .tooLarge }
        return w.bytes
    }

    // MARK: - Helpers

    /// Dotted-quad text of 4 address bytes (nil for any other length).
    public static func ipv4String(_ bytes: [UInt8]) -> String? {
        bytes.count == 4 ? bytes.map(String.init).joined(separator: ".") : nil
    }

    /// The 4 bytes of dotted-quad text (`10.77.0.1`), or nil.
    public static func ipv4Bytes(_ text: String) -> [UInt8]? {
        let parts = text.split(separator: ".", omittingEmptySubsequences: false)
        guard parts.count == 4 else { return nil }
        var out: [UInt8] = []
        for p in parts {
            guard !p.isEmpty, p.count <= 3, p.allSatisfy(\.isASCII), let v = UInt8(p) else { return nil }
            out.append(v)
        }
        return out
    }

    /// Text of 16 IPv6 address bytes, compressed per RFC 5952 (nil for any other length).
    public static func ipv6String(_ bytes: [UInt8]) -> String? {
        guard bytes.count == 16 else { return nil }
        let groups = (0..<8).map { UInt16(bytes[2 * $0]) << 8 | UInt16(bytes[2 * $0 + 1]) }
        // The longest run of two or more zero groups becomes "::" (the first one on a tie).
        var best = (start: -1, length: 0), i = 0
        while i < 8 {
            guard groups[i] == 0 else { i += 1; continue }
            var j = i
            while j < 8 && groups[j] == 0 { j += 1 }
            if j - i > best.length && j - i >= 2 { best = (i, j - i) }
            i = j
        }
        let hex = groups.map { String($0, radix: 16) }
        guard best.start >= 0 else { return hex.joined(separator: ":") }
        let head = hex[..<best.start].joined(separator: ":")
        let tail = hex[(best.start + best.length)...].joined(separator: ":")
        return head + "::" + tail
    }

    /// TXT strings as `key=value` pairs (RFC 6763 §6.3): keys are matched case-insensitively and
    /// returned lowered; the first occurrence of a key wins; a key without `=` maps to an empty value;
    /// strings with an empty key are skipped.
    public static func txtDictionary(_ strings: [[UInt8]]) -> [String: String] {
        var out: [String: String] = [:]
        for s in strings {
            let eq = s.firstIndex(of: UInt8(ascii: "=")) ?? s.endIndex
            guard eq > s.startIndex else { continue }
            let key = Name.lowerASCII(String(decoding: s[..<eq], as: UTF8.self))
            let value = eq < s.endIndex ? String(decoding: s[(eq + 1)...], as: UTF8.self) : ""
            if out[key] == nil { out[key] = value }
        }
        return out
    }

    /// TXT strings for a dictionary, sorted by key for a stable encoding.
    public static func txtStrings(_ dictionary: [String: String]) -> [[UInt8]] {
        dictionary.sorted { $0.key < $1.key }.map { Array("\($0.key)=\($0.value)".utf8) }
    }
}

// MARK: - Wire reader and writer

/// Bounds-checked reads from a message.
private struct WireReader {
    let bytes: [UInt8]
    var offset = 0

    /// Most compression pointers followed in one name. Pointers must point backwards, so a loop is
    /// impossible anyway; this only bounds the work for a hostile chain.
    static let maxHops = 128

    mutating func u8() throws(DNSMessage.FormatError) -> UInt8 {
        guard offset < bytes.count else { throw .truncated }
        defer { offset += 1 }
        return bytes[offset]
    }

    mutating func u16() throws(DNSMessage.FormatError) -> UInt16 {
        guard bytes.count - offset >= 2 else { throw .truncated }
        defer { offset += 2 }
        return UInt16(bytes[offset]) << 8 | UInt16(bytes[offset + 1])
    }

    mutating func u32() throws(DNSMessage.FormatError) -> UInt32 {
        guard bytes.count - offset >= 4 else { throw .truncated }
        defer { offset += 4 }
        return UInt32(bytes[offset]) << 24 | UInt32(bytes[offset + 1]) << 16 | UInt32(bytes[offset + 2]) << 8 | UInt32(bytes[offset + 3])
    }

    mutating func take(_ n: Int) throws(DNSMessage.FormatError) -> [UInt8] {
        guard n >= 0, bytes.count - offset >= n else { throw .truncated }
        defer { offset += n }
        return Array(bytes[offset..<offset + n])
    }

    /// Reads a possibly compressed name at the current offset and moves past it (past the first
    /// pointer, if any). `limit` is where the name must end when it lies inside RDATA.
    mutating func name(limit: Int? = nil) throws(DNSMessage.FormatError) -> DNSMessage.Name {
        let end = limit ?? bytes.count
        var labels: [String] = []
        var position = offset
        var resume: Int?        // where reading continues after the name: just past the first pointer
        var wireLength = 1      // the root byte
        var hops = 0
        // Pointers may only point before the lowest position read so far, so each hop strictly
        // moves backwards: no loop is possible.
        var floor = offset
        while true {
            guard position < (resume == nil ? end : bytes.count) else { throw .truncated }
            let length = Int(bytes[position])
            switch length & 0xC0 {
            case 0x00:
                if length == 0 {
                    position += 1
                    offset = resume ?? position
                    return DNSMessage.Name(labels: labels)
                }
                let limitHere = resume == nil ? end : bytes.count
                guard limitHere - position - 1 >= length else { throw .truncated }
                wireLength += 1 + length
                guard wireLength <= 255 else { throw .badName }
                labels.append(String(decoding: bytes[(position + 1)..<(position + 1 + length)], as: UTF8.self))
                position += 1 + length
            case 0xC0:
                let limitHere = resume == nil ? end : bytes.count
                guard limitHere - position >= 2 else { throw .truncated }
                let target = (length & 0x3F) << 8 | Int(bytes[position + 1])
                hops += 1
                guard target < floor, hops <= Self.maxHops else { throw .badPointer }
                if resume == nil { resume = position + 2 }
                floor = target
                position = target
            default:
                throw .badLabelType
            }
        }
    }

    mutating func record() throws(DNSMessage.FormatError) -> DNSMessage.Record {
        let name = try name()
        let type = DNSMessage.RecordType(rawValue: try u16())
        let cls = try u16()
        let ttl = try u32()
        let length = Int(try u16())
        guard bytes.count - offset >= length else { throw .truncated }
        let end = offset + length
        let data: DNSMessage.RecordData
        switch type {
        case .ptr:
            data = .ptr(try self.name(limit: end))
        case .srv:
            let priority = try u16(), weight = try u16(), port = try u16()
            guard offset <= end else { throw .badRData }
            data = .srv(priority: priority, weight: weight, port: port, target: try self.name(limit: end))
        case .txt:
            var strings: [[UInt8]] = []
            while offset < end {
                let n = Int(try u8())
                guard end - offset >= n else { throw .badRData }
                strings.append(try take(n))
            }
            // A TXT record holding one empty string means "no keys" (RFC 6763 §6.1).
            if strings == [[]] { strings = [] }
            data = .txt(strings)
        case .a:
            guard length == 4 else { throw .badRData }
            data = .a(try take(4))
        case .aaaa:
            guard length == 16 else { throw .badRData }
            data = .aaaa(try take(16))
        default:
            data = .other(type: type, rdata: try take(length))
        }
        // A name or strings ending before the RDATA does: trailing bytes are malformed too.
        guard offset == end else { throw .badRData }
        return DNSMessage.Record(name: name, ttl: ttl, data: data, cacheFlush: cls & 0x8000 != 0, recordClass: cls & 0x7FFF)
    }
}

/// Appends a message, remembering where names were written for compression.
private struct WireWriter {
    var bytes: [UInt8] = []
    let compress: Bool
    /// Offset of each name suffix written so far (canonical labels → offset below 0x4000).
    var suffixes: [[String]: Int] = [:]

    init(compress: Bool) {
        self.compress = compress
        bytes.reserveCapacity(512)
    }

    mutating func u16(_ v: UInt16) { bytes.append(UInt8(v >> 8)); bytes.append(UInt8(v & 0xFF)) }

    mutating func u32(_ v: UInt32) {
        bytes.append(UInt8(v >> 24)); bytes.append(UInt8((v >> 16) & 0xFF))
        bytes.append(UInt8((v >> 8) & 0xFF)); bytes.append(UInt8(v & 0xFF))
    }

    mutating func name(_ name: DNSMessage.Name) throws(DNSMessage.FormatError) {
        let raw = name.labels.map { Array($0.utf8) }
        var total = 1
        for label in raw {
            guard !label.isEmpty, label.count <= 63 else { throw .badName }
            total += 1 + label.count
        }
        guard total <= 255 else { throw .badName }
        let canonical = name.canonical
        for i in raw.indices {
            let suffix = Array(canonical[i...])
            if compress, let at = suffixes[suffix] {
                u16(0xC000 | UInt16(at))
                return
            }
            if compress, bytes.count < 0x4000 { suffixes[suffix] = bytes.count }
            bytes.append(UInt8(raw[i].count))
            bytes.append(contentsOf: raw[i])
        }
        bytes.append(0)
    }

    mutating func record(_ record: DNSMessage.Record) throws(DNSMessage.FormatError) {
        try name(record.name)
        u16(record.type.rawValue)
        u16((record.recordClass & 0x7FFF) | (record.cacheFlush ? 0x8000 : 0))
        u32(record.ttl)
        let lengthAt = bytes.count
        u16(0)
        switch record.data {
        case .ptr(let target):
            try name(target)
        case .srv(let priority, let weight, let port, let target):
            u16(priority); u16(weight); u16(port)
            // Compressed like any other name, as RFC 6762 §18.14 allows in multicast DNS.
            try name(target)
        case .txt(let strings):
            if strings.isEmpty { bytes.append(0) }
            for s in strings {
                guard s.count <= 255 else { throw .badRData }
                bytes.append(UInt8(s.count))
                bytes.append(contentsOf: s)
            }
        case .a(let address):
            guard address.count == 4 else { throw .badRData }
            bytes.append(contentsOf: address)
        case .aaaa(let address):
            guard address.count == 16 else { throw .badRData }
            bytes.append(contentsOf: address)
        case .other(_, let rdata):
            bytes.append(contentsOf: rdata)
        }
        let length = bytes.count - lengthAt - 2
        guard length <= 0xFFFF else { throw .tooLarge }
        bytes[lengthAt] = UInt8(length >> 8)
        bytes[lengthAt + 1] = UInt8(length & 0xFF)
    }
}

private extension String {
    /// Every occurrence of `target` replaced (no Foundation needed).
    func replacingAll(_ target: Character, with replacement: String) -> String {
        guard contains(target) else { return self }
        var out = ""
        for c in self { if c == target { out += replacement } else { out.append(c) } }
        return out
    }
}
