"""Kernel launches: asynchronous; the parameter block arrives already laid out
by the client from the layout its FunctionReply gave."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.scheduler.ops import Launch
from tally.server.dispatch import handler
from tally.server.client.state import driver_state


@handler("LaunchKernel")
def launch_kernel(session, fields, tail, tag):
    state = driver_state(session)
    fn = state.modules.launchable(fields["function"])
    grid, block = tuple(fields["grid"]), tuple(fields["block"])
    if 0 in grid or 0 in block:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} with grid {grid} block {block}")
    if len(tail) != fn.param_bytes:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"launch of {fn.name} carries {len(tail)} parameter bytes; "
                                                    f"its parameters take {fn.param_bytes}")
    state.streams.submit(fields["stream"], Launch(fn.backend_function, grid, block, fields["shared_bytes"],
                                                  bytes(tail)))
    if tag:
        session.reply("Done", tag)
