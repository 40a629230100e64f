import DigitalHuman
import PipelineCore

/// The avatar node.
enum AvatarNodes {
    static var all: [NodeDescriptor] { [AvatarNode.descriptor] }
}
