"""Device memory: allocation under the client's limits (tally/cluster/memory_limits.py), freeing, memset.

Every address a client names is checked against what it owns before anything
is queued (client.check_device_range); a bad one fails with
CUDA_ERROR_INVALID_VALUE and touches nothing.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.protocol.messages_generated import (
    MemAlloc,
    MemAllocReply,
    MemFree,
    MemFreeAsync,
    MemGetInfo,
    MemInfoReply,
    Memset,
)
from tally.scheduler import ops
from tally.server.client.sync import wait_streams, when_idle
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.handlers.memory_wait import allocate_or_wait
from tally.server.job import Job


def mem_alloc(job: Job, msg: MemAlloc, tag: int):
    nbytes = msg.bytes
    if nbytes == 0:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, "cannot allocate 0 bytes")
    return allocate_or_wait(job, tag, nbytes, lambda: _allocate(job, nbytes))


def _allocate(job: Job, nbytes: int) -> MemAllocReply:
    allocations, backend = job.client.allocations, job.backend
    with allocations.charging(nbytes):
        try:
            ptr = backend.mem_alloc(nbytes)
        except DeviceError as e:
            if e.code != CUDA_ERROR_OUT_OF_MEMORY:
                raise
            raise allocations.device_full(nbytes, *backend.mem_info()) from None
        allocations.add(ptr, nbytes)
    return MemAllocReply(ptr)


def mem_free(job: Job, msg: MemFree, tag: int):
    client = job.client
    ptr = msg.dptr
    client.take_allocation(ptr)
    when_idle(client, tag, lambda: client.free_allocation(ptr))
    return ANSWERS_ITSELF


def mem_free_async(job: Job, msg: MemFreeAsync, tag: int) -> None:
    client = job.client
    ptr = msg.dptr
    size = client.take_allocation(ptr)
    reached = client.executor.event_create(client.client_id, timing=False)
    try:
        client.streams.submit(msg.stream, ops.EventRecord(reached))
    except DeviceError:
        client.executor.event_destroy(reached)
        client.allocations.add_back(ptr, size)    # not freed: the job still owns it
        raise

    release = client.blocking.owed(lambda: client.free_allocation(ptr))

    def free_when_reached() -> None:
        try:
            client.executor.event_synchronize(reached)
        finally:
            client.executor.event_destroy(reached)
        release()

    client.blocking.run(0, free_when_reached)


def mem_get_info(job: Job, msg: MemGetInfo, tag: int) -> MemInfoReply:
    free, total = job.client.allocations.memory.view(*job.backend.mem_info())
    return MemInfoReply(free=free, total=total)


def memset(job: Job, msg: Memset, tag: int):
    client = job.client
    dst, elem, width, height, pitch, value = msg.dst, msg.element_size, msg.width, msg.height, msg.pitch, msg.value
    if elem not in (1, 2, 4):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size must be 1, 2 or 4, not {elem}")
    if value >= 1 << (8 * elem):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset value {value:#x} does not fit {elem} byte(s)")
    row_bytes = width * elem
    if height > 1 and pitch < row_bytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"pitch {pitch} is smaller than a row ({row_bytes} bytes)")
    if width and height:
        into_host = client.check_device_range(dst, (height - 1) * pitch + row_bytes, "memset destination")
        if height == 1 or pitch == row_bytes:
            client.streams.submit(msg.stream, ops.Memset(dst, value, elem, width * height))
        else:
            for row in range(height):
                client.streams.submit(msg.stream, ops.Memset(dst + row * pitch, value, elem, width))
        # CUDA: a synchronous memset of pinned host memory (mapped pinned memory named
        # by its device pointer) is fully synchronous; of device memory it need not be.
        if tag and into_host:
            client.blocking.run(tag, lambda: wait_streams(client, [msg.stream]))
            return ANSWERS_ITSELF
    return None


HANDLERS = {
    MemAlloc: mem_alloc,
    MemFree: mem_free,
    MemFreeAsync: mem_free_async,
    MemGetInfo: mem_get_info,
    Memset: memset,
}
