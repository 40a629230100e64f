import PipelineCore

/// Voice DSP nodes: resample, volume, vad, slicer.
enum DSPNodes {
    static var all: [NodeDescriptor] { [ResampleNode.descriptor, VolumeNode.descriptor, VADNode.descriptor, SlicerNode.descriptor, AECNode.descriptor] }
}
