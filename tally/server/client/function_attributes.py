"""CU_FUNC_ATTRIBUTE_* values of a resolved function, sent with its layout so the
client answers cuFuncGetAttribute/cuKernelGetAttribute without a round trip.

The device says them first: the backend's `function_attributes` (the driver's
cuFuncGetAttribute on a GPU; on the emulator, read from the kernel's PTX). What
it leaves out comes from the module's cubin for the device (registers, static
shared memory, stack, launch bounds: the null backend, which runs nothing, still
answers for cubins), and from the device limits where neither says anything.
"""
from __future__ import annotations

import logging

from ptx_passes.cubin_info import CubinError, kernel_info
from tally.backends.base import FuncAttribute
from tally.protocol.errors import DeviceError
from tally.protocol.spec import FUNC_ATTRIBUTE_SLOTS
from tally.server.client.modules import LoadedFunction

log = logging.getLogger("tally.server")

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
    values[FuncAttribute.MAX_THREADS_PER_BLOCK] = attrs.get(_DEV_MAX_THREADS_PER_BLOCK, _DEFAULT_MAX_THREADS)
    values[FuncAttribute.PTX_VERSION] = values[FuncAttribute.BINARY_VERSION] = arch
    values[FuncAttribute.PREFERRED_SHARED_MEMORY_CARVEOUT] = -1
    info = _cubin_info(fn, arch)
    if info is not None:
        values[FuncAttribute.NUM_REGS] = info.registers or 0
        values[FuncAttribute.LOCAL_SIZE_BYTES] = info.frame_size
        values[FuncAttribute.SHARED_SIZE_BYTES] = info.static_shared
        for bound in (info.required_threads, info.max_threads):
            if bound is not None:
                values[FuncAttribute.MAX_THREADS_PER_BLOCK] = min(values[FuncAttribute.MAX_THREADS_PER_BLOCK],
                                                                  bound[0] * bound[1] * bound[2])
    try:
        told = backend.function_attributes(fn.backend_function)
    except DeviceError as e:
        log.warning("kernel %s: the device gave no attributes (%s); answering from its cubin and the limits",
                    fn.name, e)
        told = {}
    for attribute, value in told.items():
        values[attribute] = value
    # Without an opt-in, a launch may use the default per-block shared memory.
    per_block = attrs.get(_DEV_MAX_SHARED_PER_BLOCK, _DEFAULT_SHARED_PER_BLOCK)
    if FuncAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES not in told:
        values[FuncAttribute.MAX_DYNAMIC_SHARED_SIZE_BYTES] = max(per_block - values[FuncAttribute.SHARED_SIZE_BYTES],
                                                                  0)
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
