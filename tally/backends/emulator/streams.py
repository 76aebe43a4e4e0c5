"""Streams and events of the emulator.

Each stream runs its operations in order on its own thread, so work on
different streams overlaps as it does on a GPU (kernels release the GIL while
they run). An operation that fails keeps its DeviceError on the stream; the
stream goes on with the next operation, and the error is raised once by the
next synchronizing call on that stream (DeviceBackend contract).

A stream's queue is C++ (tally._core.emulator.StreamQueue): Python queues
callables, and the server's C++ data plane queues launches, memsets and copies
(NativeOps) without the GIL, in one FIFO. The stream's thread runs a NativeOp
through `run_native`, the backend's, which does the same bookkeeping as for a
launch Python queued.
"""
from __future__ import annotations

import itertools
import threading
import time
from collections.abc import Callable

from tally._core import emulator as core
from tally.protocol.errors import CUDA_ERROR_UNKNOWN, DeviceError

_names = itertools.count()


class EmulatorStream:
    def __init__(self, priority: int = 0, on_exit: Callable[[EmulatorStream], None] | None = None,
                 run_native: Callable[[EmulatorStream, object], None] | None = None):
        self.priority = priority
        self._queue = core.StreamQueue()
        self._cond = threading.Condition()
        self._error: DeviceError | None = None
        self._output_pending = False       # printf output the backend holds for the job
        self._on_exit = on_exit
        self._run_native = run_native
        self.destroyed = False
        # Set when the stream's job leaves: its waits on values end (value_waits.py).
        self.waits_released = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"emulator-stream-{next(_names)}", daemon=True)
        self._thread.start()

    def submit(self, op: Callable[[], None]) -> None:
        if self.destroyed:
            raise DeviceError(400, "the stream was destroyed")  # CUDA_ERROR_INVALID_HANDLE
        self._queue.push(op)

    @property
    def queue_handle(self) -> int:
        """What the C++ data plane names this stream's queue by."""
        return self._queue.handle

    def _run(self) -> None:
        while True:
            op = self._queue.pop()
            if op is None:
                break
            try:
                if isinstance(op, core.NativeOp):
                    self._run_native(self, op)
                else:
                    op()
            except DeviceError as e:
                self._keep(e)
            except Exception as e:  # noqa: BLE001 - a host callback or a bug: report it on the stream, keep serving
                self._keep(DeviceError(CUDA_ERROR_UNKNOWN, f"stream operation failed: {type(e).__name__}: {e}"))
            finally:
                del op                 # nothing of it outlives its turn
                self._queue.done()
        if self._on_exit is not None:
            self._on_exit(self)

    def _keep(self, error: DeviceError) -> None:
        with self._cond:
            if self._error is None:
                self._error = error
            self._queue.set_unread(True)

    def note_output(self, pending: bool) -> None:
        """The backend holds printf output of this stream for the job (or gave it all)."""
        with self._cond:
            self._output_pending = pending
            self._queue.set_unread(pending or self._error is not None)

    @property
    def idle(self) -> bool:
        return self._queue.idle

    def wait_idle(self, timeout: float | None = None) -> bool:
        return self._queue.wait_idle(timeout)

    def take_error(self) -> DeviceError | None:
        with self._cond:
            error, self._error = self._error, None
            self._queue.set_unread(self._output_pending)
            return error

    def raise_error(self) -> None:
        error = self.take_error()
        if error is not None:
            raise error

    def stop(self) -> None:
        """Finish the queued work, then end the worker thread."""
        self.destroyed = True
        self._queue.push_stop()

    def join(self, timeout: float | None = None) -> None:
        self._thread.join(timeout)


class EmulatorEvent:
    """Records are numbered when enqueued. A wait keeps the record that was the
    latest when it was made (cuStreamWaitEvent), even if the event is recorded
    again elsewhere and that later record completes first; queries and
    synchronization look at the latest record (cuEventQuery semantics)."""

    def __init__(self, timing: bool = True):
        self.timing = timing
        self._cond = threading.Condition()
        self._recorded = 0                 # records enqueued
        self._pending: set[int] = set()    # records enqueued that the device has not reached
        self._time = 0.0                   # perf_counter() when the latest record was reached

    def record(self, stream: EmulatorStream) -> None:
        with self._cond:
            self._recorded += 1
            seq = self._recorded
            self._pending.add(seq)
        try:
            stream.submit(lambda: self._complete(seq))
        except DeviceError:
            self._complete(seq)            # never enqueued: nothing may wait for it
            raise

    def _complete(self, seq: int) -> None:
        with self._cond:
            self._pending.discard(seq)
            if seq == self._recorded:
                self._time = time.perf_counter()
            self._cond.notify_all()

    def target(self) -> int:
        with self._cond:
            return self._recorded

    def wait(self, seq: int) -> None:
        """Until record `seq` (and every earlier one, which its stream ran first) is reached."""
        with self._cond:
            self._cond.wait_for(lambda: seq not in self._pending)

    def query(self) -> bool:
        with self._cond:
            return self._recorded not in self._pending

    def completion(self) -> tuple[int, bool, float]:
        """(records enqueued, whether the latest was reached, time it was reached)."""
        with self._cond:
            return self._recorded, self._recorded not in self._pending, self._time
