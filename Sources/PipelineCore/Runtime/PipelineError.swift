/// A node failed and the pipeline stopped. `voicepipe run` exits with code 1 on this error.
public struct PipelineError: Error, Sendable, CustomStringConvertible {
    /// Id of the node that failed.
    public var node: String
    /// Stable code (from ``NodeError`` when the node threw one).
    public var code: NodeErrorCode
    /// What happened.
    public var message: String

    /// Creates an error.
    public init(node: String, code: NodeErrorCode, message: String) {
        self.node = node
        self.code = code
        self.message = message
    }

    public var description: String { "node '\(node)' failed: \(message)" }
}

/// Statistics of one node after (or during) a run.
public struct NodeStats: Sendable {
    /// Node id.
    public var id: String
    /// Times the node was restarted after a failure.
    public var restarts: Int
    /// Node-specific counters (overruns, late packets, ...).
    public var counters: [String: UInt64]
    /// Node-specific measurements (e.g. `clock_drift_ppm`).
    public var gauges: [String: Double] = [:]
}

