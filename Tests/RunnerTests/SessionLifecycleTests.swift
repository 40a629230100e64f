import Foundation
import NIOWebSocket
import Testing
@testable import VoicepipeServe

/// A WebSocket session's life, as a value: every event in the states where it matters, the outcome's
/// first cause kept, the outcome recorded once, the connection closed once.
@Suite("serve: session lifecycle")
struct SessionLifecycleTests {
    typealias L = SessionLifecycle
    static let idle = L.Failure(code: 4008, name: "idle", message: "no audio for 100 ms", close: .normalClosure)
    static let failed = L.Failure(code: 4000, name: "graph_failed", message: "boom", close: .unexpectedServerError)
    static let tooLarge = L.Failure(code: 4001, name: "message_too_large", message: "too large", close: .messageTooLarge)
    static let unknown = L.Failure(code: 4010, name: "unknown_message", message: "unknown text message", close: .protocolError)

    static func running(answers: Bool = false) -> L {
        var l = L(answers: answers)
        #expect(l.started() == [])
        #expect(l.phase == .running && l.takesAudio)
        return l
    }

    @Test func outcomesKeepTheirLabels() {
        #expect(L.Outcome.allCases.map(\.rawValue) == ["completed", "disconnected", "shutdown", "limit", "idle", "error"])
    }

    @Test func theClientsEndThenTheLastMessagesAndANormalClose() {
        var l = Self.running()
        #expect(l.audioEnded() == [])
        #expect(l.phase == .ending(.completed) && !l.takesAudio)
        #expect(l.graphFinished(failure: nil) == [.record(.completed), .sendFinished, .close(.normalClosure)])
        #expect(l.phase == .closed(.completed) && !l.connectionOpen)
    }

    @Test func aRouteThatAnswersDrainsItsOutputBeforeRecording() {
        var l = Self.running(answers: true)
        _ = l.audioEnded()
        #expect(l.outputDone() == [])                  // only once the graph has finished
        #expect(l.graphFinished(failure: nil) == [.drainOutput])
        #expect(l.phase == .draining(.completed) && l.connectionOpen)
        // The client leaves while it drains: the outcome stays, nothing more is sent.
        #expect(l.disconnected() == [.forgetOutput])
        #expect(l.outputDone() == [.record(.completed)])
        #expect(l.outputDone() == [])
    }

    @Test func aDisconnectWhileRunningStopsTheGraphAtOnce() {
        var l = Self.running(answers: true)
        #expect(l.disconnected() == [.forgetOutput, .endAudio, .stopGraph])
        #expect(l.outcome == .disconnected)
        // The feed's end afterwards changes nothing; no drain, no close: the client is gone.
        #expect(l.audioEnded() == [])
        #expect(l.graphFinished(failure: nil) == [.record(.disconnected)])
    }

    @Test func aDisconnectDuringTheEndingKeepsTheOutcome() {
        var l = Self.running()
        _ = l.audioEnded()
        #expect(l.disconnected() == [.forgetOutput, .stopGraph])
        #expect(l.outcome == .completed)
        #expect(l.graphFinished(failure: nil) == [.record(.completed)])
    }

    @Test func aShutdownAfterTheClientsEndKeepsCompleted() {
        var l = Self.running()
        _ = l.audioEnded()
        #expect(l.shutdown() == [])
        #expect(l.graphFinished(failure: nil) == [.record(.completed), .sendFinished, .close(.normalClosure)])
        // And after the end, nothing at all.
        #expect(l.shutdown() == [] && l.disconnected() == [] && l.outcome == .completed)
    }

    @Test func aShutdownWhileRunningEndsTheAudioAndTheResultsAreStillSent() {
        var l = Self.running()
        #expect(l.shutdown() == [.endAudio])
        #expect(l.outcome == .shutdown)
        // A second terminal event is ignored.
        #expect(l.limitReached() == [] && l.idle(Self.idle) == [] && l.shutdown() == [])
        #expect(l.disconnected() == [.forgetOutput, .stopGraph])
        #expect(l.outcome == .shutdown)
        #expect(l.graphFinished(failure: nil) == [.record(.shutdown)])
    }

    @Test func limitsAndIdle() {
        var limited = Self.running()
        #expect(limited.limitReached() == [.endAudio])
        #expect(limited.idle(Self.idle) == [])
        #expect(limited.graphFinished(failure: nil) == [.record(.limit), .sendFinished, .close(.normalClosure)])

        var idle = Self.running()
        #expect(idle.idle(Self.idle) == [.fail(Self.idle), .stopGraph, .endAudio])
        #expect(!idle.connectionOpen)
        #expect(idle.limitReached() == [])
        // The connection is closed already: recorded only.
        #expect(idle.graphFinished(failure: nil) == [.record(.idle)])
    }

    @Test func aRefusedMessageIsAnErrorAndTheGraphFinishesWhatItHas() {
        var l = Self.running()
        #expect(l.refusedMessage(Self.unknown) == [.fail(Self.unknown), .endAudio])
        #expect(l.graphFinished(failure: nil) == [.record(.error)])
    }

