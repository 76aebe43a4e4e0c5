"""Which virtual memory a client owns (cuMemAddressReserve, cuMemCreate, cuMemMap,
cuMemSetAccess): its reservations, its physical handles (counted against its
quota, as allocations are; or another job's memory it imported, counted there)
and the mappings between them. For the ownership
checks of copies and memsets, its memory is the accessible mapped bytes of its
reservations. The driver calls are in tally/server/handlers/virtual_memory.py.
"""
from __future__ import annotations

import bisect
import threading
from dataclasses import dataclass

from tally.backends.base import VMM_GRANULARITY
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError

# How much device address space one job may reserve, in multiples of device memory.
RESERVE_LIMIT_FACTOR = 4


@dataclass
class Mapping:
    size: int
    handle: int                 # the client's handle
    accessible: bool = False
    offset: int = 0             # where in the handle's memory it starts


class VirtualMemory:
    """One client's reservations, physical handles and mappings."""

    def __init__(self, backend, allocations, total_memory: int, shares=None, client_id: int = 0):
        self.backend = backend
        self.allocations = allocations          # the client's Allocations: physical handles count there
        self.total_memory = total_memory
        self.shares = shares                    # PhysicalShares: memory shared with other jobs (or None)
        self.client_id = client_id
        self.lock = threading.Lock()
        self.reservations: dict[int, int] = {}      # base -> bytes
        self.handles: dict[int, tuple[object, int]] = {}   # client handle -> (backend handle, bytes)
        self.imported: set[int] = set()             # handles on another job's memory (not charged here)
        self.refs: dict[int, int] = {}              # handles retained more than once -> references
        # Released by the client while still mapped: CUDA frees such memory at its
        # last unmap, and so does the quota.
        self.released_mapped: dict[int, tuple[object, int]] = {}
        self.mappings: dict[int, Mapping] = {}      # address -> mapping
        self._starts: list[int] = []                # sorted mapping addresses
        self._next_handle = 1

    # ---- ownership ---------------------------------------------------------------------
    def contains(self, ptr: int, nbytes: int) -> bool:
        """[ptr, ptr+nbytes) lies in accessible mappings that follow one another."""
        with self.lock:
            i = bisect.bisect_right(self._starts, ptr) - 1
            end = ptr + max(nbytes, 1)
            while 0 <= i < len(self._starts):
                start = self._starts[i]
                m = self.mappings[start]
                if not m.accessible or ptr >= start + m.size:
                    return False
                if end <= start + m.size:
                    return True
                ptr = start + m.size
                i += 1
                if i < len(self._starts) and self._starts[i] != ptr:
                    return False
            return False

    def _reservation_of(self, ptr: int, nbytes: int) -> int:
        for base, size in self.reservations.items():
            if base <= ptr and ptr + nbytes <= base + size:
                return base
        raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                          f"0x{ptr:x}+{nbytes} is not inside an address range this client reserved")

    def whole_mappings(self, ptr: int, nbytes: int) -> list[int]:
        """The mappings exactly covering [ptr, ptr+nbytes); INVALID_VALUE otherwise."""
        with self.lock:
            return self._whole_mappings(ptr, nbytes)

    def _whole_mappings(self, ptr: int, nbytes: int) -> list[int]:
        covered, out = ptr, []
        i = bisect.bisect_left(self._starts, ptr)
        while covered < ptr + nbytes and i < len(self._starts) and self._starts[i] == covered:
            out.append(covered)
            covered += self.mappings[covered].size
            i += 1
        if not out or covered != ptr + nbytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"0x{ptr:x}+{nbytes} is not a run of whole mappings of this client")
        return out

    # ---- operations --------------------------------------------------------------------
    def reserve(self, nbytes: int, alignment: int, hint: int = 0) -> int:
        _check_granular("reservation size", nbytes)
        if alignment and (alignment & (alignment - 1)):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"alignment {alignment} is not a power of two")
        # Address space is shared by every job: one must not reserve it all (the
        # fuzz test did, with 2**40 bytes). PyTorch reserves ~1.125x device memory
        # per stream it allocates on, so a few times device memory is plenty.
        limit = RESERVE_LIMIT_FACTOR * self.total_memory
        with self.lock:
            reserved = sum(self.reservations.values())
        if reserved + nbytes > limit:
            raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY,
                              f"reserving {nbytes} bytes would give this job {reserved + nbytes} bytes of device "
                              f"address space; the limit is {RESERVE_LIMIT_FACTOR}x device memory ({limit} bytes)")
        base = self.backend.vmm_reserve(nbytes, max(alignment, VMM_GRANULARITY), hint)
        with self.lock:
            self.reservations[base] = nbytes
        return base

    def create(self, nbytes: int) -> int:
        _check_granular("physical allocation size", nbytes)
        with self.allocations.charging(nbytes):
            backend_handle = self.backend.vmm_create(nbytes)
        with self.lock:
            handle = self._next_handle
            self._next_handle += 1
            self.handles[handle] = (backend_handle, nbytes)
        return handle

    def release(self, handle: int) -> None:
        with self.lock:
            if self.refs.get(handle, 1) > 1 and handle in self.handles:
                self.refs[handle] -= 1          # retained (cuMemRetainAllocationHandle): one release each
                return
            self.refs.pop(handle, None)
            found = self.handles.pop(handle, None)
            if found is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{handle} is not a physical handle of this client")
            if any(m.handle == handle for m in self.mappings.values()):
                self.released_mapped[handle] = found
                return
        self._give_back(handle, found)

    def _give_back(self, handle: int, found: tuple[object, int]) -> None:
        """The handle is released and unmapped: its memory goes unless another job holds it."""
        with self.lock:
            imported = handle in self.imported
            self.imported.discard(handle)
        if self.shares is None or self.shares.drop(self.client_id, found[0]):
            self.backend.vmm_release(found[0])
        if not imported:
            self.allocations.uncharge(found[1])

    # ---- shared with other jobs (tally/server/physical_shares.py) ------------------------------
    def export(self, handle: int) -> tuple[int, int]:
        with self.lock:
            found = self.handles.get(handle)
            if found is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{handle} is not a physical handle of this client")
            if handle in self.imported:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"handle {handle} is another job's memory: only its owner exports it")
        return self.shares.export(self.client_id, found[0], found[1])

    def adopt(self, export_id: int, secret: int) -> int:
        """Another job's exported physical memory as a handle of this client."""
        backend_handle, nbytes = self.shares.open(self.client_id, export_id, secret)
        with self.lock:
            handle = self._next_handle
            self._next_handle += 1
            self.handles[handle] = (backend_handle, nbytes)
            self.imported.add(handle)
        return handle

    def retain(self, ptr: int) -> int:
        """cuMemRetainAllocationHandle: the handle mapped at `ptr`, with one more reference."""
        with self.lock:
            start = self._mapping_at(ptr)
            handle = self.mappings[start].handle
            if handle in self.handles:
                self.refs[handle] = self.refs.get(handle, 1) + 1
            else:                                   # released while mapped: the handle is live again
                self.handles[handle] = self.released_mapped.pop(handle)
            return handle

    def accessible(self, ptr: int) -> bool:
        """cuMemGetAccess: whether the mapping at `ptr` is readable and writable."""
        with self.lock:
            return self.mappings[self._mapping_at(ptr)].accessible

    def _mapping_at(self, ptr: int) -> int:
        i = bisect.bisect_right(self._starts, ptr) - 1
        if i < 0 or ptr >= self._starts[i] + self.mappings[self._starts[i]].size:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not mapped memory of this client")
        return self._starts[i]

    def map(self, ptr: int, nbytes: int, offset: int, handle: int) -> None:
        _check_granular("mapping size", nbytes)
        _check_granular("mapping offset", offset, zero_ok=True)
        with self.lock:
            found = self.handles.get(handle)
            if found is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{handle} is not a physical handle of this client")
            self._reservation_of(ptr, nbytes)
            i = bisect.bisect_left(self._starts, ptr)
            if (i < len(self._starts) and self._starts[i] < ptr + nbytes) or \
                    (i > 0 and self._starts[i - 1] + self.mappings[self._starts[i - 1]].size > ptr):
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x}+{nbytes} is already mapped")
            self.backend.vmm_map(ptr, nbytes, offset, found[0])
            bisect.insort(self._starts, ptr)
            self.mappings[ptr] = Mapping(nbytes, handle, offset=offset)

    def set_access(self, ptr: int, nbytes: int, accessible: bool) -> None:
        with self.lock:
            starts = self._whole_mappings(ptr, nbytes)
            self.backend.vmm_set_access(ptr, nbytes, accessible)
            for start in starts:
                self.mappings[start].accessible = accessible

    def unmap(self, ptr: int, nbytes: int) -> None:
        """Call once the client's work that may use the range is done."""
        with self.lock:
            starts = self._whole_mappings(ptr, nbytes)
            handles = {self.mappings[start].handle for start in starts}
            for start in starts:
                del self.mappings[start]
                self._starts.remove(start)
            unused = [(h, self.released_mapped.pop(h)) for h in handles
                      if h in self.released_mapped and not any(m.handle == h for m in self.mappings.values())]
        self.backend.vmm_unmap(ptr, nbytes)
        for handle, found in unused:
            self._give_back(handle, found)

    def free(self, ptr: int, nbytes: int) -> None:
        """Frees a reservation, unmapping what is still mapped in it."""
        with self.lock:
            if self.reservations.get(ptr) != nbytes:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"0x{ptr:x}+{nbytes} is not an address range this client reserved")
            inside = [s for s in self._starts if ptr <= s < ptr + nbytes]
        for start in inside:
            self.unmap(start, self.mappings[start].size)
        with self.lock:
            del self.reservations[ptr]
        self.backend.vmm_free(ptr, nbytes)

    # ---- a migrating job's, made again as it was (tally/server/migration_memory.py) --------
    def describe(self) -> tuple[dict, list, list]:
        """(reservations, [(handle, backend handle, bytes, released)], [(address, Mapping)])."""
        with self.lock:
            physical = [(h, bh, n, False) for h, (bh, n) in self.handles.items()]
            physical += [(h, bh, n, True) for h, (bh, n) in self.released_mapped.items()]
            return dict(self.reservations), physical, sorted(self.mappings.items())

    def reserve_at(self, base: int, nbytes: int) -> None:
        self.backend.vmm_reserve_at(base, nbytes)
        with self.lock:
            self.reservations[base] = nbytes

    def create_as(self, handle: int, nbytes: int, released: bool) -> object:
        """Physical memory under the handle the job knows; its backend handle."""
        with self.allocations.charging(nbytes):
            backend_handle = self.backend.vmm_create(nbytes)
        with self.lock:
            (self.released_mapped if released else self.handles)[handle] = (backend_handle, nbytes)
            self._next_handle = max(self._next_handle, handle + 1)
        return backend_handle

    def map_as(self, ptr: int, mapping: Mapping) -> None:
        with self.lock:
            found = self.handles.get(mapping.handle) or self.released_mapped.get(mapping.handle)
            if found is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{mapping.handle} is not a physical handle of this client")
            self.backend.vmm_map(ptr, mapping.size, mapping.offset, found[0])
            bisect.insort(self._starts, ptr)
            self.mappings[ptr] = mapping
            if mapping.accessible:
                self.backend.vmm_set_access(ptr, mapping.size, True)

    def forget_physical(self) -> None:
        """A suspended client is gone: its mappings and physical memory are no longer
        on the device (tally/server/suspend.py); forget them and give back their count."""
        with self.lock:
            found = list(self.handles.values()) + list(self.released_mapped.values())
            self.handles.clear()
            self.released_mapped.clear()
            self.mappings.clear()
            self._starts.clear()
        for _backend_handle, nbytes in found:
            self.allocations.uncharge(nbytes)

    def clear(self) -> None:
        """The client is gone (and its work finished): give everything back."""
        for base, size in list(self.reservations.items()):
            self.free(base, size)
        with self.lock:
            self.refs.clear()    # every reference goes with the client
        for handle in list(self.handles):
            self.release(handle)
        with self.lock:          # released, and never mapped here (a migration broken off midway)
            left = list(self.released_mapped.items())
            self.released_mapped.clear()
        for handle, found in left:
            self._give_back(handle, found)


def _check_granular(what: str, value: int, zero_ok: bool = False) -> None:
    if value % VMM_GRANULARITY or (value == 0 and not zero_ok):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{what} {value} is not a {'' if zero_ok else 'positive '}"
                                                    f"multiple of the granularity, {VMM_GRANULARITY} bytes")
