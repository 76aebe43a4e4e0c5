"""A cluster launch on the real driver: the CUlaunchConfig of cuLaunchKernelEx with
CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION, for tally/backends/cuda.py. The driver checks
the shape (against the kernel's compile-time cluster, the device's limits, the grid)
and answers with its own codes."""
from __future__ import annotations

from cuda.bindings import driver as cu

PORTABLE_CLUSTER_BLOCKS = 8


def cluster_launch_config(grid, block, shared_bytes: int, stream, cluster) -> cu.CUlaunchConfig:
    config = cu.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_bytes
    config.hStream = stream
    attr = cu.CUlaunchAttribute()
    attr.id = cu.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
    config.attrs = [attr]
    config.numAttrs = 1
    return config


def allow_cluster(function, cluster) -> cu.CUresult:
    """The job's client allowed clusters beyond the portable 8 blocks for this kernel
    (cuFuncSetAttribute stays in the client): the driver must be told too."""
    if cluster[0] * cluster[1] * cluster[2] <= PORTABLE_CLUSTER_BLOCKS:
        return cu.CUresult.CUDA_SUCCESS
    (rc,) = cu.cuFuncSetAttribute(
        function, cu.CUfunction_attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    return rc
