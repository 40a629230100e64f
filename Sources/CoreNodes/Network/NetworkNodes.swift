import PipelineCore

/// Network nodes without a network library underneath: rtp-send, rtp-receive, jitter-buffer.
enum NetworkNodes {
    static var all: [NodeDescriptor] { [RTPSendNode.descriptor, RTPReceiveNode.descriptor, JitterBufferNode.descriptor] }
}
