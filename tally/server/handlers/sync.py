"""Context-wide synchronization (cuCtxSynchronize), and answering a
synchronization of some of the client's streams (tally/server/client/sync.py
says which error a synchronizing call returns).

A synchronization whose streams are already idle is answered on the session
thread at once (the common case of a synchronous call on an idle device, and the
hot path the sync round-trip benchmark measures); one that has to wait goes to
the job's blocking pool.
"""
from __future__ import annotations

from tally.protocol.errors import DeviceError
from tally.protocol.messages_generated import CtxSynchronize
from tally.server.client.sync import forward_kernel_output, raise_deferred, streams_idle, wait_streams
from tally.server.dispatch import ANSWERS_ITSELF
from tally.server.job import Job


def answer_when_idle(client, tag: int, keys: list[int]):
    """Done (or the first error) for `tag` once the streams are idle: at once
    when they are (the handler returns this function's None), else from the
    blocking pool (ANSWERS_ITSELF)."""
    try:
        idle = streams_idle(client, keys)
    except DeviceError:
        forward_kernel_output(client, keys)    # what the failed kernel printed comes with its error
        raise
    if idle:
        # The kernels finished before the job asked: their output still belongs to this call.
        forward_kernel_output(client, keys)
        raise_deferred(client)
        return None
    client.blocking.run(tag, lambda: wait_streams(client, keys))
    return ANSWERS_ITSELF


def ctx_synchronize(job: Job, msg: CtxSynchronize, tag: int):
    client = job.client
    result = answer_when_idle(client, tag, client.streams.keys())
    if result is None and client.fast is not None:
        client.fast.note_idle()      # the next one may be answered in C++ (tally/server/data_plane.py)
    return result


HANDLERS = {CtxSynchronize: ctx_synchronize}
