import Testing
@testable import PipelineCore

/// The pipeline's life on its pure state machine: a table of every event in every state, and every
/// sequence of events two nodes, the caller, the drain watchdog and waiting tasks can make, checked
/// against a model written from the rules (not from the machine).
@Suite("Lifecycle state machine")
struct LifecycleStateMachineTests {
    typealias Machine = LifecycleStateMachine<Int>

    static let timeout = Duration.seconds(10)
    static let boom = PipelineError(node: "bad", code: .nodeFailed, message: "boom")
    static let later = PipelineError(node: "worse", code: .createFailed, message: "later")

    /// A short name for a phase, for tables and messages.
    static func name(_ p: Machine.Phase) -> String {
        switch p {
        case .ready(nil): "ready"
        case .ready(.stop?): "ready+stop"
        case .ready(.cancel?): "ready+cancel"
        case .running: "running"
        case .draining(let d): "draining(\(d.components.seconds))"
        case .cancelling(.cancelled): "cancelling(cancelled)"
        case .cancelling(.drainRanOut): "cancelling(drain)"
        case .cancelling(.failed(let e)): "cancelling(failed \(e.node))"
        case .finished(let o, _):
            switch o {
            case .completed: "finished(completed)"
            case .stopped: "finished(stopped)"
            case .cancelled: "finished(cancelled)"
            case .failed(let node, _): "finished(failed \(node))"
            }
        }
    }

    static func name(_ a: Machine.Action) -> String {
        switch a {
        case .reportFailure(let e): "report(\(e.node))"
        case .reportDrainTimeout: "report(drain)"
        case .resume(let w): "resume(\(w))"
        case .finished: "end"
        }
    }

    // MARK: Every event in every state

    /// The states, each reached from a fresh machine at time 0 by events (two node tasks once started;
    /// waiter 1 waits for the stop, waiter 2 for the abort).
    static let states: [(String, @Sendable (inout Machine) -> Void)] = [
        ("ready", { _ in }),
        ("ready+stop", { _ = $0.stop(now: .zero) }),
        ("ready+cancel", { _ = $0.cancel() }),
        ("running", { m in _ = m.start(nodes: 2, now: .zero); park(&m) }),
        ("draining(10)", { m in _ = m.start(nodes: 2, now: .zero); park(&m); _ = m.stop(now: .zero) }),
        ("cancelling(cancelled)", { m in _ = m.start(nodes: 2, now: .zero); park(&m); _ = m.cancel() }),
        ("cancelling(drain)", { m in _ = m.start(nodes: 2, now: .zero); park(&m); _ = m.stop(now: .zero); _ = m.drainDeadlinePassed(now: .seconds(10)) }),
        ("cancelling(failed bad)", { m in _ = m.start(nodes: 3, now: .zero); park(&m); _ = m.nodeEnded(.failed(boom), policy: .default, now: .zero) }),
        ("finished(completed)", { m in _ = m.start(nodes: 1, now: .zero); _ = m.nodeEnded(.finished, policy: .default, now: .zero) }),
    ]

    static func park(_ m: inout Machine) {
        _ = m.park(m.makeID(), 1, for: .stop)
        _ = m.park(m.makeID(), 2, for: .abort)
    }

    static let events: [(String, @Sendable (inout Machine) -> [Machine.Action])] = [
        ("start", { $0.start(nodes: 2, now: .seconds(1)).1 }),
        ("stop", { $0.stop(now: .seconds(1)) }),
        ("cancel", { $0.cancel() }),
        ("deadline early", { $0.drainDeadlinePassed(now: .seconds(9)) }),
        ("deadline", { $0.drainDeadlinePassed(now: .seconds(10)) }),
        ("node finished", { $0.nodeEnded(.finished, policy: .default, now: .seconds(1)) }),
        ("node finished, ends pipeline", { $0.nodeEnded(.finished, policy: .endsPipeline, now: .seconds(1)) }),
        ("node failed", { $0.nodeEnded(.failed(later), policy: .default, now: .seconds(1)) }),
        ("optional node failed", { $0.nodeEnded(.failed(later), policy: .optional, now: .seconds(1)) }),
    ]

