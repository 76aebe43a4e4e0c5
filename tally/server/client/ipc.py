"""Other jobs' allocations this job opened (cuIpcOpenMemHandle): its memory for
the ownership checks of copies and memsets, closed for it when it goes. The
exports themselves are server-wide (tally/server/ipc_registry.py)."""
from __future__ import annotations


class OpenedAllocations:
    def __init__(self, registry, client_id: int, backend):
        self._registry = registry
        self._client_id = client_id
        self._backend = backend
        self._opened: dict[int, int] = {}     # base -> bytes

    def open(self, export_id: int, secret: int) -> tuple[int, int]:
        base, size = self._registry.open_memory(self._client_id, export_id, secret)
        self._opened[base] = size
        return base, size

    def close(self, base: int) -> bool:
        """One cuIpcCloseMemHandle; True when the device memory is now to be freed
        (its owner freed it and nobody else has it open)."""
        free_now = self._registry.close_memory(self._client_id, base)
        if not any(b == base for b, _ in self._registry.opened_by(self._client_id)):
            self._opened.pop(base, None)
        return free_now

    def contains(self, ptr: int, nbytes: int) -> bool:
        return any(base <= ptr and ptr + nbytes <= base + size for base, size in self._opened.items())

    def clear(self) -> None:
        """The job is gone and its work finished: close everything it still has open."""
        for base, times in self._registry.opened_by(self._client_id):
            for _ in range(times):
                if self._registry.close_memory(self._client_id, base):
                    self._backend.mem_free(base)
        self._opened.clear()
