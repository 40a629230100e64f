import Foundation
import PipelineCore
import Synchronization

/// A bounded queue from a capture device thread to the node's task.
///
/// The device thread never waits on it: when the graph falls behind and the queue is full, the
/// oldest chunk is dropped and counted, so the device keeps being read and never overruns
/// because of a slow consumer. The consumer learns how many frames were dropped before each chunk.
final class AudioCaptureHandoff: Sendable {
    enum Delivery: Sendable {
        /// A chunk, and the samples per channel dropped (queue full) just before it.
        case chunk(CaptureChunk, droppedFrames: Int)
        /// The material ended (memory backend).
        case ended
        /// The device failed.
        case failed(any Error)
        /// The device went away (`on_device_lost` is not `fail`); the thread is trying to reopen.
        case lost(String)
        /// A device is open again (`device`, in `format`).
        case restored(device: String, format: AudioFormat)
    }

    /// A queued item: audio, or news about the device in its place in the stream.
    private enum Entry {
        case chunk(CaptureChunk)
        case note(Delivery)
        var frames: Int { if case .chunk(let c) = self { c.samples.count } else { 0 } }
    }

    private struct State {
        var chunks: [Entry] = []
        var head = 0
        var droppedFrames = 0
        var end: Delivery?
        var waiter: CheckedContinuation<Delivery?, Never>?
        var stopped = false
    }
    private let state = Mutex(State())
    private let capacity: Int
    private let channels: Int

    /// A queue of at most `capacity` chunks of `channels`-channel audio.
    init(capacity: Int, channels: Int) {
        self.capacity = max(capacity, 2)
        self.channels = max(channels, 1)
    }

    /// True once the consumer stopped; the device thread then closes the device.
    var isStopped: Bool { state.withLock { $0.stopped } }

    /// Device thread: adds a chunk, dropping the oldest when full. Never blocks.
    func push(_ chunk: CaptureChunk) {
        let delivered: (CheckedContinuation<Delivery?, Never>, Delivery)? = state.withLock { s in
            if s.stopped { return nil }
            if let w = s.waiter {
                s.waiter = nil
                let d = Delivery.chunk(chunk, droppedFrames: s.droppedFrames)
                s.droppedFrames = 0
                return (w, d)
            }
            if s.chunks.count - s.head >= capacity {
                // Drop the oldest audio; device news is never dropped.
                if let i = s.chunks[s.head...].firstIndex(where: { $0.frames > 0 }) {
                    s.droppedFrames += s.chunks[i].frames / channels
                    if i == s.head { s.head += 1 } else { s.chunks.remove(at: i) }
                }
            }
            s.chunks.append(.chunk(chunk))
            if s.head > 64 && s.head * 2 > s.chunks.count { s.chunks.removeFirst(s.head); s.head = 0 }
            return nil
        }
        if let (w, d) = delivered { w.resume(returning: d) }
    }

    /// Device thread: news about the device, delivered in order with the audio.
    func notify(_ news: Delivery) {
        let w = state.withLock { s -> CheckedContinuation<Delivery?, Never>? in
            if s.stopped { return nil }
            if let w = s.waiter {
                s.waiter = nil
                return w
            }
            s.chunks.append(.note(news))
            return nil
        }
        w?.resume(returning: news)
    }

    /// Device thread: no more chunks will come.
    func finish(_ end: Delivery) {
        let w = state.withLock { s -> CheckedContinuation<Delivery?, Never>? in
            s.end = end
            let w = s.waiter; s.waiter = nil
            return w
        }
        w?.resume(returning: end)
    }

    /// Consumer: the next delivery, or `nil` once stopped or cancelled.
    func next() async -> Delivery? {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Delivery?, Never>) in
                let now: Delivery?? = state.withLock { s in
                    if s.stopped || Task.isCancelled { return .some(nil) }
                    if s.head < s.chunks.count {
                        let entry = s.chunks[s.head]
                        s.head += 1
                        switch entry {
                        case .chunk(let c):
                            let d = Delivery.chunk(c, droppedFrames: s.droppedFrames)
                            s.droppedFrames = 0
                            return .some(d)
                        case .note(let d):
                            return .some(d)
                        }
                    }
                    if let end = s.end { return .some(end) }
                    s.waiter = c
                    return nil
                }
                if let now { c.resume(returning: now) }
            }
        } onCancel: {
            stop()
        }
    }

    /// Consumer: stop; the device thread ends after its current read.
    func stop() {
        let w = state.withLock { s -> CheckedContinuation<Delivery?, Never>? in
            s.stopped = true
            s.chunks = []
            s.head = 0
            let w = s.waiter; s.waiter = nil
            return w
        }
        w?.resume(returning: nil)
    }
}