    @Test func aMessageTooLargeClosesTheConnectionOnce() {
        var l = Self.running()
        #expect(l.messageTooLarge(Self.tooLarge) == [.fail(Self.tooLarge)])
        #expect(l.messageTooLarge(Self.tooLarge) == [])
        // The audio ends with the connection; the outcome is what that end makes it (as before).
        #expect(l.audioEnded() == [])
        #expect(l.graphFinished(failure: nil) == [.record(.completed)])
    }

    @Test func aFailedGraphIsAnErrorUnlessSomethingElseEndedTheSession() {
        var l = Self.running(answers: true)
        _ = l.audioEnded()
        #expect(l.graphFinished(failure: Self.failed) == [.record(.error), .fail(Self.failed)])
        #expect(l.phase == .closed(.error))

        var limited = Self.running()
        _ = limited.limitReached()
        #expect(limited.graphFinished(failure: Self.failed) == [.record(.limit), .fail(Self.failed)])
    }

    @Test func eventsBeforeTheGraphRunsTakeEffectAsItStarts() {
        var gone = L(answers: true)
        #expect(gone.disconnected() == [.forgetOutput])
        #expect(gone.shutdown() == [])
        #expect(gone.started() == [.endAudio, .stopGraph])
        #expect(gone.graphFinished(failure: nil) == [.record(.disconnected)])

        var draining = L(answers: false)
        #expect(draining.shutdown() == [])
        #expect(!draining.takesAudio)
        #expect(draining.started() == [.endAudio])
        #expect(draining.graphFinished(failure: nil) == [.record(.shutdown), .sendFinished, .close(.normalClosure)])
    }

    @Test func refusedAndFailedToStart() {
        var refused = L(answers: false)
        #expect(refused.refused() == [.close(.normalClosure)])
        #expect(refused.phase == .closed(nil))
        #expect(refused.started() == [] && refused.graphFinished(failure: nil) == [] && refused.disconnected() == [])

        let busy = L.Failure(code: 4006, name: "busy", message: "too many sessions", close: .unexpectedServerError)
        var full = L(answers: false)
        #expect(full.refused(failure: busy) == [.fail(busy)])

        var broken = L(answers: true)
        #expect(broken.failedToStart(Self.failed) == [.record(.error), .fail(Self.failed)])
        #expect(broken.graphFinished(failure: nil) == [] && broken.outputDone() == [])
    }

    static func isEnding(_ p: L.Phase) -> Bool {
        if case .ending = p { return true }
        return false
    }

    static func isDraining(_ p: L.Phase) -> Bool {
        if case .draining = p { return true }
        return false
    }

    /// Every sequence of up to five events, from a fresh session: the outcome is recorded at most once,
    /// and exactly once when the session is over; the connection is closed (a fail or a close) at most
    /// once, and never after the client left; once the audio has ended it never runs again; a graph that
    /// finished after the start ends the session or leaves it draining.
    @Test func everySequenceRecordsOnceAndClosesOnce() {
        enum E: CaseIterable {
            case started, audioEnded, disconnected, shutdown, limit, idle, refusedMessage, tooLarge, graphFinished, graphFailed, outputDone
        }
        func apply(_ e: E, _ l: inout L) -> [L.Action] {
            switch e {
            case .started: l.started()
            case .audioEnded: l.audioEnded()
            case .disconnected: l.disconnected()
            case .shutdown: l.shutdown()
            case .limit: l.limitReached()
            case .idle: l.idle(Self.idle)
            case .refusedMessage: l.refusedMessage(Self.unknown)
            case .tooLarge: l.messageTooLarge(Self.tooLarge)
            case .graphFinished: l.graphFinished(failure: nil)
            case .graphFailed: l.graphFinished(failure: Self.failed)
            case .outputDone: l.outputDone()
            }
        }
        var sequences: [[E]] = [[]]
        for _ in 0..<5 { sequences = sequences.flatMap { s in E.allCases.map { s + [$0] } } }
        var problems: [String] = []
        for answers in [false, true] {
            for sequence in sequences {
                var l = L(answers: answers)
                var records = 0, closes = 0, gone = false, ended = false, started = false
                for e in sequence {
                    let before = l.phase
                    for a in apply(e, &l) {
                        switch a {
                        case .record: records += 1
                        case .fail, .close:
                            closes += 1
                            if gone { problems.append("\(sequence): closed after the client left") }
                        default: break
                        }
                    }
                    if e == .disconnected { gone = true }
                    if e == .started { started = true }
                    if Self.isEnding(l.phase) { ended = true }
                    if ended && l.phase == .running { problems.append("\(sequence): running again") }
                    if started && (e == .graphFinished || e == .graphFailed) && (before == .running || Self.isEnding(before)) {
                        let over = l.isClosed || (Self.isDraining(l.phase) && e == .graphFinished && answers)
                        if !over { problems.append("\(sequence): the graph finished, the session goes on (\(l.phase))") }
                    }
                }
                let recorded = l.phase != .closed(nil) && l.isClosed
                if records != (recorded ? 1 : 0) { problems.append("\(sequence): recorded \(records) times, phase \(l.phase)") }
                if closes > 1 { problems.append("\(sequence): closed \(closes) times") }
            }
        }
        #expect(sequences.count == 161_051)
        #expect(problems.isEmpty, "\(problems.count) problems, first: \(problems.prefix(5))")
    }
}

