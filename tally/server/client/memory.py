"""Which device memory belongs to which client, and how much it may have.

The server checks every address a client names in memcpy/memset/free against
this table (a job must never read or corrupt another job's memory), counts
what the client holds in its JobMemory (tally/cluster/memory_limits.py: the
job's quota and the memory reserved for high-priority jobs), and frees
everything the client still owns when it goes away.
"""
from __future__ import annotations

import bisect
import contextlib
import threading

from tally.cluster.memory_limits import JobMemory, refusal
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.units import format_bytes


class Allocations:
    def __init__(self, memory: JobMemory | None = None, fast=None):
        self.memory = memory or JobMemory()     # the counts and the limits they are checked against
        self._fast = fast                       # the C++ data plane's copy of the table (fast_path.py), or None
        self._starts: list[int] = []            # sorted allocation base addresses
        self._sizes: dict[int, int] = {}
        self._lock = threading.Lock()

    @property
    def quota_bytes(self) -> int | None:
        return self.memory.quota_bytes

    @property
    def used_bytes(self) -> int:
        return self.memory.used_bytes

    @property
    def peak_bytes(self) -> int:
        return self.memory.peak_bytes

    def __len__(self) -> int:
        return len(self._starts)

    @contextlib.contextmanager
    def charging(self, nbytes: int):
        """Count `nbytes` against the job's limits around the block that makes
        them on the device (raises OUT_OF_MEMORY naming the limit before it runs);
        if the block fails, they are given back."""
        self.memory.take(nbytes)
        try:
            yield
        except BaseException:
            self.memory.give(nbytes)
            raise

    @staticmethod
    def device_full(nbytes: int, free: int, total: int) -> DeviceError:
        """The refusal when the device itself has no room (no quota was in the way)."""
        return refusal(nbytes, f"the device has {format_bytes(free)} free of {format_bytes(total)}")

    def uncharge(self, nbytes: int) -> None:
        """Give back memory counted by `charging` that is not an allocation (virtual memory's physical handles)."""
        self.memory.give(nbytes)

    def add(self, ptr: int, nbytes: int) -> None:
        """Record an allocation whose bytes `charging` counted."""
        with self._lock:
            if ptr in self._sizes:
                raise AssertionError(f"device returned address 0x{ptr:x} twice")
            bisect.insort(self._starts, ptr)
            self._sizes[ptr] = nbytes
            if self._fast is not None:
                self._fast.allocation_added(ptr, nbytes)

    def add_back(self, ptr: int, nbytes: int) -> None:
        """Record again an allocation `remove` just forgot (its free failed): counted without checks."""
        self.memory.take_back(nbytes)
        self.add(ptr, nbytes)

    def remove(self, ptr: int) -> int:
        """Forget the allocation starting at ptr; returns its size.
        Raises INVALID_VALUE when ptr is not the start of one of ours."""
        with self._lock:
            size = self._sizes.pop(ptr, None)
            if size is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"0x{ptr:x} is not the start of an allocation of this client")
            if self._fast is not None:
                self._fast.allocation_removed(ptr)
            self._starts.pop(bisect.bisect_left(self._starts, ptr))
        self.memory.give(size)
        return size

    def find(self, ptr: int) -> tuple[int, int] | None:
        """The (base, size) of the allocation containing ptr, if any."""
        with self._lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            if i < 0:
                return None
            base = self._starts[i]
            size = self._sizes[base]
            return (base, size) if ptr < base + max(size, 1) else None

    def check_range(self, ptr: int, nbytes: int, what: str = "address range") -> None:
        """Raise INVALID_VALUE unless [ptr, ptr+nbytes) lies inside one allocation."""
        found = self.find(ptr)
        if found is None or ptr + nbytes > found[0] + found[1]:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{what} 0x{ptr:x}+{nbytes} is not memory this client owns")

    def all(self) -> list[tuple[int, int]]:
        with self._lock:
            return [(p, self._sizes[p]) for p in self._starts]

    def clear(self) -> list[tuple[int, int]]:
        """Forget everything; returns what was owned (for freeing on the device)."""
        with self._lock:
            owned = [(p, self._sizes[p]) for p in self._starts]
            if self._fast is not None:
                self._fast.allocations_cleared()
            self._starts.clear()
            self._sizes.clear()
        self.memory.give(sum(size for _, size in owned))
        return owned
