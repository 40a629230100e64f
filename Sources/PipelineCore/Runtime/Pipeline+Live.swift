/// What a live view of a running pipeline reads: each edge's current queue depth and audio level, on
/// top of ``Pipeline/edgeStats``.
public struct EdgeLive: Sendable, Hashable {
    /// The consumer's input, `node.port`.
    public var input: String
    /// Frames queued now (0 for a fused link, which has no queue).
    public var depth: Int
    /// Highest peak of the audio taken since the previous read, 0...1 of full scale (0 when not watched
    /// or not audio).
    public var peak: Double
}

extension Pipeline {
    /// Current depth and level of every edge, in the order of ``edgeStats``. Reading starts the next
    /// level interval.
    public var edgeLive: [EdgeLive] {
        edgeOrder.compactMap { key in
            if let e = edges[key] { return EdgeLive(input: key, depth: e.depth, peak: e.level.takePeak()) }
            if let f = fusedEdges[key] { return EdgeLive(input: key, depth: 0, peak: f.level.takePeak()) }
            return nil
        }
    }

    /// Starts (`true`) or stops measuring the audio level on every edge; calls nest (one per viewer).
    /// Unwatched, an edge does not look at its frames.
    public func watchLevels(_ on: Bool) {
        for e in edges.values { e.level.watch(on) }
        for f in fusedEdges.values { f.level.watch(on) }
    }
}
