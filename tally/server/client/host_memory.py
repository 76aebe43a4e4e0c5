"""Pinned host memory: the client's POSIX shared-memory objects, mapped here too
(managed memory opens its objects here too: managed_memory.py).

cuMemHostAlloc/cuMemAllocHost/cuMemHostRegister in the client put the memory in
a shared-memory object (mode 0600) named /tally-pin-<client pid>-<n>; the server
maps it and asynchronous copies read or write it in place, in stream order,
with no staging copy. The server removes the name as soon as it has mapped the
object, so nothing is left in /dev/shm whatever way the client ends; the
mapping goes when the last copy using it is done and the region is forgotten.
The server keeps a descriptor of the object while the region lives: a migration
hands the object itself to the next server, which maps the same bytes and
registers them under the same region id (tally/server/migration_memory.py).
"""
from __future__ import annotations

import mmap
import os
import re
import stat
import threading
from dataclasses import dataclass

from tally.protocol.errors import CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE, DeviceError

SHM_DIR = "/dev/shm"


@dataclass(eq=False)
class PinnedRegion:
    region_id: int
    name: str
    size: int
    view: memoryview     # of the mapping; slices of it are what the backend reads and writes
    device_address: int | None = None   # where kernels reach it (the job's address), if they can
    fd: int = -1         # the object's, kept for a migration; closed with the region
    job_address: int = 0     # where the job mapped it (0: not said)

    def span(self, offset: int, nbytes: int, what: str) -> memoryview:
        if offset < 0 or nbytes < 0 or offset + nbytes > self.size:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{what}: bytes {offset}..{offset + nbytes} lie outside pinned region "
                              f"{self.region_id} ({self.size} bytes)")
        return self.view[offset:offset + nbytes]


class PinnedRegions:
    """A client's pinned regions, each registered with the backend while it lives
    (backends/base.py: host_register)."""

    def __init__(self, client_pid: int, backend):
        self._backend = backend
        self._name_re = re.compile(rf"/tally-pin-{client_pid}-[0-9]+")
        self._regions: dict[int, PinnedRegion] = {}
        self._next_id = 1
        self._lock = threading.Lock()

    def open_object(self, name: str, size: int) -> int:
        """A descriptor of the client's shared-memory object `name`, checked (this
        client's, mode 0600, at least `size` bytes); the name is removed."""
        if not self._name_re.fullmatch(name):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"shared memory object {name!r} is not this client's "
                              f"(expected {self._name_re.pattern})")
        if size <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot map {size} bytes")
        path = SHM_DIR + name
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        except OSError as e:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot open shared memory object {name}: {e}") from None
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"shared memory object {name} must be a mode-0600 object of uid {os.getuid()}")
            if info.st_size < size:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"shared memory object {name} holds {info.st_size} bytes, not {size}")
        except BaseException:
            os.close(fd)
            raise
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return fd

    def register(self, name: str, size: int, address: int = 0) -> PinnedRegion:
        """`address`: where the job mapped it; kernels may use that address too where the
        backend can make it reachable (unified addressing: a pinned pointer is a device
        pointer in CUDA)."""
        return self.adopt(self.open_object(name, size), name, size, address)

    def adopt(self, fd: int, name: str, size: int, address: int = 0, region_id: int | None = None) -> PinnedRegion:
        """Register the object `fd` (owned by the region from now on, closed if this fails);
        `region_id`: the id a migrated job knows it by (None: the next one)."""
        try:
            mapping = mmap.mmap(fd, size, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
            reachable = bool(address) and self._backend.host_map(address, size, fd)
            view = memoryview(mapping)
            try:
                self._backend.host_register(view)
            except BaseException:
                if reachable:
                    self._backend.host_unmap(address)
                raise
        except BaseException:
            os.close(fd)
            raise
        with self._lock:
            if region_id is None:
                region_id = self._next_id
            elif region_id in self._regions:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"pinned region {region_id} exists already")
            self._next_id = max(self._next_id, region_id + 1)
            region = PinnedRegion(region_id, name, size, view, address if reachable else None, fd, address)
            self._regions[region.region_id] = region
        return region

    def all(self) -> list[PinnedRegion]:
        with self._lock:
            return list(self._regions.values())

    def reachable(self, address: int, nbytes: int) -> bool:
        """Whether [address, address+nbytes) lies in one region the device reaches at
        that address (a stream wait or write on pinned host memory)."""
        with self._lock:
            return any(r.device_address is not None and r.device_address <= address
                       and address + nbytes <= r.device_address + r.size for r in self._regions.values())

    def get(self, region_id: int) -> PinnedRegion:
        region = self._regions.get(region_id)
        if region is None:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"pinned region {region_id} is not registered")
        return region

    def unregister(self, region_id: int) -> None:
        """Call once no queued copy may still use the region (the handler drains first)."""
        with self._lock:
            region = self._regions.pop(region_id, None)
        if region is None:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"pinned region {region_id} is not registered")
        self._release(region)

    def clear(self) -> None:
        """Once the client's work is finished or stopped. Copies still queued keep their
        slices (and so the mapping) alive until they ran; closing the mmap here would
        fail while they exist."""
        with self._lock:
            regions, self._regions = list(self._regions.values()), {}
        for region in regions:
            self._release(region)

    def _release(self, region: PinnedRegion) -> None:
        try:
            self._backend.host_unregister(region.view)
            if region.device_address is not None:
                self._backend.host_unmap(region.device_address)
        finally:
            if region.fd >= 0:
                os.close(region.fd)
                region.fd = -1

    def holding(self, ptr: int, nbytes: int) -> PinnedRegion | None:
        """The region whose job address range holds [ptr, ptr+nbytes), if any: mapped
        pinned memory named by its device pointer (cuMemHostGetDevicePointer gives the
        host address, as unified addressing does)."""
        with self._lock:
            for region in self._regions.values():
                start = region.job_address
                if start and start <= ptr and ptr + nbytes <= start + region.size:
                    return region
        return None

    def __len__(self) -> int:
        return len(self._regions)
