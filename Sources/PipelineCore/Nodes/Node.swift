/// A processing element of a pipeline.
///
/// A node is usually an `actor` (it owns its state); stateless or single-task nodes may be final
/// classes. The runtime calls ``run(_:)`` once, as a child task of the pipeline, with a context
/// that holds the node's ports. Contract:
/// - read inputs until they end (`nil` / end of the `for await` loop), then return;
///   the runtime closes the outputs for you;
/// - sources (no inputs) produce until their material ends or the task is cancelled (shutdown);
///   cancellation is a normal end for a source: stop producing and return (or throw `CancellationError`);
/// - blocking C calls run on threads of their own (see ``BlockingWorker``), never inline;
/// - a thrown error stops the pipeline with the node's id in the message, unless the node declares
///   `restart:` in the graph.
public protocol Node: AnyObject, Sendable {
    /// Runs the node until its inputs end (or, for sources, until its material ends or it is cancelled).
    func run(_ context: NodeContext) async throws
}

/// A node that handles one frame at a time from its default input.
///
/// The default ``Node/run(_:)`` reads the `in` port, calls ``process(_:context:)`` per frame and
/// ``finish(context:)`` at end of stream.
public protocol FrameProcessor: Node {
    /// Handles one input frame; send results with `context.send(_:)`.
    func process(_ frame: Frame, context: NodeContext) async throws
    /// Called once at end of stream, to flush what is buffered.
    func finish(context: NodeContext) async throws
}

extension FrameProcessor {
    public func finish(context: NodeContext) async throws {}

    public func run(_ context: NodeContext) async throws {
        let input = context.input()
        while let frame = await input.next() {
            // Cancelled (the drain after a stop has run out of time): stop here rather than work through
            // the frames still queued, which in a long chain slower than real time can take many seconds.
            try Task.checkCancellation()
            try await process(frame, context: context)
        }
        try await finish(context: context)
    }
}

/// An error a node throws: what went wrong, with a stable code.
public struct NodeError: Error, Sendable, CustomStringConvertible {
    /// Stable, machine-readable code (`file_not_found`, `device_busy`, `server_error`, ...).
    public var code: NodeErrorCode
    /// What happened and what to do, for a person.
    public var message: String

    /// Creates an error.
    public init(_ code: NodeErrorCode, _ message: String) {
        self.code = code
        self.message = message
    }

    public var description: String { message }
}
