/// The Whisper decoder pool's rules, without threads or locks: which request each decoder thread runs
/// next, which running partial is told to abort, which waiting request is answered without a decoding.
/// Events go in (a request submitted or cancelled, a decoding finished, threads added); actions come out,
/// and ``WhisperDecoderPool`` carries them out after releasing its lock.
///
/// The rules:
/// - **Finals first.** A waiting final always goes before everything else, in arrival order; then finals
///   decoded ahead (an utterance paused and may be over: its final starts before the VAD's hang-over
///   ends, and is promoted to a final when the utterance does end, or cancelled when speech resumes);
///   then partials.
/// - **Finals (and finals ahead) use every decoder thread; partials only the cores other processes leave free.** With one
///   thread per decoding there is no barrier to wait at, and the kernel shares cores fairly between
///   runnable threads: two finals side by side, while another process holds one of the two cores, each get
///   two thirds of a core, so both end at 1.5 units of work instead of 1 and 2 in turn. Finals waiting
///   behind each other is what makes a worker's sessions miss their deadline when sentences end together;
///   partials are guesses, and run only on cores no one else wants (``CoreBudget``).
/// - **A final takes a partial's place.** When a final waits, or more decodings run than the free cores,
///   running partials are told to abort (whisper.cpp notices between graph nodes) and answer nil.
/// - **One partial per session waits**: a newer one replaces it (the older answers nil).
/// - **Threads per decoding**: what the request asks, at most the free cores not used by other decodings,
///   at least one.
struct WhisperSchedule<Job> {
    enum Priority: Sendable { case final, ahead, partial }

    struct Entry {
        let id: UInt64
        let session: UInt64
        let priority: Priority
        /// Threads the request asks for.
        let threads: Int
        let job: Job
    }

    enum Action {
        /// Run `entry` on decoder thread `worker` with `threads` threads.
        case start(worker: Int, entry: Entry, threads: Int)
        /// Tell decoder thread `worker` to abort the decoding it runs.
        case abort(worker: Int)
        /// Answer a waiting request with no decoding: a partial replaced by a newer one of its session, or made
        /// useless by its session's final.
        case answerNothing(Entry)
        /// Answer a waiting request as cancelled (its caller went away).
        case cancelled(Entry)
    }

    /// What a finished decoding was: run to its end, or aborted (by a final, or by its caller's cancellation).
    enum Ending { case completed, aborted }

    private(set) var finals: [Entry] = []
    private(set) var aheads: [Entry] = []
    private(set) var partials: [Entry] = []
    /// Per decoder thread: the decoding it runs, and whether it was told to abort.
    private(set) var running: [(entry: Entry, aborting: Bool)?] = []
    private(set) var decoded = 0
    private(set) var aborted = 0
    private(set) var replaced = 0

    var workers: Int { running.count }
    var runningCount: Int { running.count { $0 != nil } }
    private var idleWorker: Int? { running.firstIndex { $0 == nil } }

    /// Adds decoder threads (the pool never shrinks); waiting requests start on them.
    mutating func addWorkers(upTo count: Int, allowed: Int) -> [Action] {
        while running.count < count { running.append(nil) }
        return dispatch(allowed: allowed)
    }

    /// A new request. `allowed`: decodings the free cores allow now (``CoreBudget/decodersAllowed``).
    mutating func submit(_ entry: Entry, allowed: Int) -> [Action] {
        var actions: [Action] = []
        if let i = partials.firstIndex(where: { $0.session == entry.session }) {
            // A session's newer partial, or its final, makes its waiting partial useless.
            actions.append(.answerNothing(partials.remove(at: i)))
            replaced += 1
        }
        switch entry.priority {
        case .final: finals.append(entry)
        case .ahead: aheads.append(entry)
        case .partial: partials.append(entry)
        }
        return actions + dispatch(allowed: allowed)
    }

    /// The utterance of final-ahead `id` ended: if it still waits, it waits as a final now (after the finals
    /// already waiting). A running one goes on; nothing else changes.
    mutating func promote(id: UInt64, allowed: Int) -> [Action] {
        guard let i = aheads.firstIndex(where: { $0.id == id }) else { return [] }
        let e = aheads.remove(at: i)
        finals.append(Entry(id: e.id, session: e.session, priority: .final, threads: e.threads, job: e.job))
        return dispatch(allowed: allowed)
    }

    /// The caller of request `id` went away: a waiting request is answered as cancelled, a running one aborted.
    mutating func cancel(id: UInt64) -> [Action] {
        if let i = finals.firstIndex(where: { $0.id == id }) { return [.cancelled(finals.remove(at: i))] }
        if let i = aheads.firstIndex(where: { $0.id == id }) { return [.cancelled(aheads.remove(at: i))] }
        if let i = partials.firstIndex(where: { $0.id == id }) { return [.cancelled(partials.remove(at: i))] }
        if let w = running.firstIndex(where: { $0?.entry.id == id }), let r = running[w], !r.aborting {
            running[w] = (r.entry, true)
            return [.abort(worker: w)]
        }
        return []
    }

    /// Decoder thread `worker` ended its decoding: how it ended (aborted when it was told to), and what starts next.
    mutating func finished(worker: Int, allowed: Int) -> (ending: Ending, actions: [Action]) {
        guard worker < running.count, let r = running[worker] else { return (.completed, dispatch(allowed: allowed)) }
        running[worker] = nil
        if r.aborting { aborted += 1 } else { decoded += 1 }
        return (r.aborting ? .aborted : .completed, dispatch(allowed: allowed))
    }

    /// Nothing waits, and a partial submitted now starts at once on a free core: it delays no one.
    func hasFreeThread(allowed: Int) -> Bool {
        finals.isEmpty && aheads.isEmpty && partials.isEmpty && idleWorker != nil && runningCount < allowed
    }

    /// No final waits: a final decoded ahead now goes before no one's final.
    var takesAhead: Bool { finals.isEmpty }

    /// Starts what may start, and aborts the partials finals need the room of.
    private mutating func dispatch(allowed: Int) -> [Action] {
        var actions: [Action] = []
        while let w = idleWorker {
            let entry: Entry
            if !finals.isEmpty {
                entry = finals.removeFirst()
            } else if !aheads.isEmpty {
                entry = aheads.removeFirst()
            } else if !partials.isEmpty, runningCount < allowed {
                entry = partials.removeFirst()
            } else {
                break
            }
            let threads = max(1, min(entry.threads, allowed - runningCount))
            running[w] = (entry, false)
            actions.append(.start(worker: w, entry: entry, threads: threads))
        }
        // Partials give way: one per final (or final ahead) still waiting for a thread, and as many as run
        // beyond the free cores.
        let excess = max(0, runningCount - max(1, allowed))
        var toAbort = finals.count + aheads.count + excess
        for w in running.indices where toAbort > 0 {
            guard let r = running[w], r.entry.priority == .partial else { continue }
            if !r.aborting {
                running[w] = (r.entry, true)
                actions.append(.abort(worker: w))
            }
            toAbort -= 1
        }
        return actions
    }
}

extension WhisperSchedule.Entry: Sendable where Job: Sendable {}
extension WhisperSchedule.Action: Sendable where Job: Sendable {}
