"""Physical memory of virtual memory management shared between jobs of one
server (cuMemExportToShareableHandle / cuMemImportFromShareableHandle): the
owner exports one of its physical handles, another job imports it by the export
id and a random secret (what the file descriptor carries) and maps it in its own
reservations; the device address space is one, so the backend handle is the
owner's.

The memory lives while any job holds it (a handle not yet released, or a
mapping): the last holder to let go has it released on the device. It counts
against the owner's quota until the owner lets go, as an IPC allocation does
(tally/server/ipc_registry.py).
"""
from __future__ import annotations

import itertools
import secrets
import threading
from collections import Counter
from dataclasses import dataclass, field

from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError


@dataclass
class PhysicalExport:
    owner: int
    backend_handle: object
    size: int
    secret: int
    holders: Counter = field(default_factory=Counter)    # client id -> its handles on this memory


class PhysicalShares:
    def __init__(self):
        self._lock = threading.Lock()
        self._ids = itertools.count(1)
        self._exports: dict[int, PhysicalExport] = {}

    def export(self, owner: int, backend_handle: object, size: int) -> tuple[int, int]:
        """(export id, secret) of the owner's physical memory; the same for each export of it."""
        with self._lock:
            for export_id, export in self._exports.items():
                if export.backend_handle is backend_handle:
                    return export_id, export.secret
            export_id = next(self._ids)
            export = self._exports[export_id] = PhysicalExport(owner, backend_handle, size, secrets.randbits(64))
            export.holders[owner] = 1
            return export_id, export.secret

    def open(self, importer: int, export_id: int, secret: int) -> tuple[object, int]:
        """One more holder: (backend handle, bytes)."""
        with self._lock:
            export = self._exports.get(export_id)
            if export is None or export.secret != secret:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "not a handle of live exported physical memory")
            if export.owner == importer:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, "a job cannot import physical memory it exported itself")
            export.holders[importer] += 1
            return export.backend_handle, export.size

    def drop(self, holder: int, backend_handle: object) -> bool:
        """One of `holder`'s handles on the memory let go of it (released and unmapped):
        True when nobody holds it now, and so it is to be released on the device (also
        for memory that was never exported)."""
        with self._lock:
            for export_id, export in self._exports.items():
                if export.backend_handle is backend_handle:
                    export.holders[holder] -= 1
                    if export.holders[holder] <= 0:
                        del export.holders[holder]
                    if export.holders:
                        return False
                    del self._exports[export_id]
                    return True
            return True

    def involves(self, client: int) -> bool:
        """Whether `client` holds exported physical memory, its own or another job's:
        it cannot leave the device or this server while that memory lives (another
        job may hold, or import, the same bytes)."""
        with self._lock:
            return any(client in e.holders for e in self._exports.values())
