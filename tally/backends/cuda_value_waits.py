"""Stream memory operations on a GPU: forwarded to the driver
(cuStreamWaitValue32/64, cuStreamWriteValue32/64), and remembered per stream so a
leaving job's waits can be released.

A wait the job never satisfies holds its stream on the device forever, and the
server must synchronize the job's streams before it frees the job's memory. A
GPU cannot cancel a wait, so the release satisfies it: the server writes, on a
stream of its own, a value that ends each wait the stream was given (for GEQ and
EQ the value waited for, for AND the value, for NOR zero). A wait no value can
end (AND with 0, NOR with all bits set) is logged: the driver would hold that
stream forever, as it would without tally.
"""
from __future__ import annotations

import collections
import logging
import threading

from tally.backends.stream_memory_ops import WAIT_CONDITIONS, satisfying_value

log = logging.getLogger("tally.backends.cuda")

# Waits remembered per stream. A stream stops at its first unmet wait, so only the
# latest waits can still hold it; older ones were passed and rewriting them is harmless.
_REMEMBERED_WAITS = 256


class CudaValueWaits:
    def __init__(self, cu, check):
        self._cu, self._check = cu, check
        self._waits: dict[object, collections.deque] = {}
        self._lock = threading.Lock()

    def wait(self, stream, address: int, value: int, width: int, condition: int) -> None:
        fn = self._cu.cuStreamWaitValue32 if width == 4 else self._cu.cuStreamWaitValue64
        self._check(fn(stream, address, value, condition))
        with self._lock:
            key = int(stream)
            self._waits.setdefault(key, collections.deque(maxlen=_REMEMBERED_WAITS)).append(
                (address, value, width, condition))

    def write(self, stream, address: int, value: int, width: int) -> None:
        fn = self._cu.cuStreamWriteValue32 if width == 4 else self._cu.cuStreamWriteValue64
        self._check(fn(stream, address, value, 0))

    def release(self, stream) -> None:
        """Satisfy every remembered wait of `stream` from a stream of the server's."""
        with self._lock:
            waits = self._waits.pop(int(stream), ())
        if not waits:
            return
        cu = self._cu
        writer = self._check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        try:
            for address, value, width, condition in waits:
                end = satisfying_value(value, width, condition)
                if end is None:
                    log.warning("a wait (%s %#x at %#x) that no value can satisfy holds a leaving job's "
                                "stream on the device", WAIT_CONDITIONS[condition], value, address)
                    continue
                self.write(writer, address, end, width)
            self._check(cu.cuStreamSynchronize(writer))
        finally:
            cu.cuStreamDestroy(writer)

    def forget(self, stream) -> None:
        with self._lock:
            self._waits.pop(int(stream), None)