    /// state → event → "next state: actions". Every cell is written out: a change to any rule shows here.
    static let table: [String: [String: String]] = [
        "ready": [
            "start": "running: ", "stop": "ready+stop: ", "cancel": "ready+cancel: ",
            "deadline early": "ready: ", "deadline": "ready: ",
            "node finished": "ready: ", "node finished, ends pipeline": "ready: ", "node failed": "ready: ", "optional node failed": "ready: ",
        ],
        "ready+stop": [
            "start": "draining(11): ", "stop": "ready+stop: ", "cancel": "ready+cancel: ",
            "deadline early": "ready+stop: ", "deadline": "ready+stop: ",
            "node finished": "ready+stop: ", "node finished, ends pipeline": "ready+stop: ", "node failed": "ready+stop: ",
            "optional node failed": "ready+stop: ",
        ],
        "ready+cancel": [
            "start": "cancelling(cancelled): ", "stop": "ready+cancel: ", "cancel": "ready+cancel: ",
            "deadline early": "ready+cancel: ", "deadline": "ready+cancel: ",
            "node finished": "ready+cancel: ", "node finished, ends pipeline": "ready+cancel: ", "node failed": "ready+cancel: ",
            "optional node failed": "ready+cancel: ",
        ],
        "running": [
            "start": "running: ", "stop": "draining(11): resume(1)", "cancel": "cancelling(cancelled): resume(1) resume(2)",
            "deadline early": "running: ", "deadline": "running: ",
            "node finished": "running: ", "node finished, ends pipeline": "draining(11): resume(1)",
            "node failed": "cancelling(failed worse): report(worse) resume(1) resume(2)",
            "optional node failed": "running: report(worse)",
        ],
        "draining(10)": [
            "start": "draining(10): ", "stop": "draining(10): ", "cancel": "cancelling(cancelled): resume(2)",
            "deadline early": "draining(10): ", "deadline": "cancelling(drain): report(drain) resume(2)",
            "node finished": "draining(10): ", "node finished, ends pipeline": "draining(10): ",
            "node failed": "cancelling(failed worse): report(worse) resume(2)",
            "optional node failed": "draining(10): report(worse)",
        ],
        "cancelling(cancelled)": [
            "start": "cancelling(cancelled): ", "stop": "cancelling(cancelled): ", "cancel": "cancelling(cancelled): ",
            "deadline early": "cancelling(cancelled): ", "deadline": "cancelling(cancelled): ",
            "node finished": "cancelling(cancelled): ", "node finished, ends pipeline": "cancelling(cancelled): ",
            "node failed": "cancelling(failed worse): report(worse)",
            "optional node failed": "cancelling(cancelled): report(worse)",
        ],
        "cancelling(drain)": [
            "start": "cancelling(drain): ", "stop": "cancelling(drain): ", "cancel": "cancelling(drain): ",
            "deadline early": "cancelling(drain): ", "deadline": "cancelling(drain): ",
            "node finished": "cancelling(drain): ", "node finished, ends pipeline": "cancelling(drain): ",
            "node failed": "cancelling(failed worse): report(worse)",
            "optional node failed": "cancelling(drain): report(worse)",
        ],
        "cancelling(failed bad)": [
            "start": "cancelling(failed bad): ", "stop": "cancelling(failed bad): ", "cancel": "cancelling(failed bad): ",
            "deadline early": "cancelling(failed bad): ", "deadline": "cancelling(failed bad): ",
            "node finished": "cancelling(failed bad): ", "node finished, ends pipeline": "cancelling(failed bad): ",
            "node failed": "cancelling(failed bad): ",
            "optional node failed": "cancelling(failed bad): report(worse)",
        ],
        "finished(completed)": [
            "start": "finished(completed): ", "stop": "finished(completed): ", "cancel": "finished(completed): ",
            "deadline early": "finished(completed): ", "deadline": "finished(completed): ",
            "node finished": "finished(completed): ", "node finished, ends pipeline": "finished(completed): ",
            "node failed": "finished(completed): ", "optional node failed": "finished(completed): ",
        ],
    ]

    @Test("every event in every state: the next state and the actions, in order")
    func everyEventInEveryState() {
        for (stateName, reach) in Self.states {
            var start = Machine(drainTimeout: Self.timeout)
            reach(&start)
            #expect(Self.name(start.phase) == stateName, "reaching \(stateName)")
            for (eventName, event) in Self.events {
                var m = start
                let actions = event(&m)
                let got = "\(Self.name(m.phase)): " + actions.map(Self.name).joined(separator: " ")
                #expect(got == Self.table[stateName]?[eventName], "\(stateName) + \(eventName)")
            }
        }
    }

