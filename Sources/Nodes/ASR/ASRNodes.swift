import PipelineCore

/// The asr node and its engines.
enum ASRNodes {
    static var all: [NodeDescriptor] { [ASRNode.descriptor] }
}
