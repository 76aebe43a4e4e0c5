"""CU_FUNC_ATTRIBUTE_* values of a resolved function, sent with its layout so the
client answers cuFuncGetAttribute/cuKernelGetAttribute without a round trip.

They come from the module's cubin for the device (registers, static shared
memory, stack, launch bounds), and from the device limits where the cubin says
nothing.
"""
from __future__ import annotations

import logging

from ptx_passes.cubin_info import CubinError, kernel_info
from tally.protocol.spec import FUNC_ATTRIBUTE_SLOTS
from tally.server.client.modules import LoadedFunction

log = logging.getLogger("tally.server")

MAX_THREADS_PER_BLOCK = 0
SHARED_SIZE_BYTES = 1
CONST_SIZE_BYTES = 2
LOCAL_SIZE_BYTES = 3
NUM_REGS = 4
PTX_VERSION = 5
BINARY_VERSION = 6
CACHE_MODE_CA = 7
MAX_DYNAMIC_SHARED_SIZE_BYTES = 8
PREFERRED_SHARED_MEMORY_CARVEOUT = 9

# CUdevice_attribute ids used as limits
_DEV_MAX_THREADS_PER_BLOCK = 1
_DEV_MAX_SHARED_PER_BLOCK = 8
_DEFAULT_MAX_THREADS = 1024
_DEFAULT_SHARED_PER_BLOCK = 48 << 10


def function_attributes(backend, fn: LoadedFunction) -> list[int]:
    values = [0] * FUNC_ATTRIBUTE_SLOTS
    device = backend.describe()
    arch = device.compute_capability[0] * 10 + device.compute_capability[1]
    attrs = device.attributes
    values[MAX_THREADS_PER_BLOCK] = attrs.get(_DEV_MAX_THREADS_PER_BLOCK, _DEFAULT_MAX_THREADS)
    values[PTX_VERSION] = values[BINARY_VERSION] = arch
    values[PREFERRED_SHARED_MEMORY_CARVEOUT] = -1
    static_shared = 0
    info = _cubin_info(fn, arch)
    if info is not None:
        values[NUM_REGS] = info.registers or 0
        values[LOCAL_SIZE_BYTES] = info.frame_size
        static_shared = values[SHARED_SIZE_BYTES] = info.static_shared
        for bound in (info.required_threads, info.max_threads):
            if bound is not None:
                values[MAX_THREADS_PER_BLOCK] = min(values[MAX_THREADS_PER_BLOCK], bound[0] * bound[1] * bound[2])
    # Without an opt-in, a launch may use the default per-block shared memory.
    per_block = attrs.get(_DEV_MAX_SHARED_PER_BLOCK, _DEFAULT_SHARED_PER_BLOCK)
    values[MAX_DYNAMIC_SHARED_SIZE_BYTES] = max(per_block - static_shared, 0)
    return values


def _cubin_info(fn: LoadedFunction, arch: int):
    module = fn.module
    if module.kernel_facts is None:
        cubins = module.source.cubins
        usable = [a for a in cubins if a <= arch] or list(cubins)
        module.kernel_facts = {}
        if usable:
            try:
                module.kernel_facts = kernel_info(cubins[max(usable)])
            except CubinError as e:
                log.debug("no kernel attributes from the module's cubin: %s", e)
    return module.kernel_facts.get(fn.name)
