"""Managed memory (cuMemAllocManaged / cudaMallocManaged).

The client puts the memory in a shared-memory object of its own (as it does for
pinned memory, so the name is /tally-pin-<client pid>-<n>), maps it at an address
of its choosing and asks for that address to become device memory. The backend
maps the object too and makes the same address name the same bytes on the device
(backends/base.py: managed_alloc). So the job's CPU code and its kernels share one
pointer with no copies and no page migration: the memory is coherent at every
moment, which CUDA promises only where concurrentManagedAccess is 1.

The allocation is charged to the client's quota and freed like any other
(MemFree, or when the client goes). CUDA_ERROR_ALREADY_MAPPED tells the client
that the device addresses are taken: it maps a new object elsewhere and asks again.
"""
from __future__ import annotations

import os

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.dispatch import handler
from tally.server.handlers.modules import _name
from tally.server.client.state import driver_state

CU_MEM_ATTACH_GLOBAL = 0x1
CU_MEM_ATTACH_HOST = 0x2


@handler("MemAllocManaged")
def mem_alloc_managed(session, fields, tail, tag):
    address, nbytes, flags = fields["dptr"], fields["bytes"], fields["flags"]
    if nbytes == 0:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    if flags not in (CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"managed memory flags must be CU_MEM_ATTACH_GLOBAL or "
                                                    f"CU_MEM_ATTACH_HOST, not {flags:#x}")
    session.allocations.reserve(nbytes)
    fd = driver_state(session).regions.open_object(_name(tail), nbytes)
    try:
        session.backend.managed_alloc(address, nbytes, fd)
    finally:
        os.close(fd)                     # the backend holds its own mapping
    session.allocations.add(address, nbytes)
    if tag:
        session.reply("Done", tag)