    @Test("the last node's end finishes the run with the outcome of where it was")
    func lastNodeEnds() {
        let cases: [(String, (inout Machine) -> Void, String)] = [
            ("running", { _ in }, "finished(completed)"),
            ("draining", { _ = $0.stop(now: .zero) }, "finished(stopped)"),
            ("cancelled", { _ = $0.cancel() }, "finished(cancelled)"),
            ("drain ran out", { _ = $0.stop(now: .zero); _ = $0.drainDeadlinePassed(now: .seconds(10)) }, "finished(cancelled)"),
            ("failed", { _ = $0.nodeEnded(.failed(Self.boom), policy: .default, now: .zero) }, "finished(failed bad)"),
        ]
        for (label, before, expected) in cases {
            var m = Machine(drainTimeout: Self.timeout)
            _ = m.start(nodes: label == "failed" ? 3 : 2, now: .zero)
            Self.park(&m)
            before(&m)
            _ = m.nodeEnded(.finished, policy: .default, now: .zero)
            let actions = m.nodeEnded(.finished, policy: .default, now: .zero)
            #expect(Self.name(m.phase) == expected, "\(label)")
            #expect(actions.last.map(Self.name) == "end", "\(label)")
            #expect(m.waiting == 0, "\(label): waiters left parked")
            #expect(m.isStopping == (expected != "finished(completed)"), "\(label)")
        }
        var empty = Machine(drainTimeout: Self.timeout)
        let actions = empty.start(nodes: 0, now: .zero).1.map(Self.name)
        #expect(actions == ["end"])
        #expect(Self.name(empty.phase) == "finished(completed)")
    }

    // MARK: Every sequence, against a model

    /// What the rules say, kept apart from the machine: what was asked and when, and what followed.
    struct Model: Hashable {
        var now = 0                       // seconds on the pipeline's clock
        var started = false
        var nodesLeft = 2
        var stopRequested = false         // before the start
        var stopAt: Int?                  // when the drain began
        var cancelled = false
        var failure: String?              // the failure that is the outcome
        var ranOut = false
        var ended = false
        var stopWaiter = 0                // 0 not parked yet, 1 parked, 2 resumed
        var abortWaiter = 0

        var phase: String {
            if ended {
                if let failure { return "finished(failed \(failure))" }
                if cancelled || ranOut { return "finished(cancelled)" }
                return stopAt != nil ? "finished(stopped)" : "finished(completed)"
            }
            if !started { return cancelled ? "ready+cancel" : stopRequested ? "ready+stop" : "ready" }
            if let failure { return "cancelling(failed \(failure))" }
            if ranOut { return "cancelling(drain)" }
            if cancelled { return "cancelling(cancelled)" }
            if let stopAt { return "draining(\(stopAt + 10))" }
            return "running"
        }
        var isRunning: Bool { phase == "running" }
        var isDraining: Bool { phase.hasPrefix("draining") }
        var isCancelling: Bool { phase.hasPrefix("cancelling") }
        var stopping: Bool { !(isRunning || phase == "ready" || phase == "finished(completed)") }

        /// A stop, from wherever it comes (the caller, or a node that ends the run).
        mutating func stop() {
            if !started { stopRequested = true } else if isRunning { stopAt = now }
        }
    }

    struct Violation: Error, CustomStringConvertible { var description: String }

    typealias Step = (inout Model, inout Machine) -> (expectedReports: [String], actions: [Machine.Action])

