"""Device memory of the `sim` backend: real bytes in numpy buffers.

Memory operations really move bytes so that an ordering bug in the scheduler
(a copy that runs before the kernel it should follow) shows up as wrong data.
Addresses look like device pointers (a high base, 512-byte aligned) and are
never reused within one backend, so a stale pointer cannot alias a new buffer.
"""
from __future__ import annotations

import bisect
from typing import Callable

import numpy as np

from tally.protocol.errors import (
    CUDA_ERROR_ILLEGAL_ADDRESS,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_OUT_OF_MEMORY,
    DeviceError,
)

BASE_ADDRESS = 0x7F00_0000_0000
ALIGNMENT = 512


class SimMemory:
    def __init__(self, total_bytes: int):
        self.total_bytes = total_bytes
        self.used_bytes = 0
        self._next = BASE_ADDRESS
        self._starts: list[int] = []            # sorted allocation starts
        self._buffers: dict[int, np.ndarray] = {}
        # address -> callback(now) run after any write that covers the address;
        # PTB kernels watch their preempt flag this way.
        self._watches: dict[int, Callable[[], None]] = {}

    # allocation -----------------------------------------------------------
    def alloc(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot allocate {nbytes} bytes")
        if self.used_bytes + nbytes > self.total_bytes:
            raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY,
                              f"out of device memory: {nbytes} bytes requested, "
                              f"{self.total_bytes - self.used_bytes} free")
        ptr = self._next
        self._next += -(-nbytes // ALIGNMENT) * ALIGNMENT
        self._starts.append(ptr)                # addresses only grow: stays sorted
        self._buffers[ptr] = np.zeros(nbytes, dtype=np.uint8)
        self.used_bytes += nbytes
        return ptr

    def free(self, ptr: int) -> None:
        buf = self._buffers.pop(ptr, None)
        if buf is None:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"free of {ptr:#x}, which is not the start of an allocation")
        del self._starts[bisect.bisect_left(self._starts, ptr)]
        self.used_bytes -= buf.size

    def allocation_of(self, ptr: int) -> tuple[int, int] | None:
        """(start, size) of the allocation containing ptr, or None."""
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0:
            return None
        start = self._starts[i]
        size = self._buffers[start].size
        return (start, size) if ptr < start + size else None

    # access -----------------------------------------------------------------
    def view(self, ptr: int, nbytes: int) -> np.ndarray:
        """A writable uint8 view of [ptr, ptr + nbytes); raises an illegal-address
        DeviceError when the range is not inside one allocation."""
        found = self.allocation_of(ptr)
        if found is None or nbytes < 0 or ptr + nbytes > found[0] + found[1]:
            raise DeviceError(CUDA_ERROR_ILLEGAL_ADDRESS,
                              f"device access to [{ptr:#x}, {ptr + nbytes:#x}) is outside "
                              "every allocation")
        start = found[0]
        return self._buffers[start][ptr - start: ptr - start + nbytes]

    def check_range(self, ptr: int, nbytes: int) -> None:
        self.view(ptr, nbytes)

    def read(self, ptr: int, nbytes: int) -> bytes:
        return self.view(ptr, nbytes).tobytes()

    def write(self, ptr: int, data: bytes | memoryview | np.ndarray) -> None:
        arr = np.frombuffer(data, dtype=np.uint8) if not isinstance(data, np.ndarray) else data
        self.view(ptr, arr.size)[:] = arr.reshape(-1).view(np.uint8)
        self.written(ptr, arr.size)

    def fill(self, ptr: int, value: int, element_size: int, count: int) -> None:
        dtype = {1: np.uint8, 2: np.uint16, 4: np.uint32}[element_size]
        self.view(ptr, element_size * count).view(dtype)[:] = value
        self.written(ptr, element_size * count)

    def read_u32(self, ptr: int) -> int:
        return int(self.view(ptr, 4).view(np.uint32)[0])

    def write_u32(self, ptr: int, value: int) -> None:
        self.view(ptr, 4).view(np.uint32)[0] = value
        self.written(ptr, 4)

    # watches ----------------------------------------------------------------
    def watch(self, address: int, callback: Callable[[], None]) -> None:
        self._watches[address] = callback

    def unwatch(self, address: int) -> None:
        self._watches.pop(address, None)

    def written(self, ptr: int, nbytes: int) -> None:
        """Tell watchers that [ptr, ptr + nbytes) changed (kernel effects that
        write through `view` call this themselves)."""
        if not self._watches:
            return
        for address, callback in list(self._watches.items()):
            if ptr <= address < ptr + nbytes:
                callback()
