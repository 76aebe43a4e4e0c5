"""Host function requests (see host_functions.py for how they hold a stream)."""
from __future__ import annotations

import logging

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.dispatch import handler
from tally.server.client.state import driver_state

log = logging.getLogger("tally.server")


@handler("LaunchHostFunc")
def launch_host_func(session, fields, tail, tag):
    state = driver_state(session)
    try:
        operation = state.host_functions.operation_for(fields["callback"])
    except ValueError as e:
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, str(e)) from None
    try:
        state.streams.submit(fields["stream"], operation)
    except DeviceError:
        state.host_functions.finished(fields["callback"])
        raise
    if tag:
        session.reply("Done", tag)


@handler("HostFuncDone")
def host_func_done(session, fields, tail, tag):
    if not driver_state(session).host_functions.finished(fields["callback"]):
        log.warning("client %d finished host function %d, which was not waiting", session.client_id,
                    fields["callback"])
    if tag:
        session.reply("Done", tag)
