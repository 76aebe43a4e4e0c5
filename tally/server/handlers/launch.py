"""Kernel launches: asynchronous; the parameter block arrives already laid out
by the client from the layout its FunctionReply gave."""
from __future__ import annotations

from tally.protocol import LaunchFlag
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import LaunchKernel
from tally.scheduler import ops
from tally.server.job import Job

_KNOWN_FLAGS = LaunchFlag.COOPERATIVE


def launch_kernel(job: Job, msg: LaunchKernel, tag: int) -> None:
    client = job.client
    fn = client.modules.launchable(msg.function)
    grid, block, tail = msg.grid, msg.block, msg.tail
    if 0 in grid or 0 in block:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} with grid {grid} block {block}")
    if len(tail) != fn.param_bytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} carries {len(tail)} parameter bytes; "
                                                    f"its parameters take {fn.param_bytes}")
    if msg.flags & ~_KNOWN_FLAGS:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} with unknown flags {msg.flags:#x}")
    cluster = msg.cluster if any(msg.cluster) else None
    if cluster is not None and 0 in cluster:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} with cluster dimension {cluster}")
    client.device_heap.prepare_launch(fn.backend_function, fn.module.backend_module)   # malloc/free's heap
    launch = ops.Launch(fn.backend_function, grid, block, msg.shared_bytes, bytes(tail), cluster=cluster,
                        cooperative=bool(msg.flags & LaunchFlag.COOPERATIVE))
    client.streams.submit(msg.stream, launch)
    if client.fast is not None:
        client.fast.learn_launch(fn, launch)   # its next launches may skip Python (tally/server/data_plane.py)


HANDLERS = {LaunchKernel: launch_kernel}
