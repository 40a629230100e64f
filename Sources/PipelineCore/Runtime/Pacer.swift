/// Paces frames against the injected clock: `wait(until:)` sleeps until an offset from the
/// moment the pacer was made. Sources use it to deliver media at 1x real time.
///
/// ```swift
/// let pacer = context.makePacer()
/// try await pacer.wait(until: .nanoseconds(frame.pts + frame.durationNanos))
/// ```
public struct Pacer: Sendable {
    private let sleepUntil: @Sendable (Duration) async throws -> Void
    private let elapsedNow: @Sendable () -> Duration

    /// A pacer whose time zero is now on `clock`.
    public init<C: Clock<Duration>>(clock: C) {
        let start = clock.now
        sleepUntil = { offset in try await clock.sleep(until: start.advanced(by: offset), tolerance: nil) }
        elapsedNow = { start.duration(to: clock.now) }
    }

    /// Sleeps until `offset` after time zero (returns at once if that is past).
    public func wait(until offset: Duration) async throws { try await sleepUntil(offset) }

    /// Time since time zero.
    public var elapsed: Duration { elapsedNow() }
}

extension NodeContext {
    /// A pacer whose time zero is now, on the pipeline's clock.
    public func makePacer() -> Pacer { Pacer(clock: clock) }
}
