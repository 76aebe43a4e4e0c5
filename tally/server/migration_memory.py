"""A migrating job's memory beyond its allocations and modules: virtual memory,
pinned host memory and managed memory (tally-server migrate; the rest of its
state: tally/server/migration.py and migration_import.py).

- Virtual memory (cuMemAddressReserve, cuMemCreate, cuMemMap, cuMemSetAccess)
  goes as allocations do: each reservation is made again at its address on the
  target, each piece of physical memory under the handle the job holds (its
  bytes streamed as an allocation's are, tally/server/migration_bytes.py, a
  released-but-mapped one included), then each mapping at its address and
  offset, with its access.
- Pinned host memory and managed memory are shared-memory objects of the job
  on this node, so nothing of their bytes is copied: the source passes each
  object's descriptor (SCM_RIGHTS, as it does the job's segment), and the
  target maps the same object, registers a pinned region under the id the job
  knows it by (and at the job's address, where kernels may reach it), and
  makes a managed allocation at the same address.

The target makes everything as it arrives and undoes it all unless the job's
session takes it over (ImportedMemory.install).
"""
from __future__ import annotations

import socket

from tally.server import lz4_chunks
from tally.server.client.host_memory import PinnedRegions
from tally.server.client.managed_objects import ManagedObjects, OwnedDescriptor
from tally.server.client.virtual_memory import Mapping, VirtualMemory
from tally.server.migration_bytes import ByteSender, send_piece


def device_bytes(client) -> int:
    """The job's physical memory (what the target must find room for, beside its allocations)."""
    return sum(n for _h, _bh, n, _released in client.vmm.describe()[1])


# ---- the source ----------------------------------------------------------------------

def send(client, sock, sender: ByteSender) -> None:
    """Send the job's virtual, pinned and managed memory on `sock` (the bytes of its
    physical memory through `sender`). The job's work is done."""
    reservations, physical, mappings = client.vmm.describe()
    for base, size in reservations.items():
        send_piece(sock, {"op": "vmm_reserve", "ptr": base, "size": size})
    for handle, backend_handle, size, released in physical:
        send_piece(sock, {"op": "vmm_create", "handle": handle, "size": size, "released": released})
        sender.send_physical(handle, backend_handle, size)
    for ptr, m in mappings:
        send_piece(sock, {"op": "vmm_map", "ptr": ptr, "size": m.size, "offset": m.offset, "handle": m.handle,
                     "accessible": m.accessible})
    for region in client.regions.all():
        send_piece(sock, {"op": "pinned", "id": region.region_id, "name": region.name, "size": region.size,
                     "address": region.job_address, "fds": 1})
        socket.send_fds(sock, [b"F"], [region.fd])
    for base in client.managed.bases():
        found = client.allocations.find(base)
        send_piece(sock, {"op": "managed", "ptr": base, "size": found[1], "fds": 1})
        socket.send_fds(sock, [b"F"], [client.managed.fd(base)])


# ---- the target ----------------------------------------------------------------------

class ImportedMemory:
    """A migrating job's virtual, pinned and managed memory, made here as it arrives."""

    OPS = frozenset({"vmm_reserve", "vmm_create", "vmm_bytes", "vmm_map", "pinned", "managed"})

    def __init__(self, backend, allocations, total_memory: int, pid: int):
        self.backend = backend
        self.allocations = allocations     # the import's: managed allocations are recorded there
        self.vmm = VirtualMemory(backend, allocations, total_memory)
        self.regions = PinnedRegions(pid, backend)
        self.managed = ManagedObjects()
        self._physical: dict[int, object] = {}     # the job's handle -> the backend's here

    def apply(self, piece: dict, fds: list[int]) -> None:
        """Make one piece; takes the descriptors it uses out of `fds`."""
        op = piece["op"]
        if op == "vmm_reserve":
            self.vmm.reserve_at(piece["ptr"], piece["size"])
        elif op == "vmm_create":
            self._physical[piece["handle"]] = self.vmm.create_as(piece["handle"], piece["size"], piece["released"])
        elif op == "vmm_bytes":
            data = lz4_chunks.decompress(piece["data"]) if piece["lz4"] else piece["data"]
            self.backend.vmm_write(self._physical[piece["handle"]], piece["offset"], memoryview(data))
        elif op == "vmm_map":
            self.vmm.map_as(piece["ptr"], Mapping(piece["size"], piece["handle"], piece["accessible"],
                                                  piece["offset"]))
        elif op == "pinned":
            self.regions.adopt(_take(fds, op), piece["name"], piece["size"], piece["address"], piece["id"])
        elif op == "managed":
            ptr, size, obj = piece["ptr"], piece["size"], OwnedDescriptor(_take(fds, op))
            with self.allocations.charging(size):
                self.backend.managed_alloc(ptr, size, obj.fd)
                self.allocations.add(ptr, size)
            self.managed.add(ptr, obj.take())
        else:
            raise KeyError(op)

    def undo(self) -> None:
        """Before the import's allocations are freed (its managed ones among them)."""
        self.regions.clear()
        self.vmm.clear()
        self.managed.clear()

    def install(self, client) -> None:
        """The job's session owns all of it from now on."""
        self.vmm.allocations = client.allocations
        client.vmm = self.vmm
        client.regions = self.regions
        client.managed = self.managed


def _take(fds: list[int], op: str) -> int:
    if not fds:
        raise ValueError(f"a {op} piece came without the job's shared-memory object")
    return fds.pop()
