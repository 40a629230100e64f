import PipelineCore

/// Speech synthesis nodes.
enum SpeechNodes {
    static var all: [NodeDescriptor] { [TTSNode.descriptor, TextSourceNode.descriptor] }
}
