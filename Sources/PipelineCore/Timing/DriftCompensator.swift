import Foundation

/// Keeps a playback queue at its target depth when the producer's clock and the consumer's clock
/// differ (a capture device, an RTP peer or a file paced by the system clock feeding a sound card
/// that runs a little fast or slow). A pure state machine: feed it the queue depth with the time it
/// was seen; it answers the resampling correction to apply, in parts per million of the output
/// rate (negative: produce fewer samples, because input arrives faster than it is played).
///
/// The controller is proportional-integral on the smoothed depth error: the integral part settles
/// on the clock drift itself (reported as ``driftPPM``), the proportional part pulls the queue
/// back to its target. Corrections are clamped to ±``maxPPM`` so that pitch never changes audibly.
///
/// ```swift
/// var c = DriftCompensator()
/// let ppm = c.update(depth: .milliseconds(62), at: .seconds(12))   // then resample by (1 + ppm / 1e6)
/// ```
public struct DriftCompensator: Sendable {
    /// Largest correction applied, in ppm (0.1 %).
    public var maxPPM: Double = 1000
    /// Depth the queue is held at; `nil` until warm-up ends, then the depth seen at that moment.
    public private(set) var target: Duration?
    /// Time from the first observation to fixing the target.
    public var warmUp: Duration
    /// Proportional gain: ppm per millisecond of depth error.
    public var proportionalPPMPerMs: Double = 100
    /// Integral gain: ppm per millisecond-second of depth error.
    public var integralPPMPerMsSecond: Double = 4
    /// Time constant of the depth smoothing (the queue's depth moves in whole buffers).
    public var smoothing: Duration = .milliseconds(300)

    private var start: Duration?
    private var last: Duration?
    private var smoothed: Double?
    private var integral: Double = 0
    /// The correction last returned, in ppm.
    public private(set) var correctionPPM: Double = 0

    /// A compensator that fixes its target after `warmUp` (or holds `target` from the start).
    public init(target: Duration? = nil, warmUp: Duration = .seconds(2)) {
        self.target = target
        self.warmUp = warmUp
    }

    /// The estimated drift between the two clocks, in ppm (positive: input arrives faster than it
    /// is played).
    public var driftPPM: Double { -integral }

    /// Takes the queue depth seen at `now` (any monotonic time line) and returns the correction
    /// to apply from now on, in ppm.
    public mutating func update(depth: Duration, at now: Duration) -> Double {
        let ms = Double(depth.components.seconds) * 1000 + Double(depth.components.attoseconds) / 1e15
        let dt = last.map { max(0, Self.seconds(now - $0)) } ?? 0
        last = now
        if start == nil { start = now }
        // Exponential smoothing with a time constant, whatever the update rate.
        if let s = smoothed {
            let a = dt <= 0 ? 0 : 1 - exp(-dt / max(1e-3, Self.seconds(smoothing)))
            smoothed = s + a * (ms - s)
        } else {
            smoothed = ms
        }
        guard let start, now - start >= warmUp else { return 0 }
        if target == nil { target = .microseconds(Int64((smoothed ?? ms) * 1000)) }
        let targetMs = Double(target!.components.seconds) * 1000 + Double(target!.components.attoseconds) / 1e15
        let error = (smoothed ?? ms) - targetMs
        // Anti-windup: stop integrating while the output is saturated in the error's direction.
        let next = integral - integralPPMPerMsSecond * error * dt
        if abs(next) <= maxPPM { integral = next }
        correctionPPM = max(-maxPPM, min(maxPPM, integral - proportionalPPMPerMs * error))
        return correctionPPM
    }

    static func seconds(_ d: Duration) -> Double {
        Double(d.components.seconds) + Double(d.components.attoseconds) / 1e18
    }
}
