"""Why each driver entry point tally does not implement answers NOT_SUPPORTED.

tools/gen_client_table.py gives every unimplemented entry the reason of the first
rule below that matches it; an entry no rule matches stops the generation, so the
list of refusals stays a decision, not an accident. The reason is in the job's
log line when it calls one, and in docs/unsupported-entry-points.md.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

# The first entry-point version with 64-bit device pointers (CUDA 3.2).
FIRST_64_BIT_VERSION = 3020


@dataclass(frozen=True)
class Rule:
    pattern: str        # a regular expression over the entry's name (cuGetProcAddress's)
    reason: str         # shown to the job and in the docs: a sentence, no final period

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, name) is not None




def superseded(version: int, implemented: int) -> str:
    older = " (the 32-bit API of CUDA 2.x)" if version < FIRST_64_BIT_VERSION else ""
    return (f"an older ABI of this function{older}: version {implemented}, which every toolkit since asks "
            f"cuGetProcAddress for, is implemented")

RULES = (
    Rule(r"cuTexRef\w*|cuSurfRef\w*|cuModuleGet(Tex|Surf)Ref|cuParamSet\w*|cuFuncSet(BlockShape|SharedSize)"
         r"|cuLaunch|cuLaunchGrid(Async)?",
         "a legacy API (texture and surface references, the pre-CUDA 4.0 launch API) that CUDA 12 deprecated "
         "and no framework calls"),
    Rule(r"cuCtxAttach|cuCtxDetach|cuDeviceGetProperties",
         "deprecated since CUDA 4/5; cuDevicePrimaryCtxRetain and cuDeviceGetAttribute replace it"),
    Rule(r"cuArray(GetSparseProperties|GetMemoryRequirements|GetPlane)\w*|cuMipmappedArray\w*|cuMemMapArrayAsync"
         r"|cuDeviceGetTexture1DLinearMaxWidth",
         "mipmapped, sparse and planar CUDA arrays: tally keeps a CUDA array as linear device memory (texture "
         "and surface objects read it there), with one level and every page present; the kernels of cuBLAS, "
         "cuDNN, NCCL, Triton and PyTorch use none (docs: driver census)"),
    Rule(r"cuGraphics\w*", "graphics interop (OpenGL, Vulkan, Direct3D resources): no display on a shared GPU server"),
    Rule(r"cuImportExternal(Memory|Semaphore)|cuDestroyExternal(Memory|Semaphore)|cuExternalMemory\w*"
         r"|cu(Signal|Wait)ExternalSemaphoresAsync|cuGraph(Exec)?(Add)?ExternalSemaphores\w*"
         r"|cuDeviceGetNvSciSyncAttributes",
         "memory and semaphores of other APIs (Vulkan, NvSci): memory outside tally's accounting "
         "cannot be shared, quota-charged or moved"),
    Rule(r"cuCheckpointProcess\w*",
         "CUDA's whole-process checkpoint: on a shared GPU tally suspends and migrates each job itself "
         "(tally-server suspend / migrate)"),
    Rule(r"cuMulticast\w*|cuCtx(Enable|Disable)PeerAccess|cuMemcpy3DPeer(Async)?"
         r"|cuDeviceGetP2PAtomicCapabilities",
         "several GPUs (peer access, NVLink multicast): one tally-server serves one GPU"),
    Rule(r"cuFlushGPUDirectRDMAWrites|cuMemGetHandleForAddressRange",
         "GPUDirect RDMA (a NIC reading and writing GPU memory through a DMA-BUF): it bypasses tally's "
         "accounting, and a job's memory may move (suspend, migration); every backend reports "
         "CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED and GPU_DIRECT_RDMA_SUPPORTED as 0, so NCCL stages "
         "network transfers through host memory"),
    Rule(r"cuDeviceGetLuid", "Windows (WDDM) only"),
    Rule(r"cuDevice(Register|Unregister)AsyncNotification",
         "driver-initiated notifications (budget changes): tally's own eviction and quota messages stand in"),
    Rule(r"cuProfilerInitialize", "removed from CUDA's profiler API (CUDA 12); cuProfilerStart/Stop are implemented"),
    Rule(r"cuMemBatchDecompressAsync", "not yet: the decompression engine (Blackwell), no emulation"),
    Rule(r"cuStream(WaitValue|WriteValue)(32|64)|cuStreamBatchMemOp|cuGraph(Exec)?(Add)?BatchMemOpNode\w*",
         "not yet: stream memory operations (planned with the Hopper driver surface)"),
    Rule(r"cuMemPool\w*", "not yet: explicit memory pools beyond the default one (planned with the Hopper driver "
         "surface)"),
    Rule(r"cuGraphKernelNode(Get|Set|Copy)Attributes?",
         "not yet: kernel-node attributes (planned with CUDA graphs as units)"),
    Rule(r"cuGraph\w*|cuStreamBeginCaptureToGraph|cuStreamUpdateCaptureDependencies",
         "not yet: this graph node form or update (planned with CUDA graphs as units)"),
    Rule(r"cuMem(Prefetch|Discard|DiscardAndPrefetch)BatchAsync",
         "not yet: batched prefetches and discards (CUDA 12.8+; batched copies are implemented)"),
    Rule(r"cuCtx(Record|Wait)Event", "not yet: context-wide events (CUDA 12.5+)"),
    Rule(r"cuLibrary(EnumerateKernels|GetKernelCount|GetManaged|GetUnifiedFunction)|cuModule(EnumerateFunctions"
         r"|GetFunctionCount)",
         "not yet: enumerating a module's or library's contents"),
    Rule(r"cuDeviceGetHostAtomicCapabilities", "not yet: host atomic capabilities (CUDA 13)"),
)


def reason_for(name: str, version: int, newest_implemented: int | None) -> str | None:
    """The reason an unimplemented entry (name, ABI version) is refused, or None when
    no rule decides; newest_implemented: the newest implemented version of the name."""
    if newest_implemented is not None and version < newest_implemented:
        return superseded(version, newest_implemented)
    for rule in RULES:
        if rule.matches(name):
            return rule.reason
    return None
