import Crypto
import Foundation

/// Request signing of the digital-human aPaaS API.
///
/// Every request carries `appkey`, `timestamp` (seconds) and, for the command channel, `requestid`
/// in its query string, plus `signature`: the other query parameters sorted by name and joined as
/// `k=v&k=v`, HMAC-SHA256 with the access token as key, base64, then URL-encoded.
///
/// ```swift
/// let s = IVHSignature.sign(["appkey": "e38267c0e86411ebb02aed82acb0ed99", "timestamp": "1646636485"],
///                           accessToken: "f68f2d10ae9e4604b76fb05cf46bccec")
/// // s == "BfWuaC9kmaicCggXc693uK+sZQ8qe88O4HVQNTdwZuo="
/// ```
public enum IVHSignature {
    /// The text that is signed: parameters other than `signature`, sorted by name, as `k=v&...`.
    public static func canonical(_ parameters: [String: String]) -> String {
        parameters.filter { $0.key != "signature" }
            .sorted { $0.key < $1.key }
            .map { "\($0.key)=\($0.value)" }
            .joined(separator: "&")
    }

    /// The base64 signature of `parameters` (before URL encoding).
    public static func sign(_ parameters: [String: String], accessToken: String) -> String {
        let key = SymmetricKey(data: Data(accessToken.utf8))
        let mac = HMAC<SHA256>.authenticationCode(for: Data(canonical(parameters).utf8), using: key)
        return Data(mac).base64EncodedString()
    }

    /// The full query string: the parameters in canonical order, then `signature`, every value
    /// URL-encoded.
    public static func query(_ parameters: [String: String], accessToken: String) -> String {
        let signature = sign(parameters, accessToken: accessToken)
        let pairs = parameters.filter { $0.key != "signature" }.sorted { $0.key < $1.key } + [("signature", signature)]
        return pairs.map { "\(percentEncode($0.0))=\(percentEncode($0.1))" }.joined(separator: "&")
    }

    /// The signed query for a request at `timestamp` (seconds since 1970).
    public static func query(appkey: String, accessToken: String, timestamp: Int, requestID: String? = nil) -> String {
        var p = ["appkey": appkey, "timestamp": String(timestamp)]
        if let requestID { p["requestid"] = requestID }
        return query(p, accessToken: accessToken)
    }

    /// Percent-encodes everything but RFC 3986 unreserved characters (so `+`, `/`, `=` are encoded).
    public static func percentEncode(_ s: String) -> String {
        var allowed = CharacterSet.alphanumerics.intersection(CharacterSet(charactersIn: Unicode.Scalar(0)...Unicode.Scalar(127)))
        allowed.insert(charactersIn: "-._~")
        return s.addingPercentEncoding(withAllowedCharacters: allowed) ?? s
    }
}
