"""Context settings the server keeps: cuCtxSetLimit's device heap size (the
job's device heap, tally/server/client/device_heap.py). The other limits live
in the client."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_UNSUPPORTED_LIMIT, DeviceError
from tally.protocol.messages_generated import CtxSetLimit
from tally.server.job import Job

CU_LIMIT_MALLOC_HEAP_SIZE = 2


def ctx_set_limit(job: Job, msg: CtxSetLimit, tag: int) -> None:
    if msg.limit != CU_LIMIT_MALLOC_HEAP_SIZE:
        raise DeviceError(CUDA_ERROR_UNSUPPORTED_LIMIT, f"limit {msg.limit} is kept by the client, not the server")
    job.client.device_heap.set_size(msg.value)


HANDLERS = {CtxSetLimit: ctx_set_limit}
