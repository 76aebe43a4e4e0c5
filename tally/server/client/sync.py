"""Waiting for a client's streams, and which error a synchronizing call returns.

A synchronizing call (cuCtxSynchronize, cuStreamSynchronize, a synchronous copy
into pageable memory...) returns the first error it finds: one raised by the
device on the streams it waited for, else an error of an earlier asynchronous
request (the session's deferred error). Errors found on other streams at the
same time are kept for the next synchronizing call, never dropped.
"""
from __future__ import annotations

from tally import protocol
from tally.protocol.errors import DeviceError
from tally.scheduler.executor import ClientGone

KERNEL_OUTPUT = protocol.codec("KernelOutput")
# Keeps each KernelOutput record well under the completion ring's record limit.
KERNEL_OUTPUT_CHUNK = 16 << 10


def wait_streams(state, keys: list[int]) -> None:
    first = None
    for key in keys:
        try:
            state.executor.synchronize_stream(state.client_id, key)
        except DeviceError as e:
            if first is None:
                first = e
            else:
                state.session.defer_error(e)
    forward_kernel_output(state, keys)
    if first is not None:
        raise first
    raise_deferred(state)


def forward_kernel_output(state, keys: list[int]) -> None:
    """Send the job what its kernels printed on these streams (and on streams it
    destroyed since), ahead of the reply to its synchronizing call (CUDA
    delivers device printf at synchronization)."""
    # One lock around both takes: a destroyed stream's release (keep_kernel_output)
    # may move its output into kept_output at any moment, and must not slip it in
    # between the two, or the text waits for the job's next synchronization.
    with state.output_lock:
        kept, state.kept_output = state.kept_output, []
        text = "".join(kept) + "".join(state.executor.take_kernel_output(state.client_id, key)
                                       for key in keys)
    data = text.encode()
    for start in range(0, len(data), KERNEL_OUTPUT_CHUNK):
        chunk = data[start:start + KERNEL_OUTPUT_CHUNK]
        state.session.push_completion(KERNEL_OUTPUT.kind, 0, KERNEL_OUTPUT.pack(chunk))


def keep_kernel_output(state, key: int) -> None:
    """The stream `key` is going away: keep its kernels' output for the job's next
    synchronizing call."""
    with state.output_lock:
        text = state.executor.take_kernel_output(state.client_id, key)
        if text:
            state.kept_output.append(text)


def drain_quietly(state, keys: list[int]) -> None:
    """Wait for the streams without reporting: their errors stay for the job's
    next synchronizing call (used before freeing memory the work may use). A job
    that died meanwhile has no work left on the device once this returns."""
    for key in keys:
        try:
            state.executor.synchronize_stream(state.client_id, key)
        except DeviceError as e:
            state.session.defer_error(e)
        except ClientGone:
            pass        # its queued work was dropped and its running work has ended


def when_idle(state, tag: int, fn) -> None:
    """Run fn once the client's queued work drained, then answer `tag`: for
    freeing or unmapping memory that work may still use (on a real GPU, freeing
    at once could hand the bytes to another job while a kernel writes them).
    Runs on the session's blocking pool; the caller waits for the answer."""
    def run() -> None:
        drain_quietly(state, state.streams.keys())
        fn()
        if tag:
            state.session.reply("Done", tag)

    state.blocking.run(tag, run)


def streams_idle(state, keys: list[int]) -> bool:
    """True when none of the streams has work left; raises (once) an error one
    of them holds, like cuStreamQuery."""
    for key in keys:
        if not state.executor.query_stream(state.client_id, key):
            return False
    return True


def raise_deferred(state) -> None:
    error = state.session.take_deferred_error()
    if error is not None:
        raise error
