import Synchronization

/// The bounded queue of commands waiting for the command channel.
///
/// Before the channel first opens, and while it is up, a full queue suspends producers
/// (back-pressure, lossless: a file read faster than real time waits for the channel rather than
/// losing its beginning). While it is down after having been up, audio is held up to the capacity
/// and the oldest held audio packet is dropped (and counted) to make room; heartbeats are not held.
/// Interrupts go to the front.
package final class IVHOutboundQueue: Sendable {
    private struct State {
        var items: [IVHCommand] = []
        var connected = false
        /// The channel has been up once: from then on, a channel down drops old audio.
        var opened = false
        var finished = false
        var dropped: UInt64 = 0
        var consumer: CheckedContinuation<IVHCommand?, Never>?
        var producers: [UInt64: CheckedContinuation<Void, Never>] = [:]
        var nextID: UInt64 = 0
    }

    /// Packets held at most.
    package let capacity: Int
    private let state = Mutex(State())

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
    }

    /// Audio packets dropped while the channel was down.
    package var dropped: UInt64 { state.withLock { $0.dropped } }
    /// Commands waiting.
    package var count: Int { state.withLock { $0.items.count } }
    /// True once ``finish()`` was called and everything was taken.
    package var drained: Bool { state.withLock { $0.finished && $0.items.isEmpty } }

    /// Queues a command. Returns the number of audio packets dropped to make room.
    @discardableResult
    package func push(_ command: IVHCommand, front: Bool = false) async -> Int {
        while true {
            enum Step { case done(Int), wait }
            let id = state.withLock { s -> UInt64 in s.nextID += 1; return s.nextID }
            let step: Step = state.withLock { s in
                if s.finished { return .done(0) }
                if case .heartbeat = command, !s.connected { return .done(0) }
                if let c = s.consumer, s.items.isEmpty {
                    s.consumer = nil
                    c.resume(returning: command)
                    return .done(0)
                }
                if s.items.count < capacity || front {
                    if front { s.items.insert(command, at: 0) } else { s.items.append(command) }
                    return .done(0)
                }
                if s.connected || !s.opened { return .wait }
                var drops = 0
                if let i = s.items.firstIndex(where: { if case .audio = $0 { true } else { false } }) {
                    s.items.remove(at: i)
                    s.dropped += 1
                    drops = 1
                }
                s.items.append(command)
                return .done(drops)
            }
            switch step {
            case .done(let n): return n
            case .wait:
                await withTaskCancellationHandler {
                    await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                        let now = state.withLock { s -> Bool in
                            if s.items.count < capacity || (!s.connected && s.opened) || s.finished || Task.isCancelled { return true }
                            s.producers[id] = c
                            return false
                        }
                        if now { c.resume() }
                    }
                } onCancel: {
                    state.withLock { $0.producers.removeValue(forKey: id) }?.resume()
                }
                if Task.isCancelled { return 0 }
            }
        }
    }

    /// The next command, or nil once finished and empty (or when the caller is cancelled).
    package func next() async -> IVHCommand? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<IVHCommand?, Never>) in
                var result: IVHCommand??
                var wake: [CheckedContinuation<Void, Never>] = []
                state.withLock { s in
                    if !s.items.isEmpty {
                        result = .some(s.items.removeFirst())
                        wake = Array(s.producers.values); s.producers = [:]
                    } else if s.finished || Task.isCancelled {
                        result = .some(nil)
                    } else {
                        s.consumer = c
                    }
                }
                wake.forEach { $0.resume() }
                if let result { c.resume(returning: result) }
            }
        } onCancel: {
            state.withLock { s -> CheckedContinuation<IVHCommand?, Never>? in
                let c = s.consumer; s.consumer = nil; return c
            }?.resume(returning: nil)
        }
    }

    /// Puts back a command that could not be written.
    package func unshift(_ command: IVHCommand) {
        state.withLock { $0.items.insert(command, at: 0) }
    }

    /// Channel up or down; producers waiting for room re-check.
    package func setConnected(_ up: Bool) {
        let wake = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.connected = up
            if up { s.opened = true }
            let w = Array(s.producers.values); s.producers = [:]; return w
        }
        wake.forEach { $0.resume() }
    }

    /// No more commands will be queued; the consumer sees nil after the last one.
    package func finish() {
        let (c, wake) = state.withLock { s -> (CheckedContinuation<IVHCommand?, Never>?, [CheckedContinuation<Void, Never>]) in
            s.finished = true
            let c = s.items.isEmpty ? s.consumer : nil
            if c != nil { s.consumer = nil }
            let w = Array(s.producers.values); s.producers = [:]
            return (c, w)
        }
        c?.resume(returning: nil)
        wake.forEach { $0.resume() }
    }

    /// Drops everything (when giving up).
    package func clear() {
        state.withLock { $0.items.removeAll() }
    }
}
