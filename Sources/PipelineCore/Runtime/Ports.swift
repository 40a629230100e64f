import Synchronization

/// The receiving end of a node's input port. Iterate it with `next()` or `for await`.
///
/// An input with no link ends at once.
public final class InputPort: AsyncSequence, Sendable {
    public typealias Element = Frame
    /// Port name.
    public let name: String
    let edge: BoundedEdge?
    let carrier: AgeCarrier?
    let lateness: LatenessWatch?
    /// A link into this port closes a loop through the graph (``ResolvedLink/closesLoop``): its end of
    /// stream comes only after this node's own outputs end, so the node must not wait for it.
    public let closesLoop: Bool

    init(name: String, edge: BoundedEdge?, carrier: AgeCarrier? = nil, lateness: LatenessWatch? = nil, closesLoop: Bool = false) {
        self.name = name
        self.edge = edge
        self.carrier = carrier
        self.lateness = lateness
        self.closesLoop = closesLoop
    }

    /// True when a link feeds this port.
    public var isConnected: Bool { edge != nil }

    /// The next frame, or `nil` at end of stream.
    public func next() async -> Frame? {
        guard let edge else { return nil }
        guard let lateness else {
            guard let frame = await edge.receive() else { return nil }
            carrier?.take(frame)
            return frame
        }
        guard let (frame, age) = await edge.receiveMeasured() else { return nil }
        carrier?.take(frame)
        // The age at the take, as the edge's statistics count it (not after the task resumed).
        if let age { await lateness.check(age: age) } else { await lateness.check(frame) }
        return frame
    }

    /// Iterator over the frames of this port.
    public struct AsyncIterator: AsyncIteratorProtocol {
        let port: InputPort
        public mutating func next() async -> Frame? { await port.next() }
    }

    public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(port: self) }

    /// Discards the frames waiting on this input that `matching` selects (all by default) — what an
    /// interruption does to audio not yet played. They count as dropped on the link. Returns how
    /// many were discarded.
    @discardableResult
    public func flush(where matching: (Frame) -> Bool = { _ in true }) -> Int {
        edge?.flush(where: matching) ?? 0
    }
}

/// Where an output port delivers frames.
enum OutputTarget: Sendable {
    /// A bounded edge to another node.
    case edge(BoundedEdge)
    /// A direct call into a fused downstream processor (same task, no queue).
    case fused(FusedLink)
}

/// The sending end of a node's output port: stamps sequence numbers and fans out to every link.
public final class OutputPort: Sendable {
    /// Port name.
    public let name: String
    let targets: [OutputTarget]
    let stamp: FrameStamp?
    private let sequence = Atomic<UInt64>(0)

    init(name: String, targets: [OutputTarget], stamp: FrameStamp? = nil) {
        self.name = name
        self.targets = targets
        self.stamp = stamp
    }

    /// True when at least one link leaves this port.
    public var isConnected: Bool { !targets.isEmpty }

    /// Frames sent so far.
    public var framesSent: UInt64 { sequence.load(ordering: .relaxed) }

    /// Sends a frame to every link (each consumer has its own queue). Stamps `seq`.
    public func send(_ frame: Frame) async throws {
        var frame = frame
        frame.seq = sequence.wrappingAdd(1, ordering: .relaxed).oldValue
        if frame.created == nil, let stamp { stamp.apply(&frame) }
        switch targets.count {
        case 0: return
        case 1: try await deliver(frame, to: targets[0])
        default:
            for t in targets { try await deliver(frame, to: t) }
        }
    }

    @inline(__always)
    private func deliver(_ frame: Frame, to target: OutputTarget) async throws {
        switch target {
        case .edge(let e): await e.send(frame)
        case .fused(let link): try await link.deliver(frame)
        }
    }

    /// Closes the port: every consumer sees end of stream after what was sent.
    func finish() async throws {
        for t in targets {
            switch t {
            case .edge(let e): e.producerFinished()
            case .fused(let link): try await link.finish()
            }
        }
    }
}

/// Stamps ``Frame/created`` on audio and encoded frames a node sends without one: the instant of
/// what the node last took from its inputs, or now for a source.
struct FrameStamp: Sendable {
    let carrier: AgeCarrier
    let clock: MediaClock

    @inline(__always)
    func apply(_ frame: inout Frame) {
        switch frame.payload {
        case .audio, .encoded: frame.created = carrier.last ?? clock.now()
        default: break
        }
    }
}

/// A direct link to a fused downstream ``FrameProcessor``: frames are handed over by a call,
/// in the producer's task, with no queue (used for linear chains the runtime fuses).
final class FusedLink: Sendable {
    let label: String
    let node: String
    let processor: any FrameProcessor
    let context: NodeContext
    let onFinish: @Sendable () async throws -> Void
    let clock: MediaClock?
    private let sent = Atomic<UInt64>(0)
    private let age = LockedValue(AgeHistogram())
    /// The audio level of frames delivered, measured only while a live view watches.
    let level = EdgeLevel()

    init(label: String, node: String, processor: any FrameProcessor, context: NodeContext, clock: MediaClock?,
         onFinish: @escaping @Sendable () async throws -> Void) {
        self.label = label
        self.node = node
        self.processor = processor
        self.context = context
        self.clock = clock
        self.onFinish = onFinish
    }

    var stats: EdgeStats {
        EdgeStats(label: label + " (fused)", sent: sent.load(ordering: .relaxed), dropped: 0, maxDepth: 0, capacity: 0, overflow: .block,
                  age: age.withLock { $0.summary })
    }

    var ageHistogram: AgeHistogram { age.withLock { $0 } }

    func deliver(_ frame: Frame) async throws {
        sent.add(1, ordering: .relaxed)
        level.note(frame)
        if let created = frame.created, let clock {
            let nanos = (clock.now() - created).nanoseconds
            age.withLock { $0.record(nanos: nanos) }
            context.carrier.take(frame)
            if let lateness = context.lateness { await lateness.check(frame) }
        }
        do {
            try await processor.process(frame, context: context)
        } catch let e as FusedFailure {
            throw e
        } catch {
            throw FusedFailure(node: node, error: error)
        }
    }

    func finish() async throws {
        do {
            try await processor.finish(context: context)
            try await onFinish()
        } catch let e as FusedFailure {
            throw e
        } catch {
            throw FusedFailure(node: node, error: error)
        }
    }
}

/// An error thrown by a fused node, carried up through its producer's task with the right node id.
struct FusedFailure: Error {
    let node: String
    let error: any Error
}
