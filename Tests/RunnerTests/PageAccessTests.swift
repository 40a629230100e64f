import Testing
@testable import VoicepipeCLI
@testable import VoicepipeServe

/// Who may see the browser pages (no sockets: the rule alone).
@Suite("page access")
struct PageAccessTests {
    let local = "127.0.0.1", remote = "192.0.2.7"

    @Test("without a token: loopback clients only")
    func loopbackOnly() {
        let open = PageAccess(token: nil)
        #expect(open.check(uri: "/console", authorization: [], remoteIP: local) == .allowed)
        #expect(open.check(uri: "/console", authorization: [], remoteIP: "::1") == .allowed)
        guard case .refused(403, _) = open.check(uri: "/console", authorization: [], remoteIP: remote) else { Issue.record("a remote client was let in"); return }
    }

    @Test("with a token: ?token= or Authorization: Bearer, from anywhere; wrong or missing is 401")
    func token() {
        let guarded = PageAccess(token: "s3cret-token")
        #expect(guarded.check(uri: "/console?token=s3cret-token", authorization: [], remoteIP: remote) == .allowed)
        #expect(guarded.check(uri: "/?route=raw&token=s3cret%2Dtoken", authorization: [], remoteIP: remote) == .allowed)
        #expect(guarded.check(uri: "/console", authorization: ["Bearer s3cret-token"], remoteIP: remote) == .allowed)
        #expect(guarded.check(uri: "/console?token=s3cret-toke", authorization: [], remoteIP: local) == .refused(status: 401, reason: "wrong token"))
        #expect(guarded.check(uri: "/console", authorization: ["Bearer nope"], remoteIP: remote) == .refused(status: 401, reason: "wrong token"))
        guard case .refused(401, _) = guarded.check(uri: "/console", authorization: [], remoteIP: local) else { Issue.record("no token was let in"); return }
    }
}
