import PipelineCore

/// Tencent Cloud's AppId, SecretId and SecretKey, as the Tencent engines (`asr`, `tts`) take them: each from
/// its parameter, else from `TENCENTCLOUD_APPID`, `TENCENTCLOUD_SECRET_ID`, `TENCENTCLOUD_SECRET_KEY` in the
/// node's environment.
public struct TencentCredentials: Sendable {
    public var appID: String
    public var secretID: String
    public var secretKey: String

    /// Throws `missing_credentials` naming every one that is missing (never a value).
    public init(appID: String?, secretID: String?, secretKey: String?, environment: [String: String]) throws {
        func credential(_ value: String?, _ variable: String) -> String? {
            if let v = value, !v.isEmpty { return v }
            if let v = environment[variable], !v.isEmpty { return v }
            return nil
        }
        let app = credential(appID, "TENCENTCLOUD_APPID")
        let sid = credential(secretID, "TENCENTCLOUD_SECRET_ID")
        let skey = credential(secretKey, "TENCENTCLOUD_SECRET_KEY")
        var missing: [String] = []
        if app == nil { missing.append("app_id (or TENCENTCLOUD_APPID)") }
        if sid == nil { missing.append("secret_id (or TENCENTCLOUD_SECRET_ID)") }
        if skey == nil { missing.append("secret_key (or TENCENTCLOUD_SECRET_KEY)") }
        guard let app, let sid, let skey else {
            throw NodeError(.missingCredentials, "engine tencent needs " + missing.joined(separator: ", "))
        }
        self.appID = app
        self.secretID = sid
        self.secretKey = skey
    }
}
