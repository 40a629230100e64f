import PipelineCore

/// Built-in file and stream sinks.
enum SinkNodes {
    static var all: [NodeDescriptor] { [WAVSinkNode.descriptor, NullSinkNode.descriptor, JSONLSinkNode.descriptor, AppSinkNode.descriptor] }
}
