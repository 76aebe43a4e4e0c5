"""Requests that must wait for the device, answered off the session thread.

The session thread must keep draining the request ring while a client thread
waits in cuStreamSynchronize: the work it waits for may be held behind a host
function whose HostFuncDone arrives on that same ring. So a handler that has to
wait hands the rest of its work to a small per-session pool and returns
ANSWERS_ITSELF; the pool thread answers when the wait is over, by the rule the
dispatcher applies to handlers (tally/server/dispatch.py): the work's reply
message, Done when it returns None, nothing when it returns ANSWERS_ITSELF (it
answered itself), the Error record when it raises.

A job can die while it waits (killed in cuStreamSynchronize, say): the executor
then drops its work and the waiting request ends with ClientGone, quietly, with
no answer (nobody is left to read it).

A release the job asked for (a free, an unmap, an unload: taken out of the job's
tables at once, done once its work drained) is owed even when the job dies before
a pool thread runs it: `owed(fn)` registers it, and the client's close runs every
release still owed once its device work has ended (`run_owed`). Without that, a
job killed mid-cuMemFree could leave the allocation in no table and never freed
(`tally-bench chaos` found it: 128-160 KiB of device memory lost for good).
"""
from __future__ import annotations

import itertools
import logging
import threading
import traceback
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from tally.protocol.errors import CUDA_ERROR_UNKNOWN, DeviceError
from tally.scheduler.executor import ClientGone
from tally.server.client.job_channel import JobChannel

log = logging.getLogger("tally.server")

# Threads are started on demand; the bound only matters for a client with many
# threads waiting at once (each waits on its own reply anyway).
MAX_WAITERS = 32


class BlockingCalls:
    def __init__(self, job: JobChannel):
        self._job = job
        self._pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._owed: dict[int, Callable[[], object]] = {}
        self._owed_ids = itertools.count()
        self._owed_lock = threading.Lock()
        self._active = 0                       # work submitted and not yet answered
        self._idle = threading.Condition()

    def owed(self, release: Callable[[], object]) -> Callable[[], object]:
        """`release` made to run exactly once: by whoever calls what this returns
        first, or by run_owed() when the client closes before anyone did."""
        with self._owed_lock:
            key = next(self._owed_ids)
            self._owed[key] = release

        def once():
            with self._owed_lock:
                fn = self._owed.pop(key, None)
            return None if fn is None else fn()
        return once

    def run_owed(self) -> None:
        """At the client's close, once its device work has ended: the releases its
        requests still owed (their pool work was cancelled or never started)."""
        with self._owed_lock:
            owed, self._owed = list(self._owed.values()), {}
        for release in owed:
            try:
                release()
            except Exception as e:  # noqa: BLE001 - the rest must still be released
                log.warning("client %d: a release it asked for failed at its close: %s", self._job.client_id, e)

    def run(self, tag: int, work: Callable[[], object]) -> None:
        """Run `work` on a pool thread and answer `tag` with what it returns; a
        DeviceError it raises becomes the Error record for `tag` (or the
        session's deferred error when tag is 0)."""
        if self._closed:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(MAX_WAITERS,
                                            thread_name_prefix=f"tally-client-{self._job.client_id}-wait")
        with self._idle:
            self._active += 1
        # runs when the work ended, and when close() cancelled it before it began
        self._pool.submit(self._answer, tag, self._job.current_request, work).add_done_callback(self._done)

    def _done(self, _future) -> None:
        with self._idle:
            self._active -= 1
            self._idle.notify_all()

    def idle(self) -> bool:
        """Nothing of the job is waiting here (what it may yet answer or defer)."""
        with self._idle:
            return self._active == 0

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no work is running (answered or ended); False on timeout."""
        with self._idle:
            return self._idle.wait_for(lambda: self._active == 0, timeout=timeout_s)

    def close(self) -> None:
        """Stop taking work. Threads still waiting finish on their own once the
        executor drops the client's streams; their answers go nowhere."""
        self._closed = True
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)

    def _answer(self, tag: int, request: str, work: Callable[[], object]) -> None:
        job = self._job
        try:
            try:
                result = work()
            except ClientGone as e:
                log.debug("client %d is gone; a request it waited on ends unanswered (%s)", job.client_id, e)
            except DeviceError as e:
                job.fail(tag, request, e)
            except Exception as e:  # noqa: BLE001 - a server bug must not leave the client waiting forever
                log.error("client %d: blocking request failed:\n%s", job.client_id, traceback.format_exc())
                if tag:
                    job.reply_error(tag, DeviceError(CUDA_ERROR_UNKNOWN, f"tally-server internal error: {e}"))
            else:
                job.answer(tag, result)
        except Exception:
            # The session closed under us (the client is gone): nobody to answer.
            if not job.closed:
                log.exception("client %d: could not answer a blocking request", job.client_id)
