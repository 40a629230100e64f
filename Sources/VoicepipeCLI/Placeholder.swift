import PipelineCore
import Nodes
