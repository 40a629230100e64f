import Synchronization

/// The level of the audio crossing one edge, measured only while someone watches (a live console):
/// with nobody watching, an edge pays one relaxed atomic load per frame taken and nothing else.
final class EdgeLevel: Sendable {
    private let watchers = Atomic<Int>(0)
    /// Peak of the last audio frame taken, as a fraction of full scale (0...1), stored as its bit pattern.
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
        peakBits.store((Double(peak) / 32768).bitPattern, ordering: .relaxed)
    }

    func watch(_ on: Bool) { watchers.add(on ? 1 : -1, ordering: .relaxed) }

    /// The last peak seen while watched (0 before any).
    var peak: Double { Double(bitPattern: peakBits.load(ordering: .relaxed)) }
}
