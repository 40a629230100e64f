import PipelineCore

/// Nodes that answer text with text (a chat model, a web hook).
enum ResponderNodes {
    static var all: [NodeDescriptor] { [ChatNode.descriptor, WebhookNode.descriptor, BargeInNode.descriptor] }
}
