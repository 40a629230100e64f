import Foundation

/// State shared by all nodes of one pipeline run.
final class PipelineShared: Sendable {
    let start = ContinuousClock.now
    let bus = EventBus()
    let progress = ProgressBoard()
    let lifecycle: PipelineLifecycle

    init(lifecycle: PipelineLifecycle) {
        self.lifecycle = lifecycle
    }

    var elapsed: Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    /// True once a stop, a cancel or a failure has been asked for.
    var isStopping: Bool { lifecycle.isStopping }
    /// A graceful stop, as `Pipeline.stop()` does.
    func requestStop() {
        lifecycle.stop()
    }
}
