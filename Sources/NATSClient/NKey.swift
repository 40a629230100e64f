import Crypto
import Foundation

/// NATS NKEY authentication: an Ed25519 key pair written as base32 text with a type prefix and a CRC-16
/// (a user's public key starts with `U`, its seed with `SU`). The server sends a nonce in `INFO`; the client
/// answers in `CONNECT` with its public key (`nkey`) and the nonce signed with the seed (`sig`,
/// base64url without padding).
///
/// ```swift
/// let key = try NKey(seed: "SUAM…")        // or NKey.fromFile(path) / NATS_NKEY=path
/// key.publicKey                           // "UDXU4…", what the server's configuration lists
/// ```
public struct NKey: Sendable {
    /// What a key identifies; the first letter of its public key.
    public enum Kind: Sendable {
        case user, account, `operator`
        /// Type prefix (the first 5 bits of the first byte).
        var prefix: UInt8 {
            switch self {
            case .user: 20 << 3        // 'U'
            case .account: 0           // 'A'
            case .operator: 14 << 3    // 'O'
            }
        }
    }

    /// Type prefixes (the first 5 bits of the first byte).
    static let seedPrefix: UInt8 = 18 << 3     // 'S'
    static let userPrefix: UInt8 = Kind.user.prefix

    /// The 32-byte Ed25519 seed.
    let raw: [UInt8]
    /// A user key, unless made otherwise (account and operator keys sign JWTs; only users connect).
    public let kind: Kind
    private var key: Curve25519.Signing.PrivateKey { (try? Curve25519.Signing.PrivateKey(rawRepresentation: raw))! }

    /// A user key from its seed text (`SU…`).
    public init(seed text: String) throws {
        guard let raw = Base32.decode(text.trimmingCharacters(in: .whitespacesAndNewlines)), raw.count == 36 else {
            throw NATSError.credentials("NKEY seed: not a seed (expected 58 characters of base32 starting with SU)")
        }
        guard CRC16.xmodem(raw[0..<34]) == UInt16(raw[34]) | UInt16(raw[35]) << 8 else {
            throw NATSError.credentials("NKEY seed: checksum mismatch (mistyped or truncated)")
        }
        let b0 = raw[0] & 0xF8
        let type = ((raw[0] & 0x07) << 5) | ((raw[1] & 0xF8) >> 3)
        guard b0 == Self.seedPrefix, type == Self.userPrefix else {
            throw NATSError.credentials("NKEY seed: not a user seed (it should start with SU)")
        }
        self.raw = Array(raw[2..<34])
        self.kind = .user
        _ = try Curve25519.Signing.PrivateKey(rawRepresentation: self.raw)
    }

    /// A fresh user key (tests, tools).
    public static func generateUser() -> NKey { generate(.user) }

    /// A fresh key of any kind (tests, tools: an operator and an account key sign the JWTs of operator mode).
    public static func generate(_ kind: Kind) -> NKey { NKey(raw: Array(Curve25519.Signing.PrivateKey().rawRepresentation), kind: kind) }

    private init(raw: [UInt8], kind: Kind) { self.raw = raw; self.kind = kind }

    /// Reads a seed from a file: a bare seed, or the seed block of a `.creds` file.
    public static func fromFile(_ path: String) throws -> NKey {
        guard let text = try? String(contentsOfFile: path, encoding: .utf8) else {
            throw NATSError.credentials("NKEY seed file \(path): cannot read it")
        }
        guard let line = text.split(whereSeparator: \.isNewline).map({ $0.trimmingCharacters(in: .whitespaces) }).first(where: { $0.hasPrefix("SU") }) else {
            throw NATSError.credentials("NKEY seed file \(path): no user seed (a line starting with SU)")
        }
        return try NKey(seed: line)
    }

    /// The public key text (`U…` for a user, `A…` an account, `O…` an operator).
    public var publicKey: String {
        var raw: [UInt8] = [kind.prefix] + Array(key.publicKey.rawRepresentation)
        let crc = CRC16.xmodem(raw[...])
        raw += [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        return Base32.encode(raw)
    }

    /// The seed text (`SU…` for a user).
    public var seed: String {
        var raw: [UInt8] = [Self.seedPrefix | (kind.prefix >> 5), (kind.prefix & 0x1F) << 3] + self.raw
        let crc = CRC16.xmodem(raw[...])
        raw += [UInt8(crc & 0xFF), UInt8(crc >> 8)]
        return Base32.encode(raw)
    }

    /// The nonce signed, as `CONNECT`'s `sig` wants it.
    public func sign(nonce: String) throws -> String {
        Base64URL.encode(try sign(Array(nonce.utf8)))
    }

    /// An Ed25519 signature of `bytes`.
    public func sign(_ bytes: [UInt8]) throws -> [UInt8] {
        Array(try key.signature(for: bytes))
    }
}

/// RFC 4648 base64url without padding (JWTs, `CONNECT`'s `sig`).
enum Base64URL {
    static func encode(_ bytes: [UInt8]) -> String {
        Data(bytes).base64EncodedString()
            .replacingOccurrences(of: "+", with: "-").replacingOccurrences(of: "/", with: "_").replacingOccurrences(of: "=", with: "")
    }

    static func decode(_ text: some StringProtocol) -> [UInt8]? {
        var t = text.replacingOccurrences(of: "-", with: "+").replacingOccurrences(of: "_", with: "/")
        while t.count % 4 != 0 { t += "=" }
        return Data(base64Encoded: t).map(Array.init)
    }
}

/// RFC 4648 base32, upper case, without padding (as NKEYs are written).
enum Base32 {
    static let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZ234567".utf8)

    static func encode(_ bytes: [UInt8]) -> String {
        var out: [UInt8] = []
        var buffer = 0, bits = 0
        for b in bytes {
            buffer = (buffer << 8) | Int(b)
            bits += 8
            while bits >= 5 {
                out.append(alphabet[(buffer >> (bits - 5)) & 31])
                bits -= 5
            }
            buffer &= (1 << bits) - 1
        }
        if bits > 0 { out.append(alphabet[(buffer << (5 - bits)) & 31]) }
        return String(decoding: out, as: UTF8.self)
    }

    static func decode(_ text: String) -> [UInt8]? {
        var out: [UInt8] = []
        var buffer = 0, bits = 0
        for c in text.utf8 {
            guard let v = alphabet.firstIndex(of: c) else { return nil }
            buffer = (buffer << 5) | v
            bits += 5
            if bits >= 8 {
                out.append(UInt8((buffer >> (bits - 8)) & 0xFF))
                bits -= 8
            }
            buffer &= (1 << bits) - 1
        }
        return out
    }
}

/// CRC-16/XMODEM (polynomial 0x1021, initial 0), the checksum of NKEY texts.
enum CRC16 {
    static func xmodem(_ bytes: ArraySlice<UInt8>) -> UInt16 {
        var crc: UInt16 = 0
        for b in bytes {
            crc ^= UInt16(b) << 8
            for _ in 0..<8 { crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1 }
        }
        return crc
    }
}
