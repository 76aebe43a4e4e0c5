"""Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), which PyTorch's
`expandable_segments` allocator uses. What a client owns is
tally.server.client.virtual_memory.VirtualMemory (job.client.vmm).

Unmapping and freeing a reservation wait for the client's queued work, as
freeing memory does; everything left is unmapped and released when the client
goes.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import (
    MemAddressFree,
    MemAddressReply,
    MemAddressReserve,
    MemCreate,
    MemCreateReply,
    MemMap,
    MemRelease,
    MemSetAccess,
    MemUnmap,
)
from tally.server.client.sync import when_idle
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.handlers.memory_wait import allocate_or_wait
from tally.server.job import Job


def mem_address_reserve(job: Job, msg: MemAddressReserve, tag: int) -> MemAddressReply:
    return MemAddressReply(job.client.vmm.reserve(msg.bytes, msg.alignment, msg.addr))


def mem_address_free(job: Job, msg: MemAddressFree, tag: int):
    vmm = job.client.vmm
    ptr, nbytes = msg.dptr, msg.bytes
    if vmm.reservations.get(ptr) != nbytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x}+{nbytes} is not an address range this client reserved")
    when_idle(job.client, tag, lambda: vmm.free(ptr, nbytes))
    return ANSWERS_ITSELF


def mem_create(job: Job, msg: MemCreate, tag: int):
    vmm, nbytes = job.client.vmm, msg.bytes
    return allocate_or_wait(job, tag, nbytes, lambda: MemCreateReply(vmm.create(nbytes)))


def mem_release(job: Job, msg: MemRelease, tag: int) -> None:
    job.client.vmm.release(msg.handle)


def mem_map(job: Job, msg: MemMap, tag: int) -> None:
    job.client.vmm.map(msg.dptr, msg.bytes, msg.offset, msg.handle)


def mem_unmap(job: Job, msg: MemUnmap, tag: int):
    vmm = job.client.vmm
    ptr, nbytes = msg.dptr, msg.bytes
    vmm.whole_mappings(ptr, nbytes)   # refused now if it names anything else
    when_idle(job.client, tag, lambda: vmm.unmap(ptr, nbytes))
    return ANSWERS_ITSELF


def mem_set_access(job: Job, msg: MemSetAccess, tag: int) -> None:
    job.client.vmm.set_access(msg.dptr, msg.bytes, bool(msg.access))


HANDLERS = {
    MemAddressReserve: mem_address_reserve,
    MemAddressFree: mem_address_free,
    MemCreate: mem_create,
    MemRelease: mem_release,
    MemMap: mem_map,
    MemUnmap: mem_unmap,
    MemSetAccess: mem_set_access,
}
