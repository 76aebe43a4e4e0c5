"""Streams and context-wide synchronization.

A synchronization whose streams are already idle is answered on the session
thread at once (the common case of a synchronous call on an idle device, and the
hot path the sync round-trip benchmark measures); one that has to wait goes to
the session's blocking pool.
"""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_NOT_READY, DeviceError
from tally.server.dispatch import handler
from tally.server.client.state import driver_state
from tally.server.client.sync import (
    drain_quietly,
    forward_kernel_output,
    keep_kernel_output,
    raise_deferred,
    streams_idle,
    wait_streams,
)


def answer_when_idle(session, state, tag: int, keys: list[int]) -> None:
    """Reply Done (or the first error) to `tag` once the streams are idle."""
    try:
        idle = streams_idle(state, keys)
    except DeviceError:
        forward_kernel_output(state, keys)    # what the failed kernel printed comes with its error
        raise
    if idle:
        # The kernels finished before the job asked: their output still belongs to this call.
        forward_kernel_output(state, keys)
        raise_deferred(state)
        session.reply("Done", tag)
        return

    def wait() -> None:
        wait_streams(state, keys)
        session.reply("Done", tag)

    state.blocking.run(tag, wait)


@handler("CtxSynchronize")
def ctx_synchronize(session, fields, tail, tag):
    state = driver_state(session)
    answer_when_idle(session, state, tag, state.streams.keys())


@handler("StreamCreate")
def stream_create(session, fields, tail, tag):
    driver_state(session).streams.create(fields["stream"], fields["flags"], fields["priority"])
    if tag:
        session.reply("Done", tag)


@handler("StreamDestroy")
def stream_destroy(session, fields, tail, tag):
    state = driver_state(session)
    key = fields["stream"]
    state.streams.forget(key)

    def release() -> None:
        # CUDA lets the stream's work finish after cuStreamDestroy returns; its
        # errors and its kernels' printf output still belong to the job.
        drain_quietly(state, [key])
        keep_kernel_output(state, key)
        state.executor.release_stream(state.client_id, key)
        state.streams.released(key)

    state.blocking.run(0, release)
    if tag:
        session.reply("Done", tag)


@handler("StreamQuery")
def stream_query(session, fields, tail, tag):
    state = driver_state(session)
    if not streams_idle(state, state.streams.sync_keys(fields["stream"])):
        raise DeviceError(CUDA_ERROR_NOT_READY, "the stream has work in progress")
    session.reply("Done", tag)


@handler("StreamSynchronize")
def stream_synchronize(session, fields, tail, tag):
    state = driver_state(session)
    answer_when_idle(session, state, tag, state.streams.sync_keys(fields["stream"]))
