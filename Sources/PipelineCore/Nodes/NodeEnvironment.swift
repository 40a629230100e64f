import Logging

/// What a node's factory is given from outside the graph file: its id, the environment variables
/// the graph was loaded with, the pipeline's clock and a logger labelled with the node id.
///
/// Nodes read credentials and settings that come from the environment here — never from the
/// process directly — so a test or an embedding app decides what they see.
public struct NodeEnvironment: Sendable {
    /// The node's id in the graph.
    public var id: String
    /// Environment variables (those the graph was loaded with; the process's by default).
    public var variables: [String: String]
    /// Clock for pacing and timeouts (a manual clock in tests).
    public var clock: any Clock<Duration>
    /// Logger labelled with the node id. Never log secrets.
    public var logger: Logger

    /// Creates an environment.
    public init(id: String, variables: [String: String] = [:], clock: any Clock<Duration> = ContinuousClock(),
                logger: Logger = Logger(label: "voicepipe")) {
        self.id = id
        self.variables = variables
        self.clock = clock
        var l = logger
        l[metadataKey: "node"] = .string(id)
        self.logger = l
    }
}
