import Testing
@testable import Nodes

/// The Whisper decoder pool's rules over their transitions, without threads or a model.
@Suite("Whisper decoder schedule")
struct WhisperScheduleTests {
    typealias Schedule = WhisperSchedule<String>

    static func entry(_ id: UInt64, session: UInt64, _ priority: Schedule.Priority, threads: Int = 1) -> Schedule.Entry {
        Schedule.Entry(id: id, session: session, priority: priority, threads: threads, job: "\(priority)-\(id)")
    }

    /// The actions, written short: "start w0 final-1 t1", "abort w1", "nothing partial-2", "cancelled final-3".
    static func names(_ actions: [Schedule.Action]) -> [String] {
        actions.map {
            switch $0 {
            case .start(let w, let e, let t): "start w\(w) \(e.job) t\(t)"
            case .abort(let w): "abort w\(w)"
            case .answerNothing(let e): "nothing \(e.job)"
            case .cancelled(let e): "cancelled \(e.job)"
            }
        }
    }

    static func pool(_ workers: Int) -> Schedule {
        var s = Schedule()
        #expect(s.addWorkers(upTo: workers, allowed: workers).isEmpty)
        return s
    }

    @Test("finals use every decoder thread even when other processes hold cores; partials only free cores")
    func finalsUseEveryThread() {
        var s = Self.pool(2)
        // One core free (another process holds the other): two finals still run side by side.
        #expect(Self.names(s.submit(Self.entry(1, session: 1, .final), allowed: 1)) == ["start w0 final-1 t1"])
        #expect(Self.names(s.submit(Self.entry(2, session: 2, .final), allowed: 1)) == ["start w1 final-2 t1"])
        var t = Self.pool(2)
        #expect(Self.names(t.submit(Self.entry(1, session: 1, .partial), allowed: 1)) == ["start w0 partial-1 t1"])
        // A second partial waits: the only free core is taken.
        #expect(t.submit(Self.entry(2, session: 2, .partial), allowed: 1).isEmpty)
        #expect(t.partials.count == 1)
        #expect(!t.hasFreeThread(allowed: 1))
        // It starts when the first ends.
        let (ending, next) = t.finished(worker: 0, allowed: 1)
        #expect(ending == .completed)
        #expect(Self.names(next) == ["start w0 partial-2 t1"])
    }

    @Test("a final waiting for a thread makes a running partial abort, and starts in its place")
    func finalTakesPartialsPlace() {
        var s = Self.pool(1)
        #expect(Self.names(s.submit(Self.entry(1, session: 1, .partial), allowed: 1)) == ["start w0 partial-1 t1"])
        #expect(s.takesAhead)
        #expect(Self.names(s.submit(Self.entry(2, session: 2, .final), allowed: 1)) == ["abort w0"])
        #expect(!s.takesAhead, "a final waits: a final ahead now would go before no one, so none is asked for")
        // A second final does not abort the same partial twice.
        #expect(s.submit(Self.entry(3, session: 3, .final), allowed: 1).isEmpty)
        let (ending, next) = s.finished(worker: 0, allowed: 1)
        #expect(ending == .aborted)
        #expect(Self.names(next) == ["start w0 final-2 t1"])
        #expect(s.aborted == 1 && s.decoded == 0)
        let (_, after) = s.finished(worker: 0, allowed: 1)
        #expect(Self.names(after) == ["start w0 final-3 t1"], "finals in arrival order")
    }

    @Test("partials beyond the free cores abort when a final starts on another thread")
    func partialsBeyondTheBudgetAbort() {
        var s = Self.pool(2)
        #expect(Self.names(s.submit(Self.entry(1, session: 1, .partial), allowed: 2)) == ["start w0 partial-1 t1"])
        // Another process now holds a core: the final starts on the free thread, and the partial gives way.
        #expect(Self.names(s.submit(Self.entry(2, session: 2, .final), allowed: 1)) == ["start w1 final-2 t1", "abort w0"])
    }

