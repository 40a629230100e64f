import DigitalHuman
import PipelineCore

/// The driving rules of the digital-human command channel, applied between the node's inputs and
/// the channel:
///
/// - after an interrupt (barge-in) while the avatar speaks, audio waits for `speak_over`
///   (`TextOver` / `AudioOver` in the newer status names), at most ``maxWait``;
/// - an open audio turn is ended (its `IsFinal` packet) before a text is sent;
/// - while the service reports `Muted` for the sentence being spoken, microphone audio is held
///   back (dropped and counted, as the SDK turns capture off) until that sentence is over.
///
/// It owns the ``AudioPacketizer``, so audio packets and texts leave in a consistent order.
actor DrivingGate {
    private var packetizer: AudioPacketizer
    private var speaking = false
    private var awaitingSpeakOver = false
    private var muted = false
    /// Longest wait for `speak_over` after an interrupt.
    let maxWait: Duration
    /// Packets not sent because the service had muted the microphone.
    private(set) var mutedPackets = 0

    /// The clock the wait for `speak_over` runs on (the node's).
    private let clock: any Clock<Duration>

    init(packetBytes: Int, maxWait: Duration = .seconds(3), clock: any Clock<Duration> = ContinuousClock()) {
        packetizer = AudioPacketizer(packetBytes: packetBytes)
        self.maxWait = maxWait
        self.clock = clock
    }

    static let overStatuses: Set<String> = ["speak_over", "TextOver", "AudioOver", "SentenceOver"]
    static let startStatuses: Set<String> = ["speak_start", "TextStart", "AudioStart", "SentenceStart"]

    /// Follows the service's pushes.
    func observe(_ push: IVHPush, details: [String: EventValue]) {
        switch push {
        case .speakStatus(let status, _):
            if Self.overStatuses.contains(status) {
                speaking = false
                awaitingSpeakOver = false
                muted = false
            } else if Self.startStatuses.contains(status) {
                speaking = true
            }
        case .speechText:
            speaking = true
            if case .bool(true)? = details["muted"] { muted = true }
        default:
            break
        }
    }

    /// An interrupt was sent: if the avatar was speaking, audio waits for its `speak_over`.
    func interrupted() {
        if speaking { awaitingSpeakOver = true }
    }

    /// The packets to send for `bytes` of microphone audio (none while muted).
    func audio(_ bytes: [UInt8], endsUtterance: Bool) async -> [IVHCommand] {
        if awaitingSpeakOver { await waitForSpeakOver(on: clock) }
        awaitingSpeakOver = false
        if muted {
            // Held back: only the end of an open turn still goes out.
            let out = endsUtterance ? packetizer.finish() : []
            mutedPackets += 1
            return out
        }
        return packetizer.push(bytes, endsUtterance: endsUtterance)
    }

    /// Waits until `speak_over` arrives (``observe(_:details:)`` clears the flag), `maxWait` passes on
    /// `clock`, or the task is cancelled; looks every 10 ms.
    private func waitForSpeakOver<C: Clock>(on clock: C) async where C.Duration == Duration {
        let deadline = clock.now.advanced(by: maxWait)
        while awaitingSpeakOver, clock.now < deadline {
            let next = clock.now.advanced(by: .milliseconds(10))
            do { try await clock.sleep(until: next < deadline ? next : deadline, tolerance: nil) } catch { return }
        }
    }

    /// Ends the open audio turn (before a text, or at the end of the input).
    func endAudioTurn() -> [IVHCommand] {
        packetizer.finish()
    }

    /// True while the service mutes the microphone.
    var isMuted: Bool { muted }
}
