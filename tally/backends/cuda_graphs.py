"""A job's graph as a real CUgraphExec: the server builds it from the job's kernel,
memset and device-to-device memcpy nodes with its own function handles (cuGraphCreate,
cuGraphAddMemsetNode, cuGraphAddMemcpyNode, cuGraphAddKernelNode with the
parameter buffer as `extra`, cuGraphInstantiate, which binds cuGraphInstantiateWithFlags)
and launches each replay with one cuGraphLaunch, so the driver's graph path (one
submission, no per-kernel launch on the host) is what the job gets.

A replay confined to an SM share smaller than the device runs its kernels one by
one, each on the share's green-context stream as any launch of the job: whether
the kernels of a graph launched into a green context's stream keep to its SMs is
not measured on a GPU yet, and a share that leaks would break a promise to the
high-priority job.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from cuda.bindings import driver as cu

from tally.backends.cuda_clusters import allow_cluster
from tally.backends.cuda_launch_params import LaunchExtra
from tally.backends.graph_launch import GraphCopy, GraphMemset, KernelGraph, StreamOrderedGraphs


@dataclass(eq=False)
class CudaGraph:
    exec: object                      # CUgraphExec
    graph: KernelGraph                # its kernels, for a replay that runs them one by one
    context_generation: int           # the context it was made in (a fault's recovery makes another)
    _keep: list = field(default_factory=list)


class CudaGraphs:
    """graph_create/graph_launch/graph_destroy of the cuda backend (its `_check`,
    `_current`, `_partitions`, `_context` and `launch` are CudaBackend's)."""

    def graph_create(self, graph: KernelGraph) -> CudaGraph:
        check = self._check
        self._current()
        handle = check(cu.cuGraphCreate(0))
        keep: list = []
        try:
            nodes = []
            for i, k in enumerate(graph.nodes):
                deps = [nodes[a] for a, b in graph.edges if b == i]
                if isinstance(k, GraphMemset):
                    nodes.append(check(cu.cuGraphAddMemsetNode(handle, deps, len(deps), _memset_params(k),
                                                               self._context.handle)))
                    continue
                if isinstance(k, GraphCopy):
                    nodes.append(check(cu.cuGraphAddMemcpyNode(handle, deps, len(deps), _copy_params(k),
                                                               self._context.handle)))
                    continue
                nodes.append(check(cu.cuGraphAddKernelNode(handle, deps, len(deps), _node_params(k, keep))))
                if k.cluster is not None:
                    check(allow_cluster(k.function.handle, k.cluster))
                    value = cu.CUkernelNodeAttrValue()
                    value.clusterDim.x, value.clusterDim.y, value.clusterDim.z = k.cluster
                    check(cu.cuGraphKernelNodeSetAttribute(
                        nodes[-1], cu.CUkernelNodeAttrID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, value))
            executable = check(cu.cuGraphInstantiate(handle, 0))
        finally:
            cu.cuGraphDestroy(handle)     # the executable keeps what it needs
        return CudaGraph(executable, graph, self._context.generation, keep)

    def graph_launch(self, graph: CudaGraph, stream, sm_cap: int | None = None) -> None:
        self._current()
        if (sm_cap is not None and self._partitions is not None
                and self._partitions.grant(sm_cap) < self.describe().sm_count):
            StreamOrderedGraphs.graph_launch(self, graph.graph, stream, sm_cap)
            return
        self._check(cu.cuGraphLaunch(graph.exec, stream))

    def graph_destroy(self, graph: CudaGraph) -> None:
        # An executable still running is freed by the driver once it completes.
        if self._lost or graph.context_generation != self._context.generation:
            return                        # made in a context that is gone
        self._current()
        cu.cuGraphExecDestroy(graph.exec)


def _memset_params(m: GraphMemset) -> "cu.CUDA_MEMSET_NODE_PARAMS":
    p = cu.CUDA_MEMSET_NODE_PARAMS()
    p.dst = m.dst
    p.pitch = 0
    p.value = m.value
    p.elementSize = m.element_size
    p.width = m.count
    p.height = 1
    return p


def _copy_params(c: GraphCopy) -> "cu.CUDA_MEMCPY3D":
    p = cu.CUDA_MEMCPY3D()
    p.srcMemoryType = p.dstMemoryType = cu.CUmemorytype.CU_MEMORYTYPE_DEVICE
    p.srcDevice, p.dstDevice = c.src, c.dst
    p.WidthInBytes, p.Height, p.Depth = c.nbytes, 1, 1
    return p


def _node_params(k, keep: list) -> "cu.CUDA_KERNEL_NODE_PARAMS":
    """The node's launch with its serialized parameters passed as `extra`; the
    driver copies them when the node is added (kept alive until then and after,
    with the graph, at no cost)."""
    extra = LaunchExtra(k.params)
    keep.append(extra)
    p = cu.CUDA_KERNEL_NODE_PARAMS()
    p.func = k.function.handle
    p.gridDimX, p.gridDimY, p.gridDimZ = k.grid
    p.blockDimX, p.blockDimY, p.blockDimZ = k.block
    p.sharedMemBytes = k.shared_bytes
    p.kernelParams = 0
    p.extra = extra.address
    return p
