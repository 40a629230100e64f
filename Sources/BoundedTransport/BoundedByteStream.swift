import NIOCore
import PipelineCore

/// The body of a streaming upload: a byte queue with a capacity. The producer (the node) waits
/// while the queue is full, so a server that reads slowly slows the node down and the node's input
/// edge — with its overflow policy — decides what happens to audio, instead of a buffer growing
/// without bound. The consumer is the HTTP client reading the request body.
///
/// A ``Handoff`` of byte buffers weighed in bytes: its state machine holds the rules.
package final class BoundedByteStream: AsyncSequence, Sendable {
    package typealias Element = ByteBuffer

    private let queue: Handoff<ByteBuffer>
    /// Bytes held before ``send(_:)`` waits.
    package let capacity: Int

    package init(capacity: Int) {
        self.capacity = Swift.max(1, capacity)
        queue = Handoff(capacity: self.capacity, overflow: .suspend, weight: { $0.readableBytes })
    }

    /// Bytes queued and not yet read by the client.
    package var buffered: Int { queue.weight }

    /// Queues `buffer`, waiting while the queue holds its capacity (returns at once once the reader is
    /// gone; a sender cancelled while waiting still queues its bytes).
    package func send(_ buffer: ByteBuffer) async {
        await queue.send(buffer)
    }

    /// No more bytes: the reader ends after what is queued.
    package func finish() {
        queue.producerFinished()
    }

    /// The reader is gone (the request failed): what is queued is dropped and a waiting producer returns.
    package func abort() {
        queue.consumerFinished()
    }

    package struct AsyncIterator: AsyncIteratorProtocol {
        let stream: BoundedByteStream
        package mutating func next() async -> ByteBuffer? { await stream.queue.receive()?.element }
    }

    package func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}
