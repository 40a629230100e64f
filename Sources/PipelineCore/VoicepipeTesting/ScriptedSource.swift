import PipelineCore

/// A source that plays a script: frames, and waits on the pipeline's clock between them (a
/// ``ManualClock`` in tests), then frames pushed while it runs, until its feed ends.
public final class ScriptedSource: Node {
    /// One step of a script.
    public enum Step: Sendable {
        /// Send a frame on `out`.
        case frame(Frame)
        /// Sleep on the pipeline's clock.
        case wait(Duration)
    }

    let count: Int
    let step: @Sendable (Int) -> Step
    let feed: AsyncStream<Frame>?

    /// Creates a source that plays `steps`, then forwards `feed` (if any) until it ends.
    public init(_ steps: [Step], feed: AsyncStream<Frame>? = nil) {
        self.count = steps.count
        self.step = { steps[$0] }
        self.feed = feed
    }

    /// Creates a source that makes `count` frames on demand (`frame(i)` for the i-th), each
    /// preceded by a wait of `interval` on the pipeline's clock when it is not zero. Nothing is made
    /// before it is sent, so a long or endless script costs no memory.
    public init(count: Int, interval: Duration = .zero, frame: @escaping @Sendable (Int) -> Frame) {
        if interval > .zero {
            self.count = 2 * count
            self.step = { $0 % 2 == 0 ? .wait(interval) : .frame(frame($0 / 2)) }
        } else {
            self.count = count
            self.step = { .frame(frame($0)) }
        }
        self.feed = nil
    }

    /// Creates a source that sends `frames`, `interval` apart on the pipeline's clock.
    public convenience init(frames: [Frame], interval: Duration = .zero) {
        var steps: [Step] = []
        for f in frames {
            if interval > .zero { steps.append(.wait(interval)) }
            steps.append(.frame(f))
        }
        self.init(steps)
    }

    public func run(_ context: NodeContext) async throws {
        for i in 0..<count {
            switch step(i) {
            case .frame(let f): try await context.send(f)
            case .wait(let d): try await context.clock.sleep(for: d)
            }
        }
        if let feed {
            for await f in feed { try await context.send(f) }
        }
    }

    /// A node type whose instances play `steps` (a fresh source on each instantiation).
    /// `kinds`/`codecs` are what its `out` port carries; `format` what validation sees for audio.
    public static func descriptor(type: String = "scripted", kinds: Set<FrameKind> = [.audio], codecs: Set<String>? = nil,
                                  format: AudioFormat? = nil, steps: [Step]) -> NodeDescriptor {
        NodeDescriptor(
            type: type, summary: "plays scripted frames (testing)", family: "sources", inputs: [],
            outputs: [PortSpec("out", kinds, codecs: codecs)],
            configuration: NoConfiguration.self, format: .fixed(format),
            make: { _, _ in ScriptedSource(steps) })
    }

    /// Audio frames of `samplesPerFrame` samples cut from `samples`, with sample-count timestamps.
    public static func audioFrames(_ samples: [Int16], format: AudioFormat, samplesPerFrame: Int) -> [Frame] {
        let step = max(1, samplesPerFrame) * format.channels
        return stride(from: 0, to: samples.count, by: step).map { start in
            let end = min(samples.count, start + step)
            return Frame.audio(Array(samples[start..<end]), format: format, sampleIndex: Int64(start / format.channels))
        }
    }
}
