import Synchronization

/// The level of the audio crossing one edge, measured only while someone watches (a live console):
/// with nobody watching, an edge pays one relaxed atomic load per frame taken and nothing else.
final class EdgeLevel: Sendable {
    private let watchers = Atomic<Int>(0)
    /// Highest peak of the audio frames taken since the last read, as a fraction of full scale (0...1),
    /// stored as its bit pattern (which orders as the value does for non-negative doubles).
    private let peakBits = Atomic<UInt64>(0)

    /// Called for every frame the consumer takes.
    @inline(__always)
    func note(_ frame: Frame) {
        guard watchers.load(ordering: .relaxed) > 0, let audio = frame.audio else { return }
        var peak: Int32 = 0
        for s in audio.samples {
            let a = s == .min ? 32768 : Int32(abs(s))
            if a > peak { peak = a }
        }
        let bits = (Double(peak) / 32768).bitPattern
        var old = peakBits.load(ordering: .relaxed)
        while bits > old {
            let (exchanged, current) = peakBits.compareExchange(expected: old, desired: bits, ordering: .relaxed)
            if exchanged { break }
            old = current
        }
    }

    func watch(_ on: Bool) { watchers.add(on ? 1 : -1, ordering: .relaxed) }

    /// The highest peak since the last call (0 if none), which starts the next interval.
    func takePeak() -> Double { Double(bitPattern: peakBits.exchange(0, ordering: .relaxed)) }
}