    @Test("one partial per session waits: a newer one, or the session's final, answers the older with nothing")
    func newerPartialReplaces() {
        var s = Self.pool(1)
        _ = s.submit(Self.entry(1, session: 9, .final), allowed: 1)
        #expect(s.submit(Self.entry(2, session: 1, .partial), allowed: 1).isEmpty)
        #expect(Self.names(s.submit(Self.entry(3, session: 1, .partial), allowed: 1)) == ["nothing partial-2"])
        #expect(s.submit(Self.entry(4, session: 2, .partial), allowed: 1).isEmpty, "another session's partial waits beside it")
        #expect(Self.names(s.submit(Self.entry(5, session: 1, .final), allowed: 1)) == ["nothing partial-3"])
        #expect(s.replaced == 2)
        #expect(s.finals.map(\.id) == [5] && s.partials.map(\.id) == [4])
        // The final goes before the partial that waited longer.
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 final-5 t1"])
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 partial-4 t1"])
    }

    @Test("cancelling: a waiting request is answered as cancelled, a running one aborted once, an ended one ignored")
    func cancelling() {
        var s = Self.pool(1)
        _ = s.submit(Self.entry(1, session: 1, .final), allowed: 1)
        _ = s.submit(Self.entry(2, session: 2, .final), allowed: 1)
        #expect(Self.names(s.cancel(id: 2)) == ["cancelled final-2"])
        #expect(Self.names(s.cancel(id: 1)) == ["abort w0"])
        #expect(s.cancel(id: 1).isEmpty, "already told to abort")
        let (ending, next) = s.finished(worker: 0, allowed: 1)
        #expect(ending == .aborted && next.isEmpty)
        #expect(s.cancel(id: 1).isEmpty && s.cancel(id: 77).isEmpty)
        #expect(s.runningCount == 0 && s.finals.isEmpty)
    }

    @Test("finals ahead: after finals, before partials, on every thread; promoted to a final when the utterance ends; cancelled when speech resumes")
    func finalsAhead() {
        var s = Self.pool(1)
        #expect(Self.names(s.submit(Self.entry(1, session: 1, .final), allowed: 1)) == ["start w0 final-1 t1"])
        #expect(s.submit(Self.entry(2, session: 2, .partial), allowed: 1).isEmpty)
        #expect(s.submit(Self.entry(3, session: 3, .ahead), allowed: 1).isEmpty)
        #expect(s.submit(Self.entry(4, session: 4, .ahead), allowed: 1).isEmpty)
        #expect(s.submit(Self.entry(5, session: 5, .final), allowed: 1).isEmpty)
        // Session 4's utterance ends: its final ahead waits as a final, after the final that waited before it.
        #expect(s.promote(id: 4, allowed: 1).isEmpty)
        #expect(s.finals.map(\.id) == [5, 4] && s.aheads.map(\.id) == [3])
        #expect(s.promote(id: 4, allowed: 1).isEmpty && s.promote(id: 99, allowed: 1).isEmpty, "promoting twice or an unknown request changes nothing")
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 final-5 t1"])
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 ahead-4 t1"], "the promoted one, as a final")
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 ahead-3 t1"])
        #expect(Self.names(s.finished(worker: 0, allowed: 1).actions) == ["start w0 partial-2 t1"])
        // Speech resumed: a waiting final ahead is answered as cancelled, a running one aborted.
        var t = Self.pool(1)
        _ = t.submit(Self.entry(1, session: 1, .ahead), allowed: 0)
        _ = t.submit(Self.entry(2, session: 2, .ahead), allowed: 0)
        #expect(Self.names(t.cancel(id: 2)) == ["cancelled ahead-2"])
        #expect(Self.names(t.cancel(id: 1)) == ["abort w0"])
        // A final ahead waiting for a thread makes a running partial give way, as a final does.
        var u = Self.pool(1)
        _ = u.submit(Self.entry(1, session: 1, .partial), allowed: 1)
        #expect(Self.names(u.submit(Self.entry(2, session: 2, .ahead), allowed: 1)) == ["abort w0"])
    }

