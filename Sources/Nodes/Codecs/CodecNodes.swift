import PipelineCore

/// Codec nodes: opus-encode, opus-decode, base64-encode.
enum CodecNodes {
    static var all: [NodeDescriptor] { [OpusEncodeNode.descriptor, OpusDecodeNode.descriptor, Base64EncodeNode.descriptor] }
}
