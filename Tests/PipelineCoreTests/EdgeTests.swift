import Testing
import PipelineCore
import VoicepipeTesting

@Suite("Bounded edges")
struct EdgeTests {
    func frame(_ i: Int) -> Frame {
        .audio([Int16(i)], format: AudioFormat(sampleRate: 16000, channels: 1), sampleIndex: Int64(i))
    }

    @Test("block: no loss with a slow consumer, and the producer really waits")
    func blockIsLossless() async throws {
        let edge = BoundedEdge(capacity: 4, overflow: .block)
        let producer = Task {
            for i in 0..<200 { await edge.send(frame(i)) }
            edge.producerFinished()
        }
        // While nobody consumes, the producer must stop at the capacity: four frames queued, the
        // fifth held by the producer, which waits.
        #expect(await eventually { edge.held == 5 }, "the producer waits at the capacity")
        #expect(edge.depth == 4)
        var got: [Int16] = []
        while let f = await edge.receive() {
            got.append(f.audio!.samples[0])
            // A slow consumer: every 50 frames it stops until the producer waits on the full queue again.
            if got.count % 50 == 0 && 200 - got.count >= 5 {
                #expect(await eventually { edge.held == 5 }, "the producer waits again after \(got.count) frames")
            }
        }
        await producer.value
        #expect(got == (0..<200).map { Int16($0) })
        #expect(edge.stats.dropped == 0)
        #expect(edge.stats.sent == 200)
        #expect(edge.stats.maxDepth == 4)
    }

    @Test("drop-oldest keeps the newest frames and counts exact drops")
    func dropOldest() async {
        let edge = BoundedEdge(capacity: 5, overflow: .dropOldest)
        for i in 0..<20 { await edge.send(frame(i)) }
        edge.producerFinished()
        var got: [Int16] = []
        while let f = await edge.receive() { got.append(f.audio!.samples[0]) }
        #expect(got == [15, 16, 17, 18, 19])
        #expect(edge.stats.dropped == 15)
        #expect(edge.stats.sent == 20)
    }

    @Test("drop-newest keeps the oldest frames and counts exact drops")
    func dropNewest() async {
        let edge = BoundedEdge(capacity: 5, overflow: .dropNewest)
        for i in 0..<20 { await edge.send(frame(i)) }
        edge.producerFinished()
        var got: [Int16] = []
        while let f = await edge.receive() { got.append(f.audio!.samples[0]) }
        #expect(got == [0, 1, 2, 3, 4])
        #expect(edge.stats.dropped == 15)
        #expect(edge.stats.sent == 5)
    }

    @Test("fan-in: the edge ends only when every producer has finished")
    func fanIn() async {
        let edge = BoundedEdge(capacity: 8, overflow: .block, producers: 2)
        await edge.send(frame(1))
        edge.producerFinished()
        await edge.send(frame(2))
        let a = await edge.receive(), b = await edge.receive()
        #expect(a != nil && b != nil)
        let consumer = Task { await edge.receive() }
        #expect(await eventually { edge.isConsumerWaiting })
        edge.producerFinished()
        #expect(await consumer.value == nil)
    }

    @Test("a finished consumer never blocks producers; later frames count as dropped")
    func consumerGone() async {
        let edge = BoundedEdge(capacity: 1, overflow: .block)
        await edge.send(frame(0))
        let blocked = Task { await edge.send(frame(1)) }
        #expect(await eventually { edge.held == 2 }, "the second producer waits")
        edge.consumerFinished()
        await blocked.value
        await edge.send(frame(2))
        #expect(edge.stats.dropped == 3)
    }

    @Test("a cancelled blocked producer returns and its frame is still delivered")
    func cancelledProducerKeepsFrame() async {
        let edge = BoundedEdge(capacity: 1, overflow: .block)
        await edge.send(frame(0))
        let blocked = Task { await edge.send(frame(1)) }
        #expect(await eventually { edge.held == 2 }, "the second producer waits")
        blocked.cancel()
        await blocked.value
        edge.producerFinished()
        var got: [Int16] = []
        while let f = await edge.receive() { got.append(f.audio!.samples[0]) }
        #expect(got == [0, 1])
    }
}
