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
    IpcHandleReply,
    MemAccessReply,
    MemAddressFree,
    MemAddressReply,
    MemAddressReserve,
    MemCreate,
    MemCreateReply,
    MemExportHandle,
    MemGetAccess,
    MemImportHandle,
    MemMap,
    MemRelease,
    MemRetainHandle,
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


# Shareable handles: physical memory shared with other jobs of this server
# (tally/server/physical_shares.py; the client carries the export in a file descriptor).
def mem_export_handle(job: Job, msg: MemExportHandle, tag: int) -> IpcHandleReply:
    export_id, secret = job.client.vmm.export(msg.handle)
    return IpcHandleReply(export_id=export_id, secret=secret)


def mem_import_handle(job: Job, msg: MemImportHandle, tag: int) -> MemCreateReply:
    return MemCreateReply(job.client.vmm.adopt(msg.export_id, msg.secret))


def mem_retain_handle(job: Job, msg: MemRetainHandle, tag: int) -> MemCreateReply:
    return MemCreateReply(job.client.vmm.retain(msg.dptr))


def mem_get_access(job: Job, msg: MemGetAccess, tag: int) -> MemAccessReply:
    return MemAccessReply(access=int(job.client.vmm.accessible(msg.dptr)))


HANDLERS = {
    MemAddressReserve: mem_address_reserve,
    MemAddressFree: mem_address_free,
    MemCreate: mem_create,
    MemRelease: mem_release,
    MemMap: mem_map,
    MemUnmap: mem_unmap,
    MemSetAccess: mem_set_access,
    MemExportHandle: mem_export_handle,
    MemImportHandle: mem_import_handle,
    MemRetainHandle: mem_retain_handle,
    MemGetAccess: mem_get_access,
}
