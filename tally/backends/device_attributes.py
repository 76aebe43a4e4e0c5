"""Device attributes for devices that are not a real GPU (null, emulator, sim).

Values follow an H100-class device where a job could rely on them (limits it
checks before launching, warp size, unified addressing); features the
emulated devices do not provide (legacy IPC attributes) read 0 so a job takes
its fallback path instead of failing later; so do the features tally refuses on
every backend, a real GPU included (REFUSED_FEATURES: GPUDirect RDMA, DMA-BUF,
NVLink multicast, fabric and Windows handles).
Provided, and so 1: cooperative launches, also the multi-device form on the one
device (the emulator keeps a cooperative grid's blocks resident together and gives
it cooperative groups' grid barrier), thread-block clusters from compute capability
9.0 on (the emulator runs them, null and sim accept them), stream-ordered allocation and
memory pools (tally's client implements them over ordinary allocations), stream
memory operations (wait and write value), virtual memory management, managed memory, which is
coherent at every moment (concurrent access from the CPU and kernels is safe), and
kernels reading pinned host memory at its host address.
Ids are CUdevice_attribute values from cuda.h (CUDA 13.0).
"""
from __future__ import annotations

from dataclasses import dataclass

# Shared memory the device keeps per block for itself (cooperative groups' multi-warp
# tile barriers live there; the emulator gives it to kernels that read its registers).
RESERVED_SHARED_MEMORY_PER_BLOCK = 1024

# name -> CUdevice_attribute id (cuda.h)
ATTRIBUTE_IDS = {
    "MAX_THREADS_PER_BLOCK": 1, "MAX_BLOCK_DIM_X": 2, "MAX_BLOCK_DIM_Y": 3, "MAX_BLOCK_DIM_Z": 4,
    "MAX_GRID_DIM_X": 5, "MAX_GRID_DIM_Y": 6, "MAX_GRID_DIM_Z": 7, "MAX_SHARED_MEMORY_PER_BLOCK": 8,
    "TOTAL_CONSTANT_MEMORY": 9, "WARP_SIZE": 10, "MAX_PITCH": 11, "MAX_REGISTERS_PER_BLOCK": 12,
    "CLOCK_RATE": 13, "TEXTURE_ALIGNMENT": 14, "GPU_OVERLAP": 15, "MULTIPROCESSOR_COUNT": 16,
    "KERNEL_EXEC_TIMEOUT": 17, "INTEGRATED": 18, "CAN_MAP_HOST_MEMORY": 19, "COMPUTE_MODE": 20,
    "SURFACE_ALIGNMENT": 30, "CONCURRENT_KERNELS": 31, "ECC_ENABLED": 32, "PCI_BUS_ID": 33,
    "PCI_DEVICE_ID": 34, "TCC_DRIVER": 35, "MEMORY_CLOCK_RATE": 36, "GLOBAL_MEMORY_BUS_WIDTH": 37,
    "L2_CACHE_SIZE": 38, "MAX_THREADS_PER_MULTIPROCESSOR": 39, "ASYNC_ENGINE_COUNT": 40,
    "UNIFIED_ADDRESSING": 41, "PCI_DOMAIN_ID": 50, "TEXTURE_PITCH_ALIGNMENT": 51,
    "COMPUTE_CAPABILITY_MAJOR": 75, "COMPUTE_CAPABILITY_MINOR": 76, "STREAM_PRIORITIES_SUPPORTED": 78,
    "GLOBAL_L1_CACHE_SUPPORTED": 79, "LOCAL_L1_CACHE_SUPPORTED": 80,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 81, "MAX_REGISTERS_PER_MULTIPROCESSOR": 82,
    "MANAGED_MEMORY": 83, "MULTI_GPU_BOARD": 84, "HOST_NATIVE_ATOMIC_SUPPORTED": 86,
    "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO": 87, "PAGEABLE_MEMORY_ACCESS": 88,
    "CONCURRENT_MANAGED_ACCESS": 89, "COMPUTE_PREEMPTION_SUPPORTED": 90,
    "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 91, "CAN_USE_STREAM_MEM_OPS_V1": 92,
    "CAN_USE_64_BIT_STREAM_MEM_OPS_V1": 93, "CAN_USE_STREAM_WAIT_VALUE_NOR_V1": 94, "COOPERATIVE_LAUNCH": 95,
    "COOPERATIVE_MULTI_DEVICE_LAUNCH": 96, "CAN_FLUSH_REMOTE_WRITES": 98,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 97, "HOST_REGISTER_SUPPORTED": 99,
    "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 102, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 103,
    "MAX_BLOCKS_PER_MULTIPROCESSOR": 106,
    "MAX_PERSISTING_L2_CACHE_SIZE": 108, "MAX_ACCESS_POLICY_WINDOW_SIZE": 109,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 111, "MEMORY_POOLS_SUPPORTED": 115,
    "MEMPOOL_SUPPORTED_HANDLE_TYPES": 119, "CLUSTER_LAUNCH": 120,
    "CAN_USE_64_BIT_STREAM_MEM_OPS": 122, "CAN_USE_STREAM_WAIT_VALUE_NOR": 123,
    "MPS_ENABLED": 133, "HOST_NUMA_ID": 134, "HOST_NUMA_MEMORY_POOLS_SUPPORTED": 142,
    "HOST_MEMORY_POOLS_SUPPORTED": 144,
    "HANDLE_TYPE_WIN32_HANDLE_SUPPORTED": 104, "HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED": 105,
    "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED": 110, "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED": 114,
    "GPU_DIRECT_RDMA_SUPPORTED": 116, "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS": 117, "DMA_BUF_SUPPORTED": 124,
    "HANDLE_TYPE_FABRIC_SUPPORTED": 128, "MULTICAST_SUPPORTED": 132, "HOST_ALLOC_DMA_BUF_SUPPORTED": 146,
    **{f"MAXIMUM_{name}": number for number, name in enumerate((
        "TEXTURE1D_WIDTH", "TEXTURE2D_WIDTH", "TEXTURE2D_HEIGHT", "TEXTURE3D_WIDTH", "TEXTURE3D_HEIGHT",
        "TEXTURE3D_DEPTH", "TEXTURE2D_LAYERED_WIDTH", "TEXTURE2D_LAYERED_HEIGHT", "TEXTURE2D_LAYERED_LAYERS"),
        start=21)},
    **{f"MAXIMUM_{name}": number for number, name in enumerate((
        "TEXTURE1D_LAYERED_WIDTH", "TEXTURE1D_LAYERED_LAYERS", None, "TEXTURE2D_GATHER_WIDTH",
        "TEXTURE2D_GATHER_HEIGHT", "TEXTURE3D_WIDTH_ALTERNATE", "TEXTURE3D_HEIGHT_ALTERNATE",
        "TEXTURE3D_DEPTH_ALTERNATE"), start=42) if name},
    **{f"MAXIMUM_{name}": number for number, name in enumerate((
        "TEXTURECUBEMAP_WIDTH", "TEXTURECUBEMAP_LAYERED_WIDTH", "TEXTURECUBEMAP_LAYERED_LAYERS", "SURFACE1D_WIDTH",
        "SURFACE2D_WIDTH", "SURFACE2D_HEIGHT", "SURFACE3D_WIDTH", "SURFACE3D_HEIGHT", "SURFACE3D_DEPTH",
        "SURFACE1D_LAYERED_WIDTH", "SURFACE1D_LAYERED_LAYERS", "SURFACE2D_LAYERED_WIDTH",
        "SURFACE2D_LAYERED_HEIGHT", "SURFACE2D_LAYERED_LAYERS", "SURFACECUBEMAP_WIDTH",
        "SURFACECUBEMAP_LAYERED_WIDTH", "SURFACECUBEMAP_LAYERED_LAYERS", "TEXTURE1D_LINEAR_WIDTH",
        "TEXTURE2D_LINEAR_WIDTH", "TEXTURE2D_LINEAR_HEIGHT", "TEXTURE2D_LINEAR_PITCH"), start=52)},
}

