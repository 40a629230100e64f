import PipelineCore

/// A running pipeline the console can show: a session of `voicepipe serve`, or a graph of `voicepipe run`.
package struct LiveSession: Sendable {
    /// The session id (serve) or `graph#instance` (run).
    var id: String
    /// The route (serve) or graph file (run).
    var route: String
    var started: ContinuousClock.Instant
    var pipeline: Pipeline

    package init(id: String, route: String, started: ContinuousClock.Instant, pipeline: Pipeline) {
        self.id = id
        self.route = route
        self.started = started
        self.pipeline = pipeline
    }
}
