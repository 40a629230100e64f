import Foundation
import Synchronization

/// State shared by all nodes of one pipeline run.
final class PipelineShared: Sendable {
    let start = ContinuousClock.now
    let bus = EventBus()
    let progress = ProgressBoard()
    private let stopping = Atomic<Bool>(false)
    let stopSignal = StopSignal()

    var elapsed: Double {
        let d = ContinuousClock.now - start
        return Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
    var isStopping: Bool { stopping.load(ordering: .relaxed) }
    func markStopping() { stopping.store(true, ordering: .relaxed) }
    /// A graceful stop, as `Pipeline.stop()` does.
    func requestStop() {
        markStopping()
        stopSignal.fire()
    }
}
