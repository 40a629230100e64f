import Foundation
import PipelineCore

/// How many of the machine's cores other processes leave free, from the kernel's CPU accounting.
///
/// whisper.cpp's decoders are compute-bound: two decodings side by side on two cores while another process
/// keeps one of them busy each get half a core and both finish late, and a decoding with two threads waits
/// at every barrier for the thread that was descheduled. So the decoder pool starts a decoding, and gives it
/// threads, only as far as cores are free. "Free" here is: all cores, less what processes other than this
/// one used over the last interval (`/proc/stat` less `/proc/self/stat`). This process's own use does not
/// count against it: its decodings are what the budget hands out. Nor does the time of processes running at
/// a lower priority (a positive nice value, such as a background build): they give way to the decoders.
final class CoreBudget: Sendable {
    /// Cores online.
    let cores: Int
    /// How long one reading stands before the next is taken.
    let interval: Duration

    private struct Sample {
        var at: ContinuousClock.Instant
        var total: UInt64      // all CPU time, every core (clock ticks)
        var idle: UInt64       // idle, I/O wait and niced processes' time
        var own: UInt64        // this process's user + system time
        var free: Double
    }
    private let last = LockedValue<Sample?>(nil)
    /// A fixed figure instead of readings (tests; systems without /proc).
    private let fixed: Double?

    init(cores: Int = ProcessInfo.processInfo.activeProcessorCount, interval: Duration = .milliseconds(250), fixedFree: Double? = nil) {
        self.cores = max(1, cores)
        self.interval = interval
        fixed = fixedFree
    }

    /// The process-wide budget.
    static let shared = CoreBudget()

    /// Cores that other processes leave free (0...cores), as of the latest reading (taken now when the last
    /// one is older than `interval`).
    var freeCores: Double {
        if let fixed { return fixed }
        let now = ContinuousClock.now
        return last.withLock { (sample: inout Sample?) -> Double in
            if let s = sample, now - s.at < interval { return s.free }
            guard let (total, idle) = Self.readStat(), let own = Self.readOwn() else { return Double(cores) }
            var free = Double(cores)
            if let s = sample, total > s.total {
                let elapsed = Double(total - s.total)           // ticks over all cores
                let busy = elapsed - Double(idle &- s.idle)     // ticks a process at normal priority or above ran
                let others = max(0, busy - Double(own &- s.own))
                free = max(0, min(Double(cores), Double(cores) * (1 - others / elapsed)))
            } else if let s = sample {
                free = s.free
            }
            sample = Sample(at: now, total: total, idle: idle, own: own, free: free)
            return free
        }
    }

    /// Decodings that may run at once: the free cores, rounded to the nearest whole core, at least one.
    var decodersAllowed: Int { max(1, Int((freeCores + 0.3).rounded(.down))) }

    /// `/proc/stat`'s first line: (all ticks, idle + iowait + nice ticks).
    static func readStat() -> (UInt64, UInt64)? {
        guard let text = try? String(contentsOfFile: "/proc/stat", encoding: .utf8),
              let line = text.split(separator: "\n").first, line.hasPrefix("cpu ") else { return nil }
        let fields = line.split(separator: " ").dropFirst().compactMap { UInt64($0) }
        guard fields.count >= 5 else { return nil }
        // user nice system idle iowait irq softirq steal (guest times are already in user and nice).
        let total = fields.prefix(8).reduce(0, +)
        return (total, fields[1] + fields[3] + fields[4])
    }

    /// This process's user + system ticks (`/proc/self/stat` fields 14 and 15).
    static func readOwn() -> UInt64? {
        guard let text = try? String(contentsOfFile: "/proc/self/stat", encoding: .utf8),
              let close = text.lastIndex(of: ")") else { return nil }
        let fields = text[text.index(after: close)...].split(separator: " ")
        // After the command name: state is field 3, so utime (14) and stime (15) are at 11 and 12 here.
        guard fields.count > 12, let user = UInt64(fields[11]), let system = UInt64(fields[12]) else { return nil }
        return user + system
    }
}
