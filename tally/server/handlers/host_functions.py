"""Host function requests (tally/server/client/host_functions.py says how they
hold a stream)."""
from __future__ import annotations

import logging

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.protocol.messages_generated import HostFuncDone, LaunchHostFunc
from tally.server.job import Job

log = logging.getLogger("tally.server")


def launch_host_func(job: Job, msg: LaunchHostFunc, tag: int) -> None:
    host_functions = job.client.host_functions
    try:
        operation = host_functions.operation_for(msg.callback)
    except ValueError as e:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
    try:
        job.client.streams.submit(msg.stream, operation)
    except DeviceError:
        host_functions.finished(msg.callback)
        raise


def host_func_done(job: Job, msg: HostFuncDone, tag: int) -> None:
    if not job.client.host_functions.finished(msg.callback):
        log.warning("client %d finished host function %d, which was not waiting", job.client_id, msg.callback)


HANDLERS = {LaunchHostFunc: launch_host_func, HostFuncDone: host_func_done}
