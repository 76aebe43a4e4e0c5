"""The cuda backend's context: the device's primary context, made current on each
server thread, and what becomes of it after a device fault.

On a GPU a kernel's fault (an illegal address, a trap, a misaligned access...) is
sticky: from then on every call in the context returns it, on every stream of
every job, and tally runs every job in this one context. The server recovers
(tally/server/device_faults.py) in two steps here. `lose(error)` first: until
the context is made again no thread reaches the driver with it (calls raise the
fault at once; releasing what died with it does nothing, there is nothing left to
release), while the server lets go of every job's device state. Then
`recreate()`: cuDevicePrimaryCtxReset destroys the context and everything made in
it, release and retain give a fresh one, which every thread makes current at its
next call (the generation number says it is new), and a byte pattern written to
device memory and read back checks that the device works again.

NVIDIA documents these errors as needing a new process ("To continue using CUDA,
the process must be terminated and relaunched", cuda.h); the reset is what its
runtime does for cudaDeviceReset. When the check fails, `recreate` raises and
the server exits so that its supervisor starts it again.
"""
from __future__ import annotations

import threading

import numpy as np

from tally.protocol.errors import CUDA_ERROR_UNKNOWN, DeviceError

from cuda.bindings import driver as cu

_CHECK_BYTES = 4096
_CHECK_PATTERN = 0x5A


class CudaContext:
    def __init__(self, ordinal: int, check):
        self._check = check                  # the backend's: raises DeviceError on a failed call
        self.device = check(cu.cuDeviceGet(ordinal))
        self.handle = check(cu.cuDevicePrimaryCtxRetain(self.device))
        self.generation = 0                  # how many times it was made again after a fault
        self.lost: DeviceError | None = None
        self._local = threading.local()

    def bind(self) -> None:
        """Make the context current on the calling thread (once per thread and
        generation). While it is lost, raise the fault instead: no call may reach
        a context whose handles died."""
        lost = self.lost
        if lost is not None:
            raise lost
        if getattr(self._local, "generation", -1) == self.generation:
            return
        self._check(cu.cuCtxSetCurrent(self.handle))
        self._local.generation = self.generation

    def lose(self, error: DeviceError) -> None:
        self.lost = error

    def recreate(self) -> None:
        """Destroy the faulted context and everything in it, make a fresh one and
        check that it works; raises DeviceError when the device cannot be used
        again in this process."""
        check = self._check
        check(cu.cuDevicePrimaryCtxReset(self.device))
        check(cu.cuDevicePrimaryCtxRelease(self.device))
        self.handle = check(cu.cuDevicePrimaryCtxRetain(self.device))
        self.generation += 1          # after the handle: a thread binding now binds the new one
        self.lost = None
        self.bind()
        self._check_device()

    def _check_device(self) -> None:
        check = self._check
        stream = check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING))
        out = np.zeros(_CHECK_BYTES, np.uint8)
        try:
            ptr = check(cu.cuMemAlloc(_CHECK_BYTES))
            try:
                check(cu.cuMemsetD8Async(ptr, _CHECK_PATTERN, _CHECK_BYTES, stream))
                check(cu.cuMemcpyDtoHAsync(out.ctypes.data, ptr, _CHECK_BYTES, stream))
                check(cu.cuStreamSynchronize(stream))
            finally:
                cu.cuMemFree(ptr)
        finally:
            cu.cuStreamDestroy(stream)
        wrong = int(np.count_nonzero(out != _CHECK_PATTERN))
        if wrong:
            raise DeviceError(CUDA_ERROR_UNKNOWN, f"the recreated context read back {wrong} of {_CHECK_BYTES} "
                                                  f"bytes wrong after a memset")

    def release(self) -> None:
        cu.cuDevicePrimaryCtxRelease(self.device)
