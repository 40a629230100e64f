import Foundation
import Testing
import PipelineCore
@testable import CoreNodes

/// The playback queue's rules, driven with plain values for its waiters.
@Suite("Playback queue state machine")
struct PlaybackQueueStateMachineTests {
    typealias Machine = PlaybackQueueStateMachine<Int, String>
    struct DeviceGone: Error {}

    @Test("puts queue up to capacity, then the producer waits until a take hands it back to retry")
    func backPressure() {
        var m = Machine(capacity: 2)
        guard case .queued = m.put([1, 2], producer: 1), case .queued = m.put([3], producer: 2) else { Issue.record("not queued"); return }
        guard case .wait = m.put([4], producer: 3) else { Issue.record("a full queue took a buffer"); return }
        #expect(m.queuedSamples == 3)
        guard case .buffer(let first, let producer) = m.take() else { Issue.record("no buffer"); return }
        #expect(first == [1, 2])
        #expect(producer == 3)
        guard case .queued = m.put([4], producer: 3) else { Issue.record("room was not made"); return }
        guard case .buffer(let second, nil) = m.take(), case .buffer(let third, nil) = m.take() else { Issue.record("order lost"); return }
        #expect(second == [3] && third == [4])
        guard case .empty = m.take() else { Issue.record("an empty queue gave something"); return }
        m.finish()
        guard case .end = m.take() else { Issue.record("no end after finish"); return }
    }

    @Test("finish drains first: the end comes only after every queued buffer")
    func drainsBeforeEnd() {
        var m = Machine(capacity: 8)
        for i in 0..<5 { _ = m.put([Int16(i)], producer: i) }
        m.finish()
        var got: [Int16] = []
        while case .buffer(let b, _) = m.take() { got += b }
        #expect(got == [0, 1, 2, 3, 4])
        guard case .end = m.take() else { Issue.record("no end"); return }
    }

    @Test("an interruption discards what waits, counts it, answers a waiting put as taken, and asks for one flush")
    func interruption() {
        var m = Machine(capacity: 1)
        _ = m.put([1, 2, 3], producer: 1)
        guard case .wait = m.put([4], producer: 2) else { Issue.record("no wait"); return }
        let (discarded, producer) = m.interrupt()
        #expect(discarded == 3 && producer == 2)
        #expect(m.queuedSamples == 0 && m.depth == 0)
        guard case .requested(previous: nil) = m.requestFlush("first") else { Issue.record("flush not requested"); return }
        // A second interruption before the device answered: the first asker is answered (nil) and replaced.
        guard case .requested(previous: "first"?) = m.requestFlush("second") else { Issue.record("earlier waiter kept"); return }
        guard case .flush = m.take() else { Issue.record("the device thread was not asked to flush"); return }
        #expect(m.flushed() == "second")
        #expect(!m.flushRequested)
        guard case .empty = m.take() else { Issue.record("the flush was asked twice"); return }
        // Timing out returns the waiter once; the late answer goes to no one.
        _ = m.requestFlush("third")
        #expect(m.flushTimedOut() == "third")
        #expect(m.flushed() == nil)
    }

    @Test("a failure is thrown by the next put; a stop ends everything; neither keeps a waiter")
    func failureAndStop() {
        var m = Machine(capacity: 1)
        _ = m.put([1], producer: 1)
        _ = m.put([2], producer: 2)
        _ = m.requestFlush("f")
        let (p, w) = m.fail(DeviceGone())
        #expect(p == 2 && w == "f")
        guard case .failed(let e) = m.put([3], producer: 3) else { Issue.record("a put after a failure was accepted"); return }
        #expect(e is DeviceGone)
        var s = Machine(capacity: 1)
        _ = s.put([1], producer: 1)
        _ = s.put([2], producer: 2)
        let (sp, sw) = s.stop()
        #expect(sp == 2 && sw == nil)
        guard case .end = s.take(), case .stopped = s.put([3], producer: 3) else { Issue.record("stopped queue still works"); return }
        // Nothing to flush once stopped, finished or failed: the asker is answered at once.
        guard case .answerNow = s.requestFlush("x"), case .answerNow = m.requestFlush("y") else { Issue.record("a flush was requested"); return }
    }

    @Test("unplayed audio is what waits plus what the device still holds at the last report, less the time since")
    func unplayed() {
        var m = Machine(capacity: 4)
        let format = AudioFormat(sampleRate: 16000, channels: 2)
        let t0 = ContinuousClock.now
        #expect(m.unplayed(format: format, at: t0) == nil)
        _ = m.put([Int16](repeating: 0, count: 3200), producer: 0)   // 100 ms of stereo
        m.reportDelay(.milliseconds(80), at: t0)
        #expect(m.unplayed(format: format, at: t0 + .milliseconds(30)) == .milliseconds(150))
        #expect(m.unplayed(format: format, at: t0 + .seconds(1)) == .milliseconds(100))
        m.reportDelay(nil, at: t0)
        #expect(m.unplayed(format: format, at: t0) == nil)
    }
}
