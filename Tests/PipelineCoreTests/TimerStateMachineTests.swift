import Testing
@testable import PipelineCore

/// The timer thread's rules on its pure state machine, on plain numbers for time.
@Suite("Timer state machine")
struct TimerStateMachineTests {
    typealias Machine = TimerStateMachine<Int, String>

    @Test("a passed deadline or a cancelled task is answered at once; the thread wakes only for a new earliest")
    func adding() {
        var m = Machine()
        guard case .resumeNow = m.add(m.makeID(), deadline: 5, "past", now: 5, cancelled: false) else { Issue.record("not at once"); return }
        guard case .cancelledNow = m.add(m.makeID(), deadline: 50, "cancelled", now: 5, cancelled: true) else { Issue.record("parked"); return }
        #expect(m.count == 0)
        guard case .parked(wakeThread: true) = m.add(m.makeID(), deadline: 30, "a", now: 5, cancelled: false) else { Issue.record("a"); return }
        guard case .parked(wakeThread: false) = m.add(m.makeID(), deadline: 40, "b", now: 5, cancelled: false) else { Issue.record("b"); return }
        guard case .parked(wakeThread: true) = m.add(m.makeID(), deadline: 20, "c", now: 5, cancelled: false) else { Issue.record("c"); return }
        guard case .parked(wakeThread: false) = m.add(m.makeID(), deadline: 20, "d", now: 5, cancelled: false) else { Issue.record("d"); return }
        #expect(m.count == 4 && m.earliest == 20)
    }

    @Test("due sleepers resume in deadline order, then arrival order; the next deadline follows")
    func waking() {
        var m = Machine()
        for (deadline, name) in [(30, "a"), (10, "b"), (20, "c"), (10, "d"), (40, "e")] {
            _ = m.add(m.makeID(), deadline: deadline, name, now: 0, cancelled: false)
        }
        let early = m.due(now: 9)
        #expect(early.due.isEmpty && early.next == 10)
        let first = m.due(now: 20)
        #expect(first.due == ["b", "d", "c"] && first.next == 30)
        let rest = m.due(now: 100)
        #expect(rest.due == ["a", "e"] && rest.next == nil)
        #expect(m.count == 0)
    }

    @Test("a cancelled sleeper is handed back once and never comes due")
    func cancelling() {
        var m = Machine()
        let a = m.makeID()
        _ = m.add(a, deadline: 10, "a", now: 0, cancelled: false)
        _ = m.add(m.makeID(), deadline: 20, "b", now: 0, cancelled: false)
        #expect(m.cancel(a) == "a")
        #expect(m.cancel(a) == nil)
        #expect(m.earliest == 20)
        #expect(m.due(now: 100).due == ["b"])
        #expect(m.cancel(999) == nil)
    }

    @Test("every order of three sleeps, a cancel and the thread's wake-ups resumes each sleeper exactly once")
    func everyOrder() {
        // Events: s0, s1, s2 (add with deadlines 10, 20, 20), c1 (cancel sleeper 1), t15, t25 (wake at).
        let events = ["s0", "s1", "s2", "c1", "t15", "t25"]
        func permutations(_ xs: [String]) -> [[String]] {
            xs.count <= 1 ? [xs] : xs.indices.flatMap { i -> [[String]] in
                var rest = xs; let x = rest.remove(at: i)
                return permutations(rest).map { [x] + $0 }
            }
        }
        var checked = 0
        for order in permutations(events) {
            var m = Machine()
            var now = 0
            var ids: [Int: UInt64] = [:]
            var resumed: [String: Int] = [:]
            var cancelled: Set<String> = []
            for e in order {
                switch e {
                case "s0", "s1", "s2":
                    let k = Int(e.dropFirst())!
                    let id = m.makeID(); ids[k] = id
                    switch m.add(id, deadline: [10, 20, 20][k], "\(k)", now: now, cancelled: false) {
                    case .resumeNow: resumed["\(k)", default: 0] += 1
                    case .cancelledNow: Issue.record("cancelled without a cancel")
                    case .parked: break
                    }
                case "c1":
                    if let id = ids[1], let s = m.cancel(id) { cancelled.insert(s); resumed[s, default: 0] += 1 }
                default:
                    now = max(now, Int(e.dropFirst())!)
                    for s in m.due(now: now).due { resumed[s, default: 0] += 1 }
                }
            }
            for s in m.due(now: 1_000).due { resumed[s, default: 0] += 1 }
            #expect(resumed.values.allSatisfy { $0 == 1 } && resumed.count == 3, "\(order): \(resumed)")
            #expect(m.count == 0)
            checked += 1
        }
        #expect(checked == 720)
    }
}
