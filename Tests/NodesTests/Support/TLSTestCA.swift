import Foundation
import NIOSSL

/// A throw-away certificate authority made at test time with the `openssl` command line tool,
/// and a server certificate it signed for `localhost` and `127.0.0.1`.
///
/// ```swift
/// let ca = try TestCA.make()
/// let context = try TestCA.serverContext(certPath: ca.certPath, keyPath: ca.keyPath)
/// // client side: trust ca.caPath (e.g. a node's `ca_file`)
/// ```
enum TestCA {
    /// Paths of the CA certificate, the server certificate and the server key (PEM), in a fresh
    /// temporary directory.
    struct Files: Sendable {
        var caPath: String
        var certPath: String
        var keyPath: String
        var directory: String
    }

    /// Makes a CA and a server certificate (SAN `DNS:localhost`, `IP:127.0.0.1`), valid for two days.
    static func make(commonName: String = "localhost") throws -> Files {
        let dir = (temporaryPath("ca") as NSString).deletingLastPathComponent
        func path(_ name: String) -> String { (dir as NSString).appendingPathComponent(name) }
        let ext = path("server.ext")
        try """
        subjectAltName=DNS:localhost,IP:127.0.0.1
        basicConstraints=critical,CA:FALSE
        keyUsage=critical,digitalSignature,keyEncipherment
        extendedKeyUsage=serverAuth
        """.write(toFile: ext, atomically: true, encoding: .utf8)
        let steps: [[String]] = [
            ["req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", path("ca.key"), "-out", path("ca.pem"), "-days", "2", "-subj", "/CN=voicepipe test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"],
            ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", path("server.key"), "-out", path("server.csr"), "-subj", "/CN=\(commonName)"],
            ["x509", "-req", "-in", path("server.csr"), "-CA", path("ca.pem"), "-CAkey", path("ca.key"),
             "-CAcreateserial", "-out", path("server.pem"), "-days", "2", "-extfile", ext],
        ]
        for args in steps {
            let r = try shell("openssl", args)
            guard r.status == 0 else { throw TestCAError(message: "openssl \(args[0]) failed: \(r.error)") }
        }
        return Files(caPath: path("ca.pem"), certPath: path("server.pem"), keyPath: path("server.key"), directory: dir)
    }

    /// A TLS server context presenting the certificate and key at these paths.
    static func serverContext(certPath: String, keyPath: String) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(certPath).map { NIOSSLCertificateSource.certificate($0) }
        let key = try NIOSSLPrivateKey(file: keyPath, format: .pem)
        let config = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        return try NIOSSLContext(configuration: config)
    }

    /// A server context for a freshly made CA (convenience).
    static func serverContext(_ files: Files) throws -> NIOSSLContext {
        try serverContext(certPath: files.certPath, keyPath: files.keyPath)
    }
}

/// The `openssl` tool failed.
struct TestCAError: Error, CustomStringConvertible {
    var message: String
    var description: String { message }
}
