"""Interprocess handles: a job exports one of its allocations or interprocess
events (cuIpcGetMemHandle, cuIpcGetEventHandle) and another job of the same
server opens it by the export id and a random secret (what the 64-byte CUDA
handle carries). All jobs share the server's device address space, so an opened
allocation has the same address as in its owner.

An allocation whose owner frees it (or goes) while other jobs have it open
stays on the device until the last of them closes it (or goes): a job never
loses memory it opened, and freed bytes are never handed to a third job while
someone may still write them. It stays counted against the owner's quota until
the owner frees it.
"""
from __future__ import annotations

import itertools
import secrets
import threading
from collections import Counter
from dataclasses import dataclass, field

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.server.physical_shares import PhysicalShares


@dataclass
class MemoryExport:
    owner: int
    base: int
    size: int
    secret: int
    importers: Counter = field(default_factory=Counter)   # client id -> times opened
    owner_freed: bool = False


@dataclass
class EventExport:
    owner: int
    event: object          # the owner's ExecutorEvent
    secret: int


class IpcRegistry:
    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._memory: dict[int, MemoryExport] = {}
        self._memory_by_owner: dict[tuple[int, int], int] = {}     # (owner, base) -> export id
        self._events: dict[int, EventExport] = {}
        self.physical = PhysicalShares()     # virtual memory's physical handles shared between jobs

    # ---- memory ------------------------------------------------------------------------
    def export_memory(self, owner: int, base: int, size: int) -> tuple[int, int]:
        with self._lock:
            export_id = self._memory_by_owner.get((owner, base))
            if export_id is None:
                export_id = next(self._ids)
                self._memory[export_id] = MemoryExport(owner, base, size, secrets.randbits(64))
                self._memory_by_owner[(owner, base)] = export_id
            return export_id, self._memory[export_id].secret

    def open_memory(self, importer: int, export_id: int, secret: int) -> tuple[int, int]:
        with self._lock:
            export = self._memory.get(export_id)
            if export is None or export.secret != secret or export.owner_freed:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "not a handle of a live exported allocation")
            if export.owner == importer:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a job cannot open a handle it exported itself")
            export.importers[importer] += 1
            return export.base, export.size

    def close_memory(self, importer: int, base: int) -> bool:
        """One close by `importer` of the allocation at `base`; True when the
        device memory is now to be freed (its owner freed it and nobody has it
        open). INVALID_VALUE when the importer has nothing open there."""
        with self._lock:
            for export_id, export in self._memory.items():
                if export.base == base and export.importers[importer] > 0:
                    export.importers[importer] -= 1
                    if export.importers[importer] == 0:
                        del export.importers[importer]
                    if export.owner_freed and not export.importers:
                        del self._memory[export_id]
                        return True
                    return False
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{base:x} is not an allocation this job opened")

    def opened_by(self, importer: int) -> list[tuple[int, int]]:
        """(base, times) of everything `importer` has open."""
        with self._lock:
            return [(e.base, e.importers[importer]) for e in self._memory.values() if e.importers[importer] > 0]

    def opened_exports_of(self, owner: int) -> list[int]:
        """Bases of `owner`'s allocations that another job has open now."""
        with self._lock:
            return [base for (o, base), export_id in self._memory_by_owner.items()
                    if o == owner and any(n > 0 for n in self._memory[export_id].importers.values())]

    def owner_frees(self, owner: int, base: int) -> bool:
        """The owner frees (or leaves) the allocation at `base`: True when the
        device memory may be freed now, False when jobs that opened it keep it."""
        with self._lock:
            export_id = self._memory_by_owner.pop((owner, base), None)
            if export_id is None:
                return True
            export = self._memory[export_id]
            if export.importers:
                export.owner_freed = True
                return False
            del self._memory[export_id]
            return True

    # ---- events ------------------------------------------------------------------------
    def export_event(self, owner: int, event) -> tuple[int, int]:
        with self._lock:
            for export_id, export in self._events.items():
                if export.event is event:
                    return export_id, export.secret
            export_id = next(self._ids)
            self._events[export_id] = EventExport(owner, event, secrets.randbits(64))
            event.shared = True
            return export_id, self._events[export_id].secret

    def open_event(self, importer: int, export_id: int, secret: int):
        with self._lock:
            export = self._events.get(export_id)
            if export is None or export.secret != secret or export.event.destroyed:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "not a handle of a live interprocess event")
            if export.owner == importer:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a job cannot open an event handle it exported itself")
            return export.event

    def forget_events_of(self, owner: int) -> None:
        with self._lock:
            for export_id in [i for i, e in self._events.items() if e.owner == owner]:
                del self._events[export_id]
