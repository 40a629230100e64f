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
    private enum Entry: Sendable {
        case chunk(CaptureChunk)
        case note(Delivery)
    }

    /// A ``Handoff`` that drops the oldest audio (never device news) and tallies the frames it dropped.
    private let queue: Handoff<Entry>
    /// Frames dropped before a note, owed to the next chunk (one consumer).
    private let owed = Atomic<Int>(0)

    /// A queue of at most `capacity` chunks of `channels`-channel audio.
    init(capacity: Int, channels: Int) {
        let channels = max(channels, 1)
        queue = Handoff(capacity: max(capacity, 2), overflow: .dropOldest,
                        droppable: { if case .chunk = $0 { true } else { false } },
                        tally: { if case .chunk(let c) = $0 { c.samples.count / channels } else { 0 } })
    }

    /// True once the consumer stopped; the device thread then closes the device.
    var isStopped: Bool { queue.isConsumerFinished }

    /// Device thread: adds a chunk, dropping the oldest when full. Never blocks.
    func push(_ chunk: CaptureChunk) {
        queue.trySend(.chunk(chunk))
    }

    /// Device thread: news about the device, delivered in order with the audio.
    func notify(_ news: Delivery) {
        queue.trySend(.note(news))
    }

    /// Device thread: no more chunks will come.
    func finish(_ end: Delivery) {
        queue.trySend(.note(end))
        queue.producerFinished()
    }

    /// Consumer: the next delivery, or `nil` once stopped or cancelled.
    func next() async -> Delivery? {
        guard let taken = await queue.receive() else { return nil }
        switch taken.element {
        case .chunk(let c):
            let dropped = owed.exchange(0, ordering: .relaxed) + taken.droppedBefore
            return .chunk(c, droppedFrames: dropped)
        case .note(let d):
            if taken.droppedBefore > 0 { owed.add(taken.droppedBefore, ordering: .relaxed) }
            return d
        }
    }

    /// Consumer: stop; the device thread ends after its current read.
    func stop() {
        queue.consumerFinished()
    }
}
