import Foundation
import PipelineCore
import TencentASR

extension TencentASRConfiguration {
    /// Resolves the engine's parameters, with credentials defaulting to `environment` (the node's
    /// ``NodeEnvironment/variables``). Throws `missing_credentials` naming what is missing (never a value).
    public init(parameters p: TencentASREngine.Configuration, environment: [String: String]) throws {
        let credentials = try TencentCredentials(appID: p.appID, secretID: p.secretID, secretKey: p.secretKey, environment: environment)
        let endpoint: TencentEndpoint
        if let e = p.endpoint, !e.isEmpty {
            guard let parsed = TencentEndpoint(e) else {
                throw NodeError(.badEndpoint, "endpoint \"\(e)\": expected ws://host[:port][/prefix] or wss://...")
            }
            endpoint = parsed
        } else {
            endpoint = .default
        }
        var reconnect = TencentReconnectPolicy()
        if let attempts = p.reconnectAttempts { reconnect.maxAttempts = max(1, attempts) }
        self.init(appID: credentials.appID, secretID: credentials.secretID, secretKey: credentials.secretKey, endpoint: endpoint,
                  engineModelType: p.model, extraParameters: (p.params ?? [:]).merging(p.serviceParameters) { $1 }, caFile: p.caFile,
                  reconnect: reconnect, maxHeldMs: p.holdMs ?? Self.defaultMaxHeldMs,
                  finalTimeout: .milliseconds(p.finalTimeoutMs ?? 15_000), handshakeTimeout: .milliseconds(p.handshakeTimeoutMs ?? 10_000))
        idleEnd = .milliseconds(p.idleEndMs ?? Self.defaultIdleEndMs)
    }

    /// Resolves untyped parameter values (as ``init(parameters:environment:)`` does; for tests and
    /// callers that hold a ``NodeConfig``). Values of other parameters are ignored.
    public init(config: NodeConfig, environment: [String: String]) throws {
        try self.init(parameters: ParameterDecoder.decode(TencentASREngine.Configuration.self, from: config.values),
                      environment: environment)
    }

    /// The problems ``TencentASREngine/Configuration/problems()`` reports for untyped parameter
    /// values (for tests and callers that hold a ``NodeConfig``).
    public static func check(_ config: NodeConfig) -> [String] {
        do {
            return try ParameterDecoder.decode(TencentASREngine.Configuration.self, from: config.values).problems()
        } catch {
            return ["\(error)"]
        }
    }
}
