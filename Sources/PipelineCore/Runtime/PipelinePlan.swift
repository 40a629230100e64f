/// What a pipeline will be, decided from a validated graph and the fusion option alone, before any node
/// exists: its queues, the links fused into direct calls, and the order node contexts are built in.
/// Pure: the same graph and option always give the same plan; ``Pipeline/init(graph:options:)`` then
/// instantiates the nodes and builds what the plan says.
public struct PipelinePlan: Sendable, Equatable {
    /// One bounded queue: the input of a consumer, shared by every link into it (fan-in).
    public struct Queue: Sendable, Equatable {
        /// `node.port` of the consumer's input.
        public var input: String
        /// The link's label, or the producers joined with `+` when several links share the queue.
        public var label: String
        public var capacity: Int
        public var overflow: OverflowPolicy
        /// Links into the queue (it ends when all of them have ended).
        public var producers: Int
    }

    /// Queues, by consumer input, in `node.port` order. A fused link has none.
    public var queues: [Queue]
    /// Every consumer input in the order its first link is declared (the order edge statistics are listed in).
    public var inputOrder: [String]
    /// Links called directly in their producer's task instead of through a queue.
    public var fused: Set<ResolvedLink>
    /// Consumer inputs fed by a link that closes a loop (their consumer never waits for their end).
    public var loopInputs: Set<String>
    /// Node ids in the order their contexts are built. A fused link hands its frames to the consumer's
    /// processor with the consumer's context, so every consumer's context must exist before the context
    /// of a producer that calls into it: reverse topological order.
    public var contextOrder: [String]

    /// The nodes fused into a producer's task (they get no task of their own).
    public var fusedNodes: Set<String> { Set(fused.map(\.toNode)) }

    /// Plans `graph`. With `fusion`, a link is fused when it joins two node types that declare themselves
    /// fusable (``NodeDescriptor/fusable``: frame processors), the producer is not a source, neither end
    /// restarts, both run on the same executor, the link is lossless (`block`), it is the consumer's
    /// only link into its default input and the producer's port feeds nothing else.
    public init(_ graph: ValidatedGraph, fusion: Bool) {
        let nodeByID = Dictionary(graph.nodes.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
        var linksInto: [String: Int] = [:], linksFromPort: [String: Int] = [:]
        var loopInputs: Set<String> = []
        for l in graph.links {
            linksInto[l.toNode, default: 0] += 1
            linksFromPort["\(l.fromNode).\(l.fromPort)", default: 0] += 1
            if l.closesLoop { loopInputs.insert("\(l.toNode).\(l.toPort)") }
        }
        var fused: Set<ResolvedLink> = []
        if fusion {
            for l in graph.links {
                guard let down = nodeByID[l.toNode], let up = nodeByID[l.fromNode],
                      down.descriptor.fusable, up.descriptor.fusable,
                      !up.descriptor.isSource, down.restart == nil, up.restart == nil, l.overflow == .block,
                      up.executor == down.executor,
                      l.toPort == down.descriptor.defaultInput?.name,
                      linksInto[l.toNode] == 1,
                      linksFromPort["\(l.fromNode).\(l.fromPort)"] == 1
                else { continue }
                fused.insert(l)
            }
        }
        let fusedInputs = Set(fused.map { "\($0.toNode).\($0.toPort)" })
        let byInput = Dictionary(grouping: graph.links, by: { "\($0.toNode).\($0.toPort)" })
        queues = byInput.keys.sorted().filter { !fusedInputs.contains($0) }.map { key in
            let links = byInput[key]!
            let label = links.count == 1 ? links[0].label : links.map { "\($0.fromNode).\($0.fromPort)" }.joined(separator: "+") + " -> \(key)"
            return Queue(input: key, label: label, capacity: links.map(\.capacity).max()!, overflow: links[0].overflow, producers: links.count)
        }
        var seen: Set<String> = []
        inputOrder = graph.links.map { "\($0.toNode).\($0.toPort)" }.filter { seen.insert($0).inserted }
        self.fused = fused
        self.loopInputs = loopInputs
        contextOrder = graph.nodes.reversed().map(\.id)
    }
}
