import PipelineCore

/// Built-in sources that read files, generate signals or take audio from the app.
enum SourceNodes {
    static var all: [NodeDescriptor] { [FileSourceNode.descriptor, ToneSourceNode.descriptor, AppSourceNode.descriptor] }
}