# Texture and surface sizes: the programming guide's limits for compute capability 8.x
# and 9.0 (texture and surface objects work on every backend: tally/backends/texture_objects.py).
TEXTURE_LIMITS = {
    "TEXTURE1D_WIDTH": 131072, "TEXTURE2D_WIDTH": 131072, "TEXTURE2D_HEIGHT": 65536,
    "TEXTURE3D_WIDTH": 16384, "TEXTURE3D_HEIGHT": 16384, "TEXTURE3D_DEPTH": 16384,
    "TEXTURE2D_LAYERED_WIDTH": 32768, "TEXTURE2D_LAYERED_HEIGHT": 32768, "TEXTURE2D_LAYERED_LAYERS": 2048,
    "TEXTURE1D_LAYERED_WIDTH": 32768, "TEXTURE1D_LAYERED_LAYERS": 2048,
    "TEXTURE2D_GATHER_WIDTH": 32768, "TEXTURE2D_GATHER_HEIGHT": 32768,
    "TEXTURE3D_WIDTH_ALTERNATE": 8192, "TEXTURE3D_HEIGHT_ALTERNATE": 8192, "TEXTURE3D_DEPTH_ALTERNATE": 32768,
    "TEXTURECUBEMAP_WIDTH": 32768, "TEXTURECUBEMAP_LAYERED_WIDTH": 32768, "TEXTURECUBEMAP_LAYERED_LAYERS": 2046,
    "SURFACE1D_WIDTH": 32768, "SURFACE2D_WIDTH": 131072, "SURFACE2D_HEIGHT": 65536,
    "SURFACE3D_WIDTH": 16384, "SURFACE3D_HEIGHT": 16384, "SURFACE3D_DEPTH": 16384,
    "SURFACE1D_LAYERED_WIDTH": 32768, "SURFACE1D_LAYERED_LAYERS": 2048,
    "SURFACE2D_LAYERED_WIDTH": 32768, "SURFACE2D_LAYERED_HEIGHT": 32768, "SURFACE2D_LAYERED_LAYERS": 2048,
    "SURFACECUBEMAP_WIDTH": 32768, "SURFACECUBEMAP_LAYERED_WIDTH": 32768, "SURFACECUBEMAP_LAYERED_LAYERS": 2046,
    "TEXTURE1D_LINEAR_WIDTH": 1 << 28, "TEXTURE2D_LINEAR_WIDTH": 131072, "TEXTURE2D_LINEAR_HEIGHT": 65000,
    "TEXTURE2D_LINEAR_PITCH": 2_097_120,
}

