import PipelineCore

/// Network nodes: rtp-send, rtp-receive, jitter-buffer, http-upload.
enum NetworkNodes {
    static var all: [NodeDescriptor] { [RTPSendNode.descriptor, RTPReceiveNode.descriptor, JitterBufferNode.descriptor, HTTPUploadNode.descriptor] }
}
