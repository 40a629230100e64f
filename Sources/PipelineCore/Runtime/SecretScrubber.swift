import Foundation
import Logging

/// The secrets one node holds (API keys, tokens, secret keys, header values, passwords in URLs), and
/// the one place that takes them out of text: every event a node emits and every line its logger writes
/// pass through it, so a peer that echoes a request back (`HTTP 401 … bad key: Bearer sk-…`) puts no
/// secret in an event, a log line, the console, `/metrics` or NATS (DESIGN.md: secrets never appear in
/// logs or events).
///
/// The runtime fills it from the node's parameters declared `secret` (``ParamSpec/secret``) and from
/// the passwords of URLs in any parameter; a node that takes a secret from elsewhere (an environment
/// variable, a file) adds it with ``add(_:)``. Each secret is also looked for in the forms an echo may
/// take: percent-encoded, JSON-escaped, the token of an `Authorization` value, Basic credentials in
/// base64; and a secret cut short at the end of a shortened text (`sk-abc…`) is removed too.
/// Secrets shorter than ``minimumLength`` characters are not looked for (they cannot be told from
/// ordinary text).
public final class SecretScrubber: Sendable {
    /// What replaces a secret.
    public static let replacement = "(secret)"
    /// Shortest secret looked for.
    public static let minimumLength = 4
    /// The forms looked for, longest first.
    private let forms = LockedValue<[String]>([])

    /// A scrubber for `secrets` (empty ones are ignored).
    public init(_ secrets: [String] = []) {
        for s in secrets { add(s) }
    }

    /// A scrubber for a node's secrets: the values of its `secret` parameters (each value of a
    /// mapping, e.g. headers), and the password of every URL among its parameters.
    public convenience init(config: NodeConfig, parameters: [ParamSpec]) {
        self.init()
        let secret = Set(parameters.filter(\.secret).map(\.name))
        for (name, value) in config.values {
            addAll(value, secret: secret.contains(name))
        }
    }

    private func addAll(_ value: ParamValue, secret: Bool) {
        switch value {
        case .string(let s):
            // A URL given as a secret parameter (nats-sink's url) is secret for its password only: the
            // address itself names the peer in messages.
            if secret && !s.contains("://") { add(s) }
            addURLPasswords(s)
        case .int(let i): if secret { add(String(i)) }
        case .double(let d): if secret { add(String(d)) }
        case .list(let l): for v in l { addAll(v, secret: secret) }
        case .map(let m): for v in m.values { addAll(v, secret: secret) }
        case .bool, .null: break
        }
    }

    /// True when there is nothing to look for.
    public var isEmpty: Bool { forms.withLock { $0.isEmpty } }

