"""A job's managed allocations (cuMemAllocManaged) and the shared-memory objects
holding their bytes (tally/server/handlers/managed_memory.py).

The server keeps a descriptor of each object while the allocation lives: the
object's name is gone once opened, and a migration hands the object itself to
the next server, which maps the same bytes at the same address
(tally/server/migration_memory.py).
"""
from __future__ import annotations

import os
import threading


class ManagedObjects:
    def __init__(self):
        self._fds: dict[int, int] = {}          # allocation base -> descriptor of its object
        self._lock = threading.Lock()

    def add(self, base: int, fd: int) -> None:
        """The allocation at `base` lives in the object `fd`, which this table now owns."""
        with self._lock:
            old = self._fds.pop(base, None)
            self._fds[base] = fd
        if old is not None:
            os.close(old)

    def discard(self, base: int) -> None:
        with self._lock:
            fd = self._fds.pop(base, None)
        if fd is not None:
            os.close(fd)

    def fd(self, base: int) -> int:
        return self._fds[base]

    def bases(self) -> list[int]:
        with self._lock:
            return sorted(self._fds)

    def clear(self) -> None:
        with self._lock:
            fds, self._fds = list(self._fds.values()), {}
        for fd in fds:
            os.close(fd)

    def __contains__(self, base: int) -> bool:
        return base in self._fds

    def __len__(self) -> int:
        return len(self._fds)


class OwnedDescriptor:
    """A descriptor until someone takes it: closed when dropped untaken (an allocation
    that failed, or whose wait for memory was cancelled with its job)."""

    def __init__(self, fd: int):
        self._fd: int | None = fd

    @property
    def fd(self) -> int:
        assert self._fd is not None, "the descriptor was taken"
        return self._fd

    def take(self) -> int:
        fd, self._fd = self.fd, None
        return fd

    def close(self) -> None:
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    __del__ = close