    static func steps(_ s: Model) -> [(String, Step)] {
        var out: [(String, Step)] = []
        if s.now < 18 { out.append(("advance", { s, _ in s.now += 6; return ([], []) })) }
        if !s.started {
            out.append(("start", { s, m in
                s.started = true
                if s.stopRequested && !s.cancelled { s.stopAt = s.now }
                return ([], m.start(nodes: 2, now: .seconds(s.now)).1)
            }))
        }
        out.append(("stop", { s, m in s.stop(); return ([], m.stop(now: .seconds(s.now))) }))
        out.append(("cancel", { s, m in
            if !s.started || s.isRunning || s.isDraining { s.cancelled = true }
            return ([], m.cancel())
        }))
        if s.started {
            out.append(("deadline", { s, m in
                var reports: [String] = []
                if s.isDraining, let at = s.stopAt, s.now >= at + 10 { s.ranOut = true; reports = ["drain"] }
                return (reports, m.drainDeadlinePassed(now: .seconds(s.now)))
            }))
        }
        if s.started && s.nodesLeft > 0 {
            let ends: [(String, Machine.NodeEnd, NodeTermination)] = [
                ("finishes", .finished, .default), ("finishes, ending the run", .finished, .endsPipeline),
                ("fails", .failed(boom), .default), ("fails, optional", .failed(later), .optional),
            ]
            for (label, end, policy) in ends {
                out.append(("node \(label)", { s, m in
                    var reports: [String] = []
                    switch (label, end) {
                    case ("finishes, ending the run", _): s.stop()
                    case ("fails", .failed(let e)):
                        if s.isRunning || s.isDraining || (s.isCancelling && s.failure == nil) { s.failure = e.node; reports = [e.node] }
                    case ("fails, optional", .failed(let e)): reports = [e.node]
                    default: break
                    }
                    s.nodesLeft -= 1
                    if s.nodesLeft == 0 { s.ended = true }
                    return (reports, m.nodeEnded(end, policy: policy, now: .seconds(s.now)))
                }))
            }
        }
        if s.started && s.stopWaiter == 0 {
            out.append(("park stop waiter", { s, m in
                let now = m.park(m.makeID(), 1, for: .stop)
                s.stopWaiter = now ? 2 : 1
                // Told to go at once exactly when the stop has happened (an unexpected report fails the check).
                return (now == !s.isRunning ? [] : ["parked wrongly"], [])
            }))
        }
        if s.started && s.abortWaiter == 0 {
            out.append(("park abort waiter", { s, m in
                let now = m.park(m.makeID(), 2, for: .abort)
                s.abortWaiter = now ? 2 : 1
                return (now == !(s.isRunning || s.isDraining) ? [] : ["parked wrongly"], [])
            }))
        }
        return out
    }

    /// Checks one step's actions against the model, and the state the step leaves.
    static func check(_ before: Model, _ s: inout Model, _ m: Machine, _ reports: [String], _ actions: [Machine.Action], _ trace: [String]) throws {
        func fail(_ what: String) throws { throw Violation(description: "\(what): \(trace)") }
        var got: [String] = []
        var ends = 0
        for a in actions {
            switch a {
            case .resume(1):
                if s.stopWaiter != 1 { try fail("the stop waiter resumed while not parked") }
                s.stopWaiter = 2
            case .resume(2):
                if s.abortWaiter != 1 { try fail("the abort waiter resumed while not parked") }
                s.abortWaiter = 2
            case .resume(let w): try fail("unknown waiter \(w)")
            case .reportFailure(let e): got.append(e.node)
            case .reportDrainTimeout: got.append("drain")
            case .finished: ends += 1
            }
        }
        if got != reports { try fail("reports \(got), the rules say \(reports)") }
        if ends != (s.ended && !before.ended ? 1 : 0) { try fail("\(ends) ends") }
        if name(m.phase) != s.phase { try fail("machine \(name(m.phase)), the rules say \(s.phase)") }
        if m.isStopping != s.stopping { try fail("isStopping \(m.isStopping)") }
        // Parked only while what it waits for has not happened; resumed as soon as it has.
        if s.stopWaiter == 1, !(s.isRunning) { try fail("the stop waiter is still parked in \(s.phase)") }
        if s.abortWaiter == 1, !(s.isRunning || s.isDraining) { try fail("the abort waiter is still parked in \(s.phase)") }
        if s.stopWaiter == 2, before.stopWaiter == 1, s.isRunning { try fail("the stop waiter resumed while running") }
        if s.abortWaiter == 2, before.abortWaiter == 1, s.isRunning || s.isDraining { try fail("the abort waiter resumed before the abort") }
        if m.waiting != [s.stopWaiter, s.abortWaiter].filter({ $0 == 1 }).count { try fail("machine holds \(m.waiting) waiters") }
    }

    @Test("every sequence of starts, stops, cancels, deadlines, node ends and waits follows the rules")
    func everySequence() throws {
        var seen: Set<Model> = []
        var stack: [(Model, Machine, [String])] = [(Model(), Machine(drainTimeout: Self.timeout), [])]
        while let (s, m, trace) = stack.popLast() {
            guard seen.insert(s).inserted else { continue }
            for (name, step) in Self.steps(s) {
                var s2 = s, m2 = m
                let (reports, actions) = step(&s2, &m2)
                try Self.check(s, &s2, m2, reports, actions, trace + [name])
                stack.append((s2, m2, trace + [name]))
            }
        }
        #expect(seen.count > 100, "states: \(seen.count)")
    }
}
