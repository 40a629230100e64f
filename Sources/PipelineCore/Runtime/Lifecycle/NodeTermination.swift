/// What a pipeline does when one node's task ends: it finished (returned, its outputs finished), or it
/// failed after any restarts its policy allowed. Set per node in ``Pipeline/Options/termination``.
///
/// ```swift
/// var options = Pipeline.Options()
/// options.termination["uploader"] = .optional          // its failure is reported, the rest goes on
/// options.termination["script"] = .endsPipeline        // when it is done, the whole graph drains
/// ```
public struct NodeTermination: Sendable, Hashable {
    enum Reaction: Sendable, Hashable {
        /// The rest goes on (a failure is still logged and published as an `error` event).
        case ignore
        /// The pipeline stops gracefully, as ``Pipeline/stop()`` does.
        case stopPipeline
        /// The pipeline cancels every node; a failure is the run's outcome.
        case cancelPipeline
    }

    let onFinish: Reaction
    let onFailure: Reaction

    /// A node that finishes leaves the others running (the run ends when every node has); a failure
    /// cancels the pipeline and is the run's outcome.
    public static let `default` = NodeTermination(onFinish: .ignore, onFailure: .cancelPipeline)
    /// The node's end ends the run: when it finishes the pipeline stops gracefully (drains); a failure
    /// cancels it.
    public static let endsPipeline = NodeTermination(onFinish: .stopPipeline, onFailure: .cancelPipeline)
    /// The node may finish or fail without ending the run: a failure is logged and published as an
    /// `error` event, and the run's outcome does not change.
    public static let optional = NodeTermination(onFinish: .ignore, onFailure: .ignore)
}
