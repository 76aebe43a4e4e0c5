"""Device memory: allocation under the client's quota, freeing, memset.

Every address a client names is checked against what it owns before anything
is queued (state.check_device_range); a bad one fails with
CUDA_ERROR_INVALID_VALUE and touches nothing.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.scheduler.ops import EventRecord, Memset
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import when_idle


@handler("MemAlloc")
def mem_alloc(session, fields, tail, tag):
    nbytes = fields["bytes"]
    if nbytes == 0:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    session.allocations.reserve(nbytes)
    try:
        ptr = session.backend.mem_alloc(nbytes)
    except DeviceError as e:
        if e.code != CUDA_ERROR_OUT_OF_MEMORY:
            raise
        raise session.allocations.device_full(nbytes, *session.backend.mem_info()) from None
    session.allocations.add(ptr, nbytes)
    session.reply("MemAllocReply", tag, dptr=ptr)


def _take_allocation(session, ptr: int) -> int:
    """Forget the allocation at ptr (so no later request may name it); its size."""
    found = session.allocations.find(ptr)
    if found is None or found[0] != ptr:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                          f"0x{ptr:x} is not the start of an allocation of this client")
    return session.allocations.remove(ptr)


@handler("MemFree")
def mem_free(session, fields, tail, tag):
    state = driver_state(session)
    ptr = fields["dptr"]
    _take_allocation(session, ptr)
    when_idle(state, tag, lambda: session.free_allocation(ptr))


@handler("MemFreeAsync")
def mem_free_async(session, fields, tail, tag):
    state = driver_state(session)
    ptr = fields["dptr"]
    size = _take_allocation(session, ptr)
    reached = state.executor.event_create(state.client_id, timing=False)
    try:
        state.streams.submit(fields["stream"], EventRecord(reached))
    except DeviceError:
        state.executor.event_destroy(reached)
        session.allocations.add(ptr, size)    # not freed: the job still owns it
        raise

    def free_when_reached() -> None:
        try:
            state.executor.event_synchronize(reached)
        finally:
            state.executor.event_destroy(reached)
        session.free_allocation(ptr)

    state.blocking.run(0, free_when_reached)
    if tag:
        session.reply("Done", tag)


@handler("MemGetInfo")
def mem_get_info(session, fields, tail, tag):
    free, total = session.backend.mem_info()
    quota = session.allocations.quota_bytes
    if quota is not None:
        total = min(total, quota)
        free = min(free, max(quota - session.allocations.used_bytes, 0))
    session.reply("MemInfoReply", tag, free=free, total=total)


@handler("Memset")
def memset(session, fields, tail, tag):
    state = driver_state(session)
    dst, elem, width, height, pitch = (fields[k] for k in ("dst", "element_size", "width", "height", "pitch"))
    value = fields["value"]
    if elem not in (1, 2, 4):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size must be 1, 2 or 4, not {elem}")
    if value >= 1 << (8 * elem):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset value {value:#x} does not fit {elem} byte(s)")
    row_bytes = width * elem
    if height > 1 and pitch < row_bytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"pitch {pitch} is smaller than a row ({row_bytes} bytes)")
    if width and height:
        state.check_device_range(dst, (height - 1) * pitch + row_bytes, "memset destination")
        if height == 1 or pitch == row_bytes:
            state.streams.submit(fields["stream"], Memset(dst, value, elem, width * height))
        else:
            for row in range(height):
                state.streams.submit(fields["stream"], Memset(dst + row * pitch, value, elem, width))
    if tag:
        session.reply("Done", tag)
