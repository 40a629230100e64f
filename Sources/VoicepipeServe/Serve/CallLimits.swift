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
}
