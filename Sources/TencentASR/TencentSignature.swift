import Crypto
import Foundation

/// The request signature of Tencent Cloud's real-time speech recognition API (v2).
///
/// The signed text is `<host><path>?<every query parameter except signature, sorted by name,
/// as k=v joined with &>`, where `host` is the bare host name (no port, even when the endpoint
/// has one — what the official SDKs sign). The signature
/// is HMAC-SHA1 of that text with the secret key, base64-encoded; it travels URL-encoded as the
/// `signature` query parameter.
///
/// ```swift
/// let text = TencentSignature.signedText(host: "asr.cloud.tencent.com", path: "/asr/v2/1259228442",
///                                        parameters: ["secretid": "AKID...", "timestamp": "1592294092"])
/// let sig = TencentSignature.sign(text, secretKey: key)      // base64
/// ```
public enum TencentSignature {
    /// The text to sign. Values are used as given (not URL-encoded), as the service's SDKs do.
    public static func signedText(host: String, path: String, parameters: [String: String]) -> String {
        host + path + "?" + canonicalQuery(parameters.filter { $0.key != "signature" }, encode: false)
    }

    /// HMAC-SHA1 of `text` keyed with `secretKey`, base64-encoded.
    public static func sign(_ text: String, secretKey: String) -> String {
        let key = SymmetricKey(data: Data(secretKey.utf8))
        let mac = HMAC<Insecure.SHA1>.authenticationCode(for: Data(text.utf8), using: key)
        return Data(mac).base64EncodedString()
    }

    /// `k=v` pairs sorted by name (byte order) and joined with `&`; values (and names) are
    /// percent-encoded when `encode` is true.
    public static func canonicalQuery(_ parameters: [String: String], encode: Bool) -> String {
        parameters.sorted { Array($0.key.utf8).lexicographicallyPrecedes(Array($1.key.utf8)) }.map { k, v in
            encode ? percentEncode(k) + "=" + percentEncode(v) : k + "=" + v
        }.joined(separator: "&")
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters (so `+`, `/` and `=` of a
    /// base64 signature become `%2B`, `%2F`, `%3D`).
    public static func percentEncode(_ s: String) -> String {
        var out = ""
        out.reserveCapacity(s.utf8.count)
        for b in s.utf8 {
            switch b {
            case UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "_"), UInt8(ascii: "."), UInt8(ascii: "~"):
                out.unicodeScalars.append(Unicode.Scalar(b))
            default:
                out += String(format: "%%%02X", b)
            }
        }
        return out
    }

    /// Decodes `%XX` escapes (and `+` as a space) of one query component.
    public static func percentDecode(_ s: String) -> String {
        var bytes: [UInt8] = []
        var it = Array(s.utf8)[...]
        while let b = it.popFirst() {
            if b == UInt8(ascii: "%"), it.count >= 2, let v = UInt8(String(decoding: it.prefix(2), as: UTF8.self), radix: 16) {
                bytes.append(v)
                it = it.dropFirst(2)
            } else if b == UInt8(ascii: "+") {
                bytes.append(UInt8(ascii: " "))
            } else {
                bytes.append(b)
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }

    /// Splits a raw query string into decoded name/value pairs.
    public static func parseQuery(_ query: String) -> [(String, String)] {
        query.split(separator: "&", omittingEmptySubsequences: true).map { pair in
            let parts = pair.split(separator: "=", maxSplits: 1, omittingEmptySubsequences: false)
            return (percentDecode(String(parts[0])), parts.count > 1 ? percentDecode(String(parts[1])) : "")
        }
    }
}