    @Test("threads per decoding: what the request asks, at most the free cores left, at least one")
    func threadsPerDecoding() {
        var s = Self.pool(2)
        #expect(Self.names(s.submit(Self.entry(1, session: 1, .final, threads: 4), allowed: 2)) == ["start w0 final-1 t2"])
        #expect(Self.names(s.submit(Self.entry(2, session: 2, .final, threads: 4), allowed: 2)) == ["start w1 final-2 t1"])
    }

    @Test("threads added later take what waits; idle and free-thread answers follow the state")
    func addedWorkersStartWaitingRequests() {
        var s = Schedule()
        #expect(!s.hasFreeThread(allowed: 2), "no thread yet")
        #expect(s.submit(Self.entry(1, session: 1, .final), allowed: 2).isEmpty)
        #expect(Self.names(s.addWorkers(upTo: 2, allowed: 2)) == ["start w0 final-1 t1"])
        #expect(s.workers == 2)
        #expect(s.takesAhead && s.hasFreeThread(allowed: 2))
        #expect(!s.hasFreeThread(allowed: 1), "the free core is the running final's")
    }

    /// Every order of a few events keeps the schedule's invariants: each request is answered or started exactly
    /// once, a thread runs one request at a time, and nothing waits while a thread is free for it.
    @Test("over every order of submissions, cancellations and endings, each request is answered once and no thread idles while a final waits")
    func interleavings() {
        enum Event: CaseIterable { case final, ahead, partial, partialSameSession, promoteLast, cancelFirst, finish0, finish1, budgetDrops }
        func run(_ events: [Event]) {
            var s = Self.pool(2)
            var allowed = 2
            var nextID: UInt64 = 0
            var started = Set<UInt64>(), answered = Set<UInt64>(), submitted = Set<UInt64>()
            func apply(_ actions: [Schedule.Action]) {
                for action in actions {
                    switch action {
                    case .start(_, let e, _): #expect(started.insert(e.id).inserted, "\(events): started twice")
                    case .answerNothing(let e), .cancelled(let e):
                        #expect(!started.contains(e.id), "\(events): a started request answered while waiting")
                        #expect(answered.insert(e.id).inserted, "\(events): answered twice")
                    case .abort: break
                    }
                }
            }
            for event in events {
                switch event {
                case .final, .ahead, .partial, .partialSameSession:
                    nextID += 1
                    submitted.insert(nextID)
                    let session: UInt64 = event == .partialSameSession ? 1 : nextID + 100
                    let priority: Schedule.Priority = event == .final ? .final : event == .ahead ? .ahead : .partial
                    apply(s.submit(Self.entry(nextID, session: session, priority), allowed: allowed))
                case .promoteLast: apply(s.promote(id: nextID, allowed: allowed))
                case .cancelFirst: apply(s.cancel(id: 1))
                case .finish0: apply(s.finished(worker: 0, allowed: allowed).actions)
                case .finish1: apply(s.finished(worker: 1, allowed: allowed).actions)
                case .budgetDrops: allowed = 1
                }
                #expect(s.runningCount <= 2)
                if !s.finals.isEmpty || !s.aheads.isEmpty { #expect(s.runningCount == 2, "\(events): a final waits beside a free thread") }
                if !s.partials.isEmpty && s.runningCount < 2 { #expect(s.runningCount >= allowed, "\(events): a partial waits beside a free core") }
                let waiting = Set(s.finals.map(\.id) + s.aheads.map(\.id) + s.partials.map(\.id))
                #expect(waiting.isDisjoint(with: started) && waiting.isDisjoint(with: answered), "\(events)")
                #expect(waiting.union(started).union(answered) == submitted, "\(events): a request was lost")
            }
        }
        let all = Event.allCases
        for a in all { for b in all { for c in all { for d in all { run([a, b, c, d, .final, .finish0]) } } } }
    }
}