    /// Adds a secret (with the forms an echo may give it). A header value `Scheme token` adds the
    /// token too; a URL adds its password.
    public func add(_ secret: String) {
        var found: [String] = []
        func form(_ s: String) {
            guard s.count >= Self.minimumLength else { return }
            found.append(s)
            if let encoded = s.addingPercentEncoding(withAllowedCharacters: .alphanumerics), encoded != s { found.append(encoded) }
            let json = s.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\"", with: "\\\"").replacingOccurrences(of: "/", with: "\\/")
            if json != s { found.append(json) }
        }
        let trimmed = secret.trimmingCharacters(in: .whitespacesAndNewlines)
        form(trimmed)
        // `Bearer tok`, `Basic dXNlcjpwYXNz`, `Token tok`: the credentials alone.
        let parts = trimmed.split(separator: " ", maxSplits: 1)
        if parts.count == 2 {
            let credentials = String(parts[1]).trimmingCharacters(in: .whitespaces)
            form(credentials)
            if parts[0].lowercased() == "basic", let data = Data(base64Encoded: credentials),
               let plain = String(data: data, encoding: .utf8), let colon = plain.firstIndex(of: ":") {
                form(String(plain[plain.index(after: colon)...]))
            }
        }
        addURLPasswords(trimmed, into: &found)
        insert(found)
    }

    private func addURLPasswords(_ text: String) {
        var found: [String] = []
        addURLPasswords(text, into: &found)
        insert(found)
    }

    /// The passwords of the URLs in `text` (`scheme://user:password@host`, comma-separated lists too),
    /// with the Basic credentials an HTTP client would send for them.
    private func addURLPasswords(_ text: String, into found: inout [String]) {
        guard text.contains("://"), text.contains("@") else { return }
        for item in text.split(separator: ",") {
            guard let c = URLComponents(string: item.trimmingCharacters(in: .whitespaces)),
                  let password = c.percentEncodedPassword, !password.isEmpty else { continue }
            let plain = password.removingPercentEncoding ?? password
            for p in Set([password, plain]) where p.count >= Self.minimumLength { found.append(p) }
            let user = c.user ?? ""
            let basic = Data("\(user):\(plain)".utf8).base64EncodedString()
            found.append(basic)
        }
    }

    private func insert(_ found: [String]) {
        guard !found.isEmpty else { return }
        forms.withLock { forms in
            for f in found where !forms.contains(f) { forms.append(f) }
            forms.sort { $0.count > $1.count }
        }
    }

    /// `text` with every secret replaced by ``replacement``.
    public func scrub(_ text: String) -> String {
        let list = forms.withLock { $0 }
        guard !list.isEmpty, !text.isEmpty else { return text }
        var out = text
        for secret in list where out.contains(secret) {
            out = out.replacingOccurrences(of: secret, with: Self.replacement)
        }
        // A text shortened with `…` may end in the start of a secret.
        if out.hasSuffix("…") {
            let body = out.dropLast()
            for secret in list {
                var k = secret.count - 1
                while k >= Self.minimumLength {
                    if body.hasSuffix(secret.prefix(k)) {
                        return String(body.dropLast(k)) + Self.replacement + "…"
                    }
                    k -= 1
                }
            }
        }
        return out
    }

    /// A field value with every string in it scrubbed.
    public func scrub(_ value: EventValue) -> EventValue {
        switch value {
        case .string(let s): .string(scrub(s))
        case .array(let a): .array(a.map(scrub))
        case .object(let o): .object(o.mapValues(scrub))
        default: value
        }
    }

    /// An event with every string field scrubbed.
    public func scrub(_ event: Event) -> Event {
        guard !isEmpty else { return event }
        var e = event
        e.fields = e.fields.map { ($0.0, scrub($0.1)) }
        return e
    }

    /// `logger` writing through this scrubber (its messages and metadata).
    public func logger(_ logger: Logger) -> Logger {
        var wrapped = logger
        wrapped.handler = ScrubbingLogHandler(inner: logger.handler, scrubber: self)
        return wrapped
    }
}

/// A log handler that takes a node's secrets out of each message and metadata value before passing
/// it on.
struct ScrubbingLogHandler: LogHandler {
    var inner: any LogHandler
    let scrubber: SecretScrubber

    var metadataProvider: Logger.MetadataProvider? {
        get { inner.metadataProvider }
        set { inner.metadataProvider = newValue }
    }
    var metadata: Logger.Metadata {
        get { inner.metadata }
        set { inner.metadata = newValue }
    }
    var logLevel: Logger.Level {
        get { inner.logLevel }
        set { inner.logLevel = newValue }
    }
    subscript(metadataKey key: String) -> Logger.Metadata.Value? {
        get { inner[metadataKey: key] }
        set { inner[metadataKey: key] = newValue }
    }

    func log(event: LogEvent) {
        var e = event
        if !scrubber.isEmpty {
            e.message = Logger.Message(stringLiteral: scrubber.scrub(event.message.description))
            e.metadata = event.metadata.map { $0.mapValues(scrub) }
        }
        inner.log(event: e)
    }

    private func scrub(_ v: Logger.Metadata.Value) -> Logger.Metadata.Value {
        switch v {
        case .string(let s): .string(scrubber.scrub(s))
        case .stringConvertible(let c): .string(scrubber.scrub(c.description))
        case .array(let a): .array(a.map(scrub))
        case .dictionary(let d): .dictionary(d.mapValues(scrub))
        }
    }
}
