import PipelineCore

/// Wakes one waiting task when something changed (audio queued, input ended, a connection
/// accepted). A ring with nobody waiting is remembered until the next wait; rings that come while
/// one is remembered are the same news. Cancellation ends a wait at once.
///
/// A ``Handoff`` of one empty element that keeps the first ring (drop-newest): its state machine holds
/// the rules.
final class TencentDoorbell: Sendable {
    private let bell = Handoff<Void>(capacity: 1, overflow: .dropNewest)

    init() {}

    /// Wakes the waiter (or the next one to wait).
    func ring() {
        bell.trySend(())
    }

    /// Waits for a ring (returns at once if one came since the last wait, or on cancellation).
    func wait() async {
        _ = await bell.receive()
    }
}
