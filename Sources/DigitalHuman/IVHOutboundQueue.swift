import PipelineCore

/// The bounded queue of commands waiting for the command channel.
///
/// Before the channel first opens, and while it is up, a full queue suspends producers
/// (back-pressure, lossless: a file read faster than real time waits for the channel rather than
/// losing its beginning). While it is down after having been up, audio is held up to the capacity
/// and the oldest held audio packet is dropped (and counted) to make room; heartbeats are not held.
/// Interrupts go to the front.
///
/// The rules live in ``IVHOutboundStateMachine``; this class holds it behind a lock and resumes the
/// continuations the machine hands back, always after releasing the lock.
package final class IVHOutboundQueue: Sendable {
    typealias Machine = IVHOutboundStateMachine<CheckedContinuation<Void, Never>, CheckedContinuation<IVHCommand?, Never>>

    /// Packets held at most.
    package let capacity: Int
    private let state: LockedValue<Machine>

    package init(capacity: Int) {
        self.capacity = max(1, capacity)
        state = LockedValue(Machine(capacity: capacity))
    }

    /// Audio packets dropped while the channel was down.
    package var dropped: UInt64 { state.withLock { $0.dropped } }
    /// Commands waiting.
    package var count: Int { state.withLock { $0.items.count } }
    /// True once ``finish()`` was called and everything was taken.
    package var drained: Bool { state.withLock { $0.drained } }
    /// True while the consumer waits for a command.
    package var isConsumerWaiting: Bool { state.withLock { $0.consumerWaiting } }
    /// Producers waiting for room now.
    package var waitingProducers: Int { state.withLock { $0.waitingProducers } }

    private func run(_ actions: Machine.Actions) {
        if let (c, command) = actions.consumer { c.resume(returning: command) }
        for p in actions.producers { p.resume() }
    }

    /// Queues a command. Returns the number of audio packets dropped to make room.
    @discardableResult
    package func push(_ command: IVHCommand, front: Bool = false) async -> Int {
        while true {
            let (outcome, actions) = state.withLock { $0.push(command, front: front) }
            run(actions)
            if case .done(let n) = outcome { return n }
            let id = state.withLock { $0.makeID() }
            await withTaskCancellationHandler {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let now = state.withLock { $0.parkProducer(id, c, cancelled: Task.isCancelled) }
                    if now { c.resume() }
                }
            } onCancel: {
                run(state.withLock { $0.cancelProducer(id) })
            }
            if Task.isCancelled { return 0 }
        }
    }

    /// The next command, or nil once finished and empty (or when the caller is cancelled).
    package func next() async -> IVHCommand? {
        let (outcome, actions) = state.withLock { $0.next() }
        run(actions)
        switch outcome {
        case .command(let command): return command
        case .finished: return nil
        case .mustWait: break
        }
        let id = state.withLock { $0.makeID() }
        return await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<IVHCommand?, Never>) in
                let (now, actions) = state.withLock { $0.parkConsumer(id, c, cancelled: Task.isCancelled) }
                run(actions)
                if let now { c.resume(returning: now) }
            }
        } onCancel: {
            run(state.withLock { $0.cancelConsumer(id) })
        }
    }

    /// Puts back a command that could not be written.
    package func unshift(_ command: IVHCommand) {
        run(state.withLock { $0.unshift(command) })
    }

    /// Channel up or down; producers waiting for room re-check.
    package func setConnected(_ up: Bool) {
        run(state.withLock { $0.setConnected(up) })
    }

    /// No more commands will be queued; the consumer sees nil after the last one.
    package func finish() {
        run(state.withLock { $0.finish() })
    }

    /// Drops everything (when giving up); producers waiting for room re-check.
    package func clear() {
        run(state.withLock { $0.clear() })
    }
}
