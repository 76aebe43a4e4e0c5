"""Host buffers in memory registered with the backend, for the device-to-host
copies the server issues into its own memory: a PTB kernel's progress counter after
each launch, and a job's synchronous copy into pageable memory on its way to the
download arena.

A GPU driver copies into pageable memory synchronously: cuMemcpyDtoHAsync then
returns only once the copy, and so the work queued before it on the stream, has
finished. The executor issues these copies under its lock, so with a pageable
destination it would hold every job's scheduling until, say, a best-effort kernel
ended, and no preempt flag could reach a PTB kernel whose readback waits for it.
Registered memory makes the copy asynchronous, as the design needs.
"""
from __future__ import annotations

import mmap
import threading

MIN_BLOCK = 8


class PinnedPool:
    """Blocks of power-of-two sizes, registered once and reused until close()."""

    def __init__(self, backend):
        self._backend = backend
        self._lock = threading.Lock()
        self._free: dict[int, list[memoryview]] = {}        # block size -> free blocks
        self._owner: dict[int, tuple[int, memoryview]] = {}  # id(view handed out) -> (size, block)
        self._maps: list[tuple[mmap.mmap, memoryview]] = []

    def take(self, nbytes: int) -> memoryview:
        """A zeroed view of `nbytes` registered bytes; give() it back once no copy uses it."""
        size = max(MIN_BLOCK, 1 << max(nbytes - 1, 0).bit_length())
        with self._lock:
            free = self._free.setdefault(size, [])
            if not free:
                self._grow(size, free)
            block = free.pop()
            view = block[:nbytes]
            self._owner[id(view)] = (size, block)
        view[:] = bytes(nbytes)
        return view

    def _grow(self, size: int, free: list[memoryview]) -> None:
        span = max(size, mmap.PAGESIZE)
        region = mmap.mmap(-1, span)
        whole = memoryview(region)
        self._backend.host_register(whole)
        self._maps.append((region, whole))
        free.extend(whole[i:i + size] for i in range(0, span, size))

    def give(self, view: memoryview) -> None:
        with self._lock:
            size, block = self._owner.pop(id(view))
            self._free[size].append(block)

    def close(self) -> None:
        """Once no copy into any block may still be running."""
        with self._lock:
            for _region, whole in self._maps:
                self._backend.host_unregister(whole)
            self._maps.clear()
            self._free.clear()
            self._owner.clear()
