"""Streams: created under ids the client picks, destroyed once their work has
drained, queried and synchronized (tally/server/client/streams.py holds a
client's streams and CUDA's default-stream rules)."""
from __future__ import annotations

from tally.protocol.errors import CUDA_ERROR_NOT_READY, DeviceError
from tally.protocol.messages_generated import StreamCreate, StreamDestroy, StreamQuery, StreamSynchronize
from tally.server.client.sync import drain_quietly, keep_kernel_output, streams_idle
from tally.server.handlers.sync import answer_when_idle
from tally.server.job import Job


def stream_create(job: Job, msg: StreamCreate, tag: int) -> None:
    job.client.streams.create(msg.stream, msg.flags, msg.priority)


def stream_destroy(job: Job, msg: StreamDestroy, tag: int) -> None:
    client = job.client
    key = msg.stream
    client.streams.forget(key)

    def release() -> None:
        # CUDA lets the stream's work finish after cuStreamDestroy returns; its
        # errors and its kernels' printf output still belong to the job.
        drain_quietly(client, [key])
        keep_kernel_output(client, key)
        client.executor.release_stream(client.client_id, key)
        client.streams.released(key)

    client.blocking.run(0, release)


def stream_query(job: Job, msg: StreamQuery, tag: int) -> None:
    client = job.client
    if not streams_idle(client, client.streams.sync_keys(msg.stream)):
        raise DeviceError(CUDA_ERROR_NOT_READY, "the stream has work in progress")


def stream_synchronize(job: Job, msg: StreamSynchronize, tag: int):
    client = job.client
    return answer_when_idle(client, tag, client.streams.sync_keys(msg.stream))


HANDLERS = {
    StreamCreate: stream_create,
    StreamDestroy: stream_destroy,
    StreamQuery: stream_query,
    StreamSynchronize: stream_synchronize,
}
