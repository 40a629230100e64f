import NIOCore
import Synchronization

/// The body of a streaming upload: a byte queue with a capacity. The producer (the node) waits
/// while the queue is full, so a server that reads slowly slows the node down and the node's input
/// edge — with its overflow policy — decides what happens to audio, instead of a buffer growing
/// without bound. The consumer is the HTTP client reading the request body.
final class BoundedByteStream: AsyncSequence, Sendable {
    typealias Element = ByteBuffer

    private struct State {
        var chunks: [ByteBuffer] = []
        var head = 0
        var bytes = 0
        var finished = false
        var consumer: CheckedContinuation<ByteBuffer?, Never>?
        var producer: CheckedContinuation<Void, Never>?
        var producerID: UInt64 = 0
    }
    private let state = Mutex(State())
    /// Bytes held before ``send(_:)`` waits.
    let capacity: Int

    init(capacity: Int) { self.capacity = Swift.max(1, capacity) }

    /// Bytes queued and not yet read by the client.
    var buffered: Int { state.withLock { $0.bytes } }

    /// Queues `buffer`, waiting while the queue is over capacity (returns at once once finished,
    /// or when the calling task is cancelled).
    func send(_ buffer: ByteBuffer) async {
        let id = state.withLock { s -> UInt64 in s.producerID &+= 1; return s.producerID }
        await withTaskCancellationHandler {
            await withCheckedContinuation { (c: CheckedContinuation<Void, Never>) in
                let (wake, resumeNow) = state.withLock { s -> (CheckedContinuation<ByteBuffer?, Never>?, Bool) in
                    if s.finished { return (nil, true) }
                    if let consumer = s.consumer {
                        s.consumer = nil
                        return (consumer, true)
                    }
                    s.chunks.append(buffer)
                    s.bytes += buffer.readableBytes
                    if s.bytes <= capacity || Task.isCancelled { return (nil, true) }
                    s.producer = c
                    return (nil, false)
                }
                if let wake { wake.resume(returning: buffer) }
                if resumeNow { c.resume() }
            }
        } onCancel: {
            let c = state.withLock { s -> CheckedContinuation<Void, Never>? in
                guard s.producerID == id else { return nil }
                defer { s.producer = nil }
                return s.producer
            }
            c?.resume()
        }
    }

    /// No more bytes: the reader ends after what is queued; a waiting producer returns.
    func finish() {
        let (consumer, producer) = state.withLock { s -> (CheckedContinuation<ByteBuffer?, Never>?, CheckedContinuation<Void, Never>?) in
            s.finished = true
            let c = s.chunks.count > s.head ? nil : s.consumer
            if c != nil { s.consumer = nil }
            defer { s.producer = nil }
            return (c, s.producer)
        }
        consumer?.resume(returning: nil)
        producer?.resume()
    }

    fileprivate func next() async -> ByteBuffer? {
        await withCheckedContinuation { (c: CheckedContinuation<ByteBuffer?, Never>) in
            let (value, ready, wake) = state.withLock { s -> (ByteBuffer?, Bool, CheckedContinuation<Void, Never>?) in
                if s.head < s.chunks.count {
                    let b = s.chunks[s.head]
                    s.head += 1
                    s.bytes -= b.readableBytes
                    if s.head > 64 && s.head * 2 > s.chunks.count { s.chunks.removeFirst(s.head); s.head = 0 }
                    var w: CheckedContinuation<Void, Never>?
                    if s.bytes <= capacity { w = s.producer; s.producer = nil }
                    return (b, true, w)
                }
                if s.finished { return (nil, true, nil) }
                s.consumer = c
                return (nil, false, nil)
            }
            wake?.resume()
            if ready { c.resume(returning: value) }
        }
    }

    struct AsyncIterator: AsyncIteratorProtocol {
        let stream: BoundedByteStream
        mutating func next() async -> ByteBuffer? { await stream.next() }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(stream: self) }
}