# Features tally does not give a job, whatever its GPU can do. A real device's answer
# is replaced on every backend so that a job takes its fallback path at once (NCCL
# stages network transfers through host memory without GPUDirect RDMA or DMA-BUF,
# and uses rings and trees instead of NVLink multicast) rather than failing at the
# refused call later (docs/unsupported-entry-points.md says why each is refused).
REFUSED_FEATURES = {
    "GPU_DIRECT_RDMA_SUPPORTED": 0, "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED": 0,
    "GPU_DIRECT_RDMA_FLUSH_WRITES_OPTIONS": 0, "DMA_BUF_SUPPORTED": 0, "HOST_ALLOC_DMA_BUF_SUPPORTED": 0,
    "HANDLE_TYPE_WIN32_HANDLE_SUPPORTED": 0, "HANDLE_TYPE_WIN32_KMT_HANDLE_SUPPORTED": 0,
    "HANDLE_TYPE_FABRIC_SUPPORTED": 0, "MULTICAST_SUPPORTED": 0, "TIMELINE_SEMAPHORE_INTEROP_SUPPORTED": 0,
}
# Of the shareable-handle types (CUmemAllocationHandleType bits), tally exports and
# imports POSIX file descriptors only.
SHAREABLE_HANDLE_TYPES = 0x1


def as_tally_provides(attributes: dict[int, int]) -> dict[int, int]:
    """A device's attributes as a job under tally sees them: refused features read 0."""
    out = dict(attributes)
    out.update({ATTRIBUTE_IDS[name]: value for name, value in REFUSED_FEATURES.items()})
    pool_types = ATTRIBUTE_IDS["MEMPOOL_SUPPORTED_HANDLE_TYPES"]
    out[pool_types] = out.get(pool_types, 0) & SHAREABLE_HANDLE_TYPES
    return out


