"""The cuda backend's virtual memory management (a mixin of CudaBackend): the
driver's own cuMemAddressReserve/Create/Map/SetAccess on the server's context,
for jobs' cuMem* calls and for the reservations that --suspendable backs
allocations with (cuda_restore.py). After a context fault the releases do
nothing: what they would release went with the context.
"""
from __future__ import annotations

from cuda.bindings import driver as cu


class CudaVirtualMemory:
    """Uses CudaBackend's `_current`, `_check`, `_lost` and `_device`."""

    def _location(self):
        location = cu.CUmemLocation()
        location.type = cu.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        location.id = int(self._device)
        return location

    def vmm_reserve(self, nbytes: int, alignment: int, hint: int = 0) -> int:
        self._current()
        return int(self._check(cu.cuMemAddressReserve(nbytes, alignment, hint, 0)))

    def vmm_free(self, ptr: int, nbytes: int) -> None:
        if self._lost:
            return
        self._current()
        self._check(cu.cuMemAddressFree(ptr, nbytes))

    def vmm_create(self, nbytes: int) -> object:
        self._current()
        prop = cu.CUmemAllocationProp()
        prop.type = cu.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location = self._location()
        return self._check(cu.cuMemCreate(nbytes, prop, 0))

    def vmm_release(self, handle: object) -> None:
        if self._lost:
            return
        self._current()
        self._check(cu.cuMemRelease(handle))

    def vmm_map(self, ptr: int, nbytes: int, offset: int, handle: object) -> None:
        self._current()
        self._check(cu.cuMemMap(ptr, nbytes, offset, handle, 0))

    def vmm_unmap(self, ptr: int, nbytes: int) -> None:
        if self._lost:
            return
        self._current()
        self._check(cu.cuMemUnmap(ptr, nbytes))

    def vmm_set_access(self, ptr: int, nbytes: int, accessible: bool) -> None:
        self._current()
        access = cu.CUmemAccessDesc()
        access.location = self._location()
        access.flags = (cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE if accessible
                        else cu.CUmemAccess_flags.CU_MEM_ACCESS_FLAGS_PROT_NONE)
        self._check(cu.cuMemSetAccess(ptr, nbytes, [access], 1))
