import PipelineCore
import Synchronization

/// What a collecting sink received, in order, with the real time each frame arrived. Shared between
/// the sink (inside a pipeline) and the test that reads it.
///
/// ```swift
/// let recorder = FrameRecorder()
/// registry.register(CollectingSink.descriptor(recorder: recorder))
/// // ... run a graph ending in `{ type: collect }` ...
/// #expect(recorder.audio.count == 50)
/// ```
public final class FrameRecorder: Sendable {
    /// A received frame and when it arrived.
    public struct Entry: Sendable {
        /// The frame.
        public var frame: Frame
        /// When the sink took it (real time).
        public var arrival: ContinuousClock.Instant
    }

    private struct State {
        var entries: [Entry] = []
        var ended = false
        var waiters: [(count: Int, continuation: CheckedContinuation<Void, Never>)] = []
    }
    private let state = LockedValue(State())

    /// An empty recorder.
    public init() {}

    /// Records a frame.
    public func append(_ frame: Frame) {
        let now = ContinuousClock.now
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.entries.append(Entry(frame: frame, arrival: now))
            let n = s.entries.count
            let due = s.waiters.filter { $0.count <= n }.map(\.continuation)
            s.waiters.removeAll { $0.count <= n }
            return due
        }
        ready.forEach { $0.resume() }
    }

    /// Marks the end of the stream (the sink's input ended).
    public func finish() {
        let ready = state.withLock { s -> [CheckedContinuation<Void, Never>] in
            s.ended = true
            let due = s.waiters.map(\.continuation)
            s.waiters = []
            return due
        }
        ready.forEach { $0.resume() }
    }

    /// Every entry so far.
    public var entries: [Entry] { state.withLock { $0.entries } }
    /// Every frame so far.
    public var frames: [Frame] { entries.map(\.frame) }
    /// True once the sink's input ended.
    public var ended: Bool { state.withLock { $0.ended } }
    /// Number of frames so far.
    public var count: Int { state.withLock { $0.entries.count } }

    /// The audio frames.
    public var audio: [Frame] { frames.filter { $0.audio != nil } }
    /// The encoded frames.
    public var encoded: [Frame] { frames.filter { $0.encoded != nil } }
    /// The texts of text frames.
    public var texts: [String] { frames.compactMap(\.text) }
    /// The events carried by event frames.
    public var events: [Event] { frames.compactMap(\.event) }
    /// All audio samples, concatenated.
    public var samples: [Int16] { frames.flatMap { $0.audio?.samples ?? [] } }

    /// Waits until `count` frames arrived or the stream ended (or `timeout` of real time passed).
    /// Returns whether `count` frames are there.
    @discardableResult
    public func wait(for count: Int, timeout: Duration = .seconds(10)) async -> Bool {
        await withTaskGroup(of: Void.self) { group in
            group.addTask {
                await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                    let now = self.state.withLock { s -> Bool in
                        if s.entries.count >= count || s.ended { return true }
                        s.waiters.append((count, c))
                        return false
                    }
                    if now { c.resume() }
                }
            }
            group.addTask { try? await Task.sleep(for: timeout) }
            await group.next()
            group.cancelAll()
            // Wake a waiter left behind by the timeout.
            let left = self.state.withLock { s -> [CheckedContinuation<Void, Never>] in
                let all = s.waiters.map(\.continuation); s.waiters = []; return all
            }
            left.forEach { $0.resume() }
        }
        return self.count >= count
    }
}