/// What a connection has received for its session: bounded by back-pressure, nothing dropped.
@Suite("serve: session inbox")
struct SessionInboxTests {
    typealias M = SessionInboxStateMachine<Int, Int>

    @Test func readingStopsOverTheLimitAndResumesAtHalf() {
        var m = M(limitBytes: 1000, limitMessages: 100)
        var pausedAt: Int?
        for i in 0..<20 {
            let a = m.push(i, bytes: 100)
            #expect(a.consumer == nil)
            if a.reading == false { pausedAt = i }
        }
        #expect(pausedAt == 10)                         // 1,100 bytes waiting: over 1,000
        #expect(!m.reading && m.pauses == 1 && m.bytes == 2000 && m.peakBytes == 2000)
        var taken: [Int] = []
        var resumedAfter: Int?
        while case (.element(let e), let a) = m.next() {
            taken.append(e)
            if a.reading == true { resumedAfter = taken.count }
        }
        #expect(taken == Array(0..<20))                 // in order, nothing dropped
        #expect(resumedAfter == 15)                     // 500 bytes left: half the limit
        #expect(m.reading && m.pauses == 1)
    }

    @Test func statisticsAreTakenOnce() {
        var m = M(limitBytes: 100, limitMessages: 10)
        for i in 0..<3 { _ = m.push(i, bytes: 60) }
        _ = m.next()
        #expect(m.takeStatistics() == (pauses: 1, peakBytes: 180))
        // The next ones count from what waits now (120 bytes), the pause already counted.
        #expect(m.takeStatistics() == (pauses: 0, peakBytes: 120))
    }

    @Test func manySmallMessagesCountToo() {
        var m = M(limitBytes: 1_000_000, limitMessages: 10)
        var paused = false
        for i in 0..<11 { if m.push(i, bytes: 2).reading == false { paused = true } }
        #expect(paused && !m.reading)
    }

    @Test func aWaitingConsumerGetsTheMessageDirectly() {
        var m = M(limitBytes: 10, limitMessages: 10)
        let (resume, _) = m.park(7)
        #expect(resume == nil)
        let a = m.push(42, bytes: 100)
        #expect(a.consumer?.0 == 7 && a.consumer?.1 == 42)
        #expect(a.reading == nil && m.bytes == 0)
    }

    @Test func theEndComesAfterWhatWaitsUnlessDiscarded() {
        var m = M(limitBytes: 100, limitMessages: 10)
        for i in 0..<3 { _ = m.push(i, bytes: 60) }
        #expect(!m.reading)
        let a = m.finish()
        #expect(a.reading == true && m.reading)         // reading resumes: the connection must see its close
        #expect(m.push(9, bytes: 1).consumer == nil && m.count == 3)   // ignored once finished
        var taken: [Int] = []
        while case (.element(let e), _) = m.next() { taken.append(e) }
        #expect(taken == [0, 1, 2])
        if case (.finished, _) = m.next() {} else { Issue.record("not finished") }
        let (resume, _) = m.park(1)
        #expect(resume == .some(nil))

        var d = M(limitBytes: 100, limitMessages: 10)
        _ = d.park(5)
        let end = d.finish(discard: true)
        #expect(end.consumer?.0 == 5 && end.consumer.map { $0.1 == nil } == true)
        var e = M(limitBytes: 100, limitMessages: 10)
        for i in 0..<3 { _ = e.push(i, bytes: 10) }
        _ = e.finish(discard: true)
        if case (.finished, _) = e.next() {} else { Issue.record("what waited was not discarded") }
    }

    /// A producer (the socket) 20 times faster than the consumer (the graph), reading only while the
    /// inbox wants it plus one read's worth after it said stop: what waits stays bounded, every message
    /// arrives, in order.
    @Test func aFloodIsHeldBackNotDropped() {
        var m = M(limitBytes: 64_000, limitMessages: 500)
        let chunk = 1280                                 // 40 ms of 16 kHz mono
        let total = 2000
        var sent = 0, taken: [Int] = [], peak = 0
        for _ in 0..<100_000 where taken.count < total {
            // The socket: 20 chunks a tick while reading; after a stop, the rest of that read (4 at most).
            var budget = m.reading ? 20 : 0
            while budget > 0 && sent < total {
                let a = m.push(sent, bytes: chunk)
                sent += 1
                budget -= 1
                if a.reading == false { budget = min(budget, 4) }
            }
            peak = max(peak, m.bytes)
            // The graph: one chunk a tick.
            if case (.element(let e), _) = m.next() { taken.append(e) }
        }
        #expect(taken == Array(0..<total))
        #expect(peak <= 64_000 + 5 * chunk && m.peakBytes == peak)
        #expect(m.pauses > 10)
    }
}
