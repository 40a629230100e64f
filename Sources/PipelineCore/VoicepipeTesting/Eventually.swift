/// Waits, in real time and up to `timeout`, until `condition` holds; returns whether it did. For states
/// that no event announces: a node's private progress, a producer parked on a full queue. The
/// condition is checked at once and then every `every`.
///
/// ```swift
/// #expect(await eventually { await edge.waitingProducers == 1 })
/// ```
public func eventually(timeout: Duration = .seconds(10), every step: Duration = .milliseconds(1),
                       _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now + timeout
    while await !condition() {
        if ContinuousClock.now >= deadline { return false }
        try? await Task.sleep(for: step)
    }
    return true
}