def synthetic_attributes(compute_capability: tuple[int, int], sm_count: int,
                         pci_bus: int = 0, pci_device: int = 0) -> dict[int, int]:
    values = {
        "MAX_THREADS_PER_BLOCK": 1024, "MAX_BLOCK_DIM_X": 1024, "MAX_BLOCK_DIM_Y": 1024,
        "MAX_BLOCK_DIM_Z": 64, "MAX_GRID_DIM_X": 2**31 - 1, "MAX_GRID_DIM_Y": 65535,
        "MAX_GRID_DIM_Z": 65535, "MAX_SHARED_MEMORY_PER_BLOCK": 48 * 1024,
        "TOTAL_CONSTANT_MEMORY": 64 * 1024, "WARP_SIZE": 32, "MAX_PITCH": 2**31 - 1,
        "MAX_REGISTERS_PER_BLOCK": 65536, "CLOCK_RATE": 1_755_000, "TEXTURE_ALIGNMENT": 512,
        "GPU_OVERLAP": 1, "MULTIPROCESSOR_COUNT": sm_count, "KERNEL_EXEC_TIMEOUT": 0, "INTEGRATED": 0,
        "CAN_MAP_HOST_MEMORY": 1, "COMPUTE_MODE": 0, "SURFACE_ALIGNMENT": 512,
        "CONCURRENT_KERNELS": 1, "ECC_ENABLED": 0, "PCI_BUS_ID": pci_bus, "PCI_DEVICE_ID": pci_device,
        "TCC_DRIVER": 0, "MEMORY_CLOCK_RATE": 2_619_000, "GLOBAL_MEMORY_BUS_WIDTH": 5120,
        "L2_CACHE_SIZE": 50 * 1024 * 1024, "MAX_THREADS_PER_MULTIPROCESSOR": 2048,
        "ASYNC_ENGINE_COUNT": 2, "UNIFIED_ADDRESSING": 1, "PCI_DOMAIN_ID": 0,
        "TEXTURE_PITCH_ALIGNMENT": 32, "COMPUTE_CAPABILITY_MAJOR": compute_capability[0],
        "COMPUTE_CAPABILITY_MINOR": compute_capability[1], "STREAM_PRIORITIES_SUPPORTED": 1,
        "GLOBAL_L1_CACHE_SUPPORTED": 1, "LOCAL_L1_CACHE_SUPPORTED": 1,
        "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 228 * 1024, "MAX_REGISTERS_PER_MULTIPROCESSOR": 65536,
        "MANAGED_MEMORY": 1, "MULTI_GPU_BOARD": 0, "HOST_NATIVE_ATOMIC_SUPPORTED": 0,
        "SINGLE_TO_DOUBLE_PRECISION_PERF_RATIO": 2, "PAGEABLE_MEMORY_ACCESS": 0,
        "CONCURRENT_MANAGED_ACCESS": 1, "COMPUTE_PREEMPTION_SUPPORTED": 1,
        "CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM": 1, "COOPERATIVE_LAUNCH": 1,
        "COOPERATIVE_MULTI_DEVICE_LAUNCH": 1,
        "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 227 * 1024, "HOST_REGISTER_SUPPORTED": 1,
        "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": 1, "MAX_BLOCKS_PER_MULTIPROCESSOR": 32,
        # A stream's access-policy window may span what a GPU's may (A100 and H100 report
        # 128 MiB - 4 KiB), and up to three quarters of the L2 may be set aside for persisting
        # accesses (A100: 30 of 40 MiB). There is no cache: windows and the set-aside are kept
        # and read back (cuStreamSetAttribute, cuCtxSetLimit), and change no result.
        "MAX_PERSISTING_L2_CACHE_SIZE": 50 * 1024 * 1024 * 3 // 4, "MAX_ACCESS_POLICY_WINDOW_SIZE": 134_213_632,
        "RESERVED_SHARED_MEMORY_PER_BLOCK": RESERVED_SHARED_MEMORY_PER_BLOCK, "MEMORY_POOLS_SUPPORTED": 1,
        "CLUSTER_LAUNCH": int(compute_capability >= (9, 0)),
        "MPS_ENABLED": 0,
        # Pinned host memory pools (location HOST or HOST_NUMA) and managed pools are the
        # client's (client_preload/src/memory/memory_pools.cpp); the host is one NUMA node, 0.
        "HOST_NUMA_ID": 0, "HOST_NUMA_MEMORY_POOLS_SUPPORTED": 1, "HOST_MEMORY_POOLS_SUPPORTED": 1,
        # Stream memory operations (wait/write value, batches): every backend runs them;
        # no remote-write flushing (that is GPUDirect RDMA's).
        "CAN_USE_STREAM_MEM_OPS_V1": 1, "CAN_USE_64_BIT_STREAM_MEM_OPS_V1": 1,
        "CAN_USE_STREAM_WAIT_VALUE_NOR_V1": 1, "CAN_USE_64_BIT_STREAM_MEM_OPS": 1,
        "CAN_USE_STREAM_WAIT_VALUE_NOR": 1, "CAN_FLUSH_REMOTE_WRITES": 0,
        # Pools and physical memory are shared between jobs by POSIX file descriptor
        # (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR).
        "MEMPOOL_SUPPORTED_HANDLE_TYPES": SHAREABLE_HANDLE_TYPES, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": 1,
        **REFUSED_FEATURES,
        **{f"MAXIMUM_{name}": value for name, value in TEXTURE_LIMITS.items()},
    }
    return {ATTRIBUTE_IDS[name]: value for name, value in values.items()}


@dataclass(frozen=True)
class LaunchLimits:
    """What a launch may ask of a device, read from its attributes: the one source
    for the client's checks (its device snapshot holds the same attributes), the
    emulator's Python launch and the C++ data plane's emulator issuer."""
    max_grid: tuple[int, int, int]
    max_block: tuple[int, int, int]
    max_threads: int                 # per block
    max_shared_bytes: int            # per block, static + dynamic, opted in


def launch_limits(attributes: dict[int, int]) -> LaunchLimits:
    def read(*names: str) -> tuple[int, ...]:
        return tuple(attributes[ATTRIBUTE_IDS[n]] for n in names)

    return LaunchLimits(max_grid=read("MAX_GRID_DIM_X", "MAX_GRID_DIM_Y", "MAX_GRID_DIM_Z"),
                        max_block=read("MAX_BLOCK_DIM_X", "MAX_BLOCK_DIM_Y", "MAX_BLOCK_DIM_Z"),
                        max_threads=read("MAX_THREADS_PER_BLOCK")[0],
                        max_shared_bytes=read("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")[0])
