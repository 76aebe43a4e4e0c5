"""Thread-block clusters, as every backend checks them: a kernel's compile-time
cluster shape (.reqnctapercluster, .explicitcluster in its PTX; nvcc writes them for
__cluster_dims__) and the shape a launch asks for (CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION),
checked the way Hopper's driver checks them. A launch without either has no cluster
(the device runs it as one-block clusters)."""
from __future__ import annotations

from dataclasses import dataclass

from tally.backends.base import Dim3
from tally.protocol.errors import CUDA_ERROR_INVALID_CLUSTER_SIZE, CUDA_ERROR_INVALID_VALUE, DeviceError

# Blocks per cluster on H100/H200: 8 for any kernel, 16 for a kernel that set
# CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED.
PORTABLE_CLUSTER_BLOCKS = 8
NON_PORTABLE_CLUSTER_BLOCKS = 16


@dataclass(frozen=True)
class KernelCluster:
    """What a kernel's PTX says about clusters."""

    dims: Dim3 | None = None     # .reqnctapercluster: every launch uses this shape
    explicit: bool = False       # .explicitcluster: launches must have a cluster shape

    @classmethod
    def of(cls, fn) -> KernelCluster:
        """From a ptx_passes ir.Function's directives."""
        d = fn.directive("reqnctapercluster")
        dims = None
        if d is not None:
            values = [int(a) for a in d.args] + [1, 1]
            dims = (values[0], values[1], values[2])
        return cls(dims, dims is not None or fn.directive("explicitcluster") is not None)


@dataclass(frozen=True)
class LaunchCluster:
    """The cluster shape a launch runs with, and whether it was asked for (what
    %is_explicit_cluster reads)."""

    dims: Dim3
    explicit: bool = True

    @property
    def blocks(self) -> int:
        return self.dims[0] * self.dims[1] * self.dims[2]


def launch_cluster(name: str, grid: Dim3, requested: Dim3 | None, kernel: KernelCluster,
                   limit: int = NON_PORTABLE_CLUSTER_BLOCKS) -> LaunchCluster | None:
    """The cluster a launch of kernel `name` runs with (None: none), or DeviceError with
    the driver's code and the reason. Backends check against the device's most
    (`limit`); the portable most (8 unless the kernel allowed non-portable sizes) is
    the client's check, where cuFuncSetAttribute's values are (client_preload/src/launch/)."""
    if requested is not None and kernel.dims is not None and tuple(requested) != kernel.dims:
        raise DeviceError(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                          f"launch of {name} asks for cluster {_shape(requested)}, but the kernel was "
                          f"compiled for cluster {_shape(kernel.dims)} (.reqnctapercluster)")
    dims = tuple(requested) if requested is not None else kernel.dims
    if dims is None:
        if kernel.explicit:
            raise DeviceError(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                              f"kernel {name} must be launched with a cluster dimension (.explicitcluster)")
        return None
    if 0 in dims:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {name} with cluster {_shape(dims)}")
    cluster = LaunchCluster(dims)
    if cluster.blocks > limit:
        raise DeviceError(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                          f"launch of {name}: cluster {_shape(dims)} has {cluster.blocks} blocks, "
                          f"the device allows {limit}")
    if any(g % c for g, c in zip(grid, dims)):
        raise DeviceError(CUDA_ERROR_INVALID_CLUSTER_SIZE,
                          f"launch of {name}: grid {_shape(grid)} is not a multiple of cluster {_shape(dims)}")
    return cluster


def _shape(dims) -> str:
    return "x".join(str(d) for d in dims)
