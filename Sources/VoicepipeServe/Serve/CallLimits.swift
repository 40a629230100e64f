import PipelineCore

/// The limits a carrier call (Twilio media stream, AudioSocket) is watched against: `max_duration_s` from
/// its start and `idle_timeout_ms` since its last message. Sleeps until the nearer deadline (the idle one
/// moves with each message), then looks again; returns which limit was reached, or nil when cancelled.
enum CallLimits {
    enum Reached { case maxDuration, idle }

    /// `lastInput` reads when the last message came, `touch` moves it; `reading` says whether the socket is
    /// read now. While reading is held back (the graph is behind the caller), the caller is not idle.
    static func watch(maxDuration: Duration, idle: Duration, lastInput: () -> ContinuousClock.Instant,
                      touch: (ContinuousClock.Instant) -> Void, reading: () -> Bool) async -> Reached? {
        let limit = ContinuousClock.now + maxDuration
        while !Task.isCancelled {
            let now = ContinuousClock.now
            if now >= limit { return .maxDuration }
            let last = lastInput()
            if now - last >= idle {
                if reading() { return .idle }
                touch(now)
                continue
            }
            try? await Task.sleep(until: min(limit, last + idle), clock: .continuous)
        }
        return nil
    }

    /// Watches `route`'s limits for a call whose last message time is `lastInput` in `outbound`, and pushes
    /// `idle` or `maxDuration` into `inbox` when one is reached (nothing when cancelled).
    static func watch<State: Sendable, Input>(route: ServeConfiguration.Route, outbound: LockedValue<State>,
                                    lastInput: WritableKeyPath<State, ContinuousClock.Instant> & Sendable, inbox: SessionInbox<Input>,
                                    idle: Input, maxDuration: Input) async {
        let reached = await watch(maxDuration: .seconds(route.maxDurationS), idle: .milliseconds(route.idleTimeoutMs),
                                  lastInput: { outbound.withLock { $0[keyPath: lastInput] } },
                                  touch: { now in outbound.withLock { $0[keyPath: lastInput] = now } },
                                  reading: { inbox.reading })
        switch reached {
        case .maxDuration: inbox.push(maxDuration, bytes: 0)
        case .idle: inbox.push(idle, bytes: 0)
        case nil: break
        }
    }
}
