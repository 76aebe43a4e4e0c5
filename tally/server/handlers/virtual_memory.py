"""Virtual memory management (cuMemAddressReserve, cuMemCreate, cuMemMap,
cuMemSetAccess, cuMemUnmap, cuMemRelease, cuMemAddressFree), which PyTorch's
`expandable_segments` allocator uses. What a client owns is
tally.server.client.virtual_memory.VirtualMemory (driver_state(session).vmm).

Unmapping and freeing a reservation wait for the client's queued work, as
freeing memory does; everything left is unmapped and released when the client
goes.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import when_idle


@handler("MemAddressReserve")
def mem_address_reserve(session, fields, tail, tag):
    ptr = driver_state(session).vmm.reserve(fields["bytes"], fields["alignment"])
    session.reply("MemAddressReply", tag, dptr=ptr)


@handler("MemAddressFree")
def mem_address_free(session, fields, tail, tag):
    vmm = driver_state(session).vmm
    ptr, nbytes = fields["dptr"], fields["bytes"]
    if vmm.reservations.get(ptr) != nbytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x}+{nbytes} is not an address range this client reserved")
    when_idle(driver_state(session), tag, lambda: vmm.free(ptr, nbytes))


@handler("MemCreate")
def mem_create(session, fields, tail, tag):
    session.reply("MemCreateReply", tag, handle=driver_state(session).vmm.create(fields["bytes"]))


@handler("MemRelease")
def mem_release(session, fields, tail, tag):
    driver_state(session).vmm.release(fields["handle"])
    if tag:
        session.reply("Done", tag)


@handler("MemMap")
def mem_map(session, fields, tail, tag):
    driver_state(session).vmm.map(fields["dptr"], fields["bytes"], fields["offset"], fields["handle"])
    if tag:
        session.reply("Done", tag)


@handler("MemUnmap")
def mem_unmap(session, fields, tail, tag):
    vmm = driver_state(session).vmm
    ptr, nbytes = fields["dptr"], fields["bytes"]
    vmm.whole_mappings(ptr, nbytes)   # refused now if it names anything else
    when_idle(driver_state(session), tag, lambda: vmm.unmap(ptr, nbytes))


@handler("MemSetAccess")
def mem_set_access(session, fields, tail, tag):
    driver_state(session).vmm.set_access(fields["dptr"], fields["bytes"], bool(fields["access"]))
    if tag:
        session.reply("Done", tag)
