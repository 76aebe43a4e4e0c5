"""Waiting for a client's streams, and which error a synchronizing call returns.

A synchronizing call (cuCtxSynchronize, cuStreamSynchronize, a synchronous copy
into pageable memory...) returns the first error it finds: one raised by the
device on the streams it waited for, else an error of an earlier asynchronous
request (the session's deferred error). Errors found on other streams at the
same time are kept for the next synchronizing call, never dropped.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from tally.protocol.errors import DeviceError
from tally.protocol.messages_generated import KernelOutput
from tally.scheduler.executor import ClientGone

if TYPE_CHECKING:
    from tally.server.client.state import ClientState

# Keeps each KernelOutput record well under the completion ring's record limit.
KERNEL_OUTPUT_CHUNK = 16 << 10


def wait_streams(client: ClientState, keys: list[int]) -> None:
    first = None
    for key in keys:
        try:
            client.executor.synchronize_stream(client.client_id, key)
        except DeviceError as e:
            if first is None:
                first = e
            else:
                client.job.defer_error(e)
    forward_kernel_output(client, keys)
    if first is not None:
        raise first
    raise_deferred(client)


def forward_kernel_output(client: ClientState, keys: list[int]) -> None:
    """Send the job what its kernels printed on these streams (and on streams it
    destroyed since), ahead of the reply to its synchronizing call (CUDA
    delivers device printf at synchronization)."""
    # One lock around both takes: a destroyed stream's release (keep_kernel_output)
    # may move its output into kept_output at any moment, and must not slip it in
    # between the two, or the text waits for the job's next synchronization.
    with client.output_lock:
        kept, client.kept_output = client.kept_output, []
        text = "".join(kept) + "".join(client.executor.take_kernel_output(client.client_id, key)
                                       for key in keys)
    data = text.encode()
    for start in range(0, len(data), KERNEL_OUTPUT_CHUNK):
        chunk = data[start:start + KERNEL_OUTPUT_CHUNK]
        client.job.push_completion(KernelOutput.KIND, 0, KernelOutput(chunk).encode())


def keep_kernel_output(client: ClientState, key: int) -> None:
    """The stream `key` is going away: keep its kernels' output for the job's next
    synchronizing call."""
    with client.output_lock:
        text = client.executor.take_kernel_output(client.client_id, key)
        if text:
            client.kept_output.append(text)


def drain_quietly(client: ClientState, keys: list[int]) -> None:
    """Wait for the streams without reporting: their errors stay for the job's
    next synchronizing call (used before freeing memory the work may use). A job
    that died meanwhile has no work left on the device once this returns."""
    for key in keys:
        try:
            client.executor.synchronize_stream(client.client_id, key)
        except DeviceError as e:
            client.job.defer_error(e)
        except ClientGone:
            pass        # its queued work was dropped and its running work has ended


def when_idle(client: ClientState, tag: int, fn) -> None:
    """Run fn once the client's queued work drained, then answer `tag` (Done, or
    the error): for freeing or unmapping memory that work may still use (on a
    real GPU, freeing at once could hand the bytes to another job while a kernel
    writes them). Runs on the session's blocking pool; the caller waits for the
    answer (its handler returns ANSWERS_ITSELF). fn is owed: if the job goes
    before it runs, the job's close runs it."""
    release = client.blocking.owed(fn)

    def run() -> None:
        drain_quietly(client, client.streams.keys())
        release()

    client.blocking.run(tag, run)


def streams_idle(client: ClientState, keys: list[int]) -> bool:
    """True when none of the streams has work left; raises (once) an error one
    of them holds, like cuStreamQuery."""
    for key in keys:
        if not client.executor.query_stream(client.client_id, key):
            return False
    return True


def raise_deferred(client: ClientState) -> None:
    error = client.job.take_deferred_error()
    if error is not None:
        raise error
