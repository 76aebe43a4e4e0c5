"""Managed memory (cuMemAllocManaged / cudaMallocManaged).

The client puts the memory in a shared-memory object of its own (as it does for
pinned memory, so the name is /tally-pin-<client pid>-<n>), maps it at an address
of its choosing and asks for that address to become device memory. The backend
maps the object too and makes the same address name the same bytes on the device
(backends/base.py: managed_alloc). So the job's CPU code and its kernels share one
pointer with no copies and no page migration: the memory is coherent at every
moment, which CUDA promises only where concurrentManagedAccess is 1.

The allocation counts against the client's memory limits and freed like any other
(MemFree, or when the client goes). CUDA_ERROR_ALREADY_MAPPED tells the client
that the device addresses are taken: it maps a new object elsewhere and asks again.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import MemAllocManaged
from tally.server.client.managed_objects import OwnedDescriptor
from tally.server.dispatch import name_in_tail
from tally.server.handlers.memory_wait import allocate_or_wait
from tally.server.job import Job

CU_MEM_ATTACH_GLOBAL = 0x1
CU_MEM_ATTACH_HOST = 0x2


def mem_alloc_managed(job: Job, msg: MemAllocManaged, tag: int):
    client = job.client
    address, nbytes, flags = msg.dptr, msg.bytes, msg.flags
    if nbytes == 0:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    if flags not in (CU_MEM_ATTACH_GLOBAL, CU_MEM_ATTACH_HOST):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"managed memory flags must be CU_MEM_ATTACH_GLOBAL or "
                                                    f"CU_MEM_ATTACH_HOST, not {flags:#x}")
    # Opened once (its name goes then), kept while the allocation lives: a migration hands it on.
    obj = OwnedDescriptor(client.regions.open_object(name_in_tail(msg.tail), nbytes))

    def attempt() -> None:
        with client.allocations.charging(nbytes):
            job.backend.managed_alloc(address, nbytes, obj.fd)
            client.allocations.add(address, nbytes)
        client.managed.add(address, obj.take())    # its bytes live in the job's shared memory: never suspended

    return allocate_or_wait(job, tag, nbytes, attempt)


HANDLERS = {MemAllocManaged: mem_alloc_managed}
