"""Stream attributes (cuStreamSetAttribute): the client keeps and answers them all;
the access-policy window is also applied to the device stream, in stream order,
so the job's later kernels on that stream run with it (on a GPU, its L2 residency)."""
from __future__ import annotations

from tally.backends.base import AccessPolicyWindow
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import StreamAccessPolicy
from tally.scheduler import ops
from tally.server.job import Job

ACCESS_PROPERTIES = (0, 1, 2)   # CU_ACCESS_PROPERTY_NORMAL, STREAMING, PERSISTING


def stream_access_policy(job: Job, msg: StreamAccessPolicy, tag: int) -> None:
    if not 0.0 <= msg.hit_ratio <= 1.0 or msg.hit_prop not in ACCESS_PROPERTIES or msg.miss_prop not in (0, 1):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"access-policy window with hit ratio {msg.hit_ratio}, hit "
                                                    f"property {msg.hit_prop} and miss property {msg.miss_prop}")
    window = AccessPolicyWindow(msg.base, msg.num_bytes, msg.hit_ratio, msg.hit_prop, msg.miss_prop)
    job.client.streams.submit(msg.stream, ops.StreamAccessPolicy(window))


HANDLERS = {StreamAccessPolicy: stream_access_policy}
