import PipelineCore

/// Codec nodes: opus-encode, opus-decode, aac-encode, aac-decode, base64-encode.
enum CodecNodes {
    static var all: [NodeDescriptor] { [OpusEncodeNode.descriptor, OpusDecodeNode.descriptor, AACEncodeNode.descriptor, AACDecodeNode.descriptor, Base64EncodeNode.descriptor] }
}
