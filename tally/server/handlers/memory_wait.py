"""tally-server --oversubscribe: an allocation of a best-effort job that finds
no room waits for a time slice instead of failing (tally/server/oversubscribe.py),
whichever allocator it came through: cuMemAlloc and what the client builds on it
(cuMemAllocAsync, cuMemAllocFromPoolAsync, cuMemAllocPitch), cuMemCreate, and
cuMemAllocManaged. Without --oversubscribe, or for a high-priority job, or when
its own quota is what is in the way, the allocation fails at once as before.
"""
from __future__ import annotations

from typing import Callable

from tally.protocol.errors import CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def allocate_or_wait(job: Job, tag: int, nbytes: int, attempt: Callable[[], object]):
    """attempt() now; if it runs out of memory and the job may wait, again on the job's
    blocking pool until it fits (that answers the request: ANSWERS_ITSELF is returned).
    attempt must leave nothing behind when it fails, so it can be tried again."""
    try:
        return attempt()
    except DeviceError as e:
        slicer = job.services.memory_waits
        if e.code != CUDA_ERROR_OUT_OF_MEMORY or slicer is None or not tag or not slicer.may_wait(job, nbytes):
            raise
    job.client.blocking.run(tag, lambda: slicer.wait_for_memory(job, nbytes, attempt))
    return ANSWERS_ITSELF
