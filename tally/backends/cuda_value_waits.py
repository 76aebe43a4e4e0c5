"""Stream memory operations on a GPU. Writes go to the driver
(cuStreamWriteValue32/64). Waits do not: a stream the device holds on a value
holds every implicit synchronization of the one context all jobs share
(cuMemFree, module unloads, the server's own synchronizations), so one job's
wait that nobody satisfies would stall every job (the nested cuda-backend test
found exactly that). Instead the executor keeps the work behind a wait and,
once the stream reached it, polls the value (tally/scheduler/value_polls.py)
with a small copy on a stream of the server's own.
"""
from __future__ import annotations

import ctypes
import threading

from tally.backends.stream_memory_ops import wait_satisfied


class CudaValueWaits:
    def __init__(self, cu, check, make_current):
        self._cu, self._check, self._current = cu, check, make_current
        self._reader = None     # the server's stream for reading waited-on values, made at first use
        self._lock = threading.Lock()

    def context_gone(self) -> None:
        """The context was recreated after a fault: its stream went with it."""
        with self._lock:
            self._reader = None

    def _reading_stream(self):
        with self._lock:
            if self._reader is None:
                cu = self._cu
                self._reader = self._check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
            return self._reader

    def poll(self, address: int, value: int, width: int, condition: int):
        """What the executor calls to learn whether the wait is over."""
        buf = (ctypes.c_ubyte * width)()

        def met() -> bool:
            cu = self._cu
            self._current()
            reader = self._reading_stream()
            self._check(cu.cuMemcpyDtoHAsync(ctypes.addressof(buf), address, width, reader))
            self._check(cu.cuStreamSynchronize(reader))
            return wait_satisfied(int.from_bytes(bytes(buf), "little"), value, width, condition)
        return met

    def write(self, stream, address: int, value: int, width: int) -> None:
        fn = self._cu.cuStreamWriteValue32 if width == 4 else self._cu.cuStreamWriteValue64
        self._check(fn(stream, address, value, 0))
