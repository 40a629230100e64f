import PipelineCore

/// A speech synthesizer behind the `tts` node; the node's `engine` parameter picks one
/// (``TTSNode/Configuration/makeSynthesizer(name:)``).
///
/// Contract, for every engine:
/// - ``start()`` is called once, before the first sentence: load the voice, open connections. A
///   throw stops the node (the pipeline exits with the message), so say what is missing and how
///   to get it.
/// - ``synthesize(_:deliver:)`` is called with one sentence at a time (trimmed, never empty), in
///   order, never concurrently. It passes the sentence's audio to `deliver` in order, in one or more
///   buffers of any length, in the engine's own format (the node converts to the graph's rate and
///   frames it). Delivering a buffer as soon as it is made lets the node play it while the rest is
///   made. A throw is reported as an `error` event and the node goes on with the next sentence.
/// - Blocking work (C libraries, file reads) runs off Swift's cooperative pool, on a
///   ``BlockingWorker``.
/// - ``stop()`` is called once at the end, also after a failed start.
public protocol SpeechSynthesizer: Sendable {
    /// Prepares the engine (loads the voice).
    func start() async throws
    /// Synthesizes one sentence, passing its audio to `deliver` in order.
    func synthesize(_ sentence: String, deliver: @Sendable (AudioBuffer) async throws -> Void) async throws
    /// Releases what ``start()`` took (threads, connections).
    func stop()
}
