"""The cuda backend's AddressRestore (tally/backends/base.py), for suspending jobs
on a GPU: with `CudaBackend(restorable=True)` (`tally-server --suspendable`)
every job allocation is a virtual-memory reservation with physical memory
mapped into it (cuMemAddressReserve + cuMemCreate + cuMemMap + cuMemSetAccess,
what cuMemAlloc does inside the driver), rounded up to the 2 MiB granularity.
Evicting one unmaps and releases its physical memory and keeps the reservation,
so a restore maps new physical memory at the very same address: the job's raw
pointers stay valid. A driver's cuMemAddressReserve takes an address only as a
hint, which is why the reservation is kept rather than asked for again.

Module variables live in such reservations too (cuda_globals.py: modules are
loaded in a relocated form whose variables the backend places), so they are
evicted and restored like allocations, except a "pinned" module's (cubin-only
with variables, or refused by the relocation pass), which stay resident.

Migration: a job's allocations and module variables get reservations at the
addresses they had on the source (cuMemAddressReserve's address hint, checked:
a driver treats it as a hint, and the reservation is refused when it lands
elsewhere). Both servers map at the 2 MiB granularity, so a job from another
cuda-backend server fits; one whose memory the source placed otherwise (the
emulator's) is refused with the address that does not.
"""
from __future__ import annotations

import numpy as np
from cuda.bindings import driver as cu

from tally.backends.base import VMM_GRANULARITY, vmm_granular
from tally.backends.cuda_globals import CudaRelocatedGlobals
from tally.protocol.errors import (CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED,
                                   DeviceError)


class CudaAddressRestore(CudaRelocatedGlobals):
    """Mixed into CudaBackend; uses its vmm_* methods, `_current` and `_check`."""

    def _init_restore(self, restorable: bool) -> None:
        self._restorable = restorable
        self._backed: dict[int, list] = {}    # allocation -> [reserved bytes, physical handle or None (evicted)]

    def _backed_alloc(self, nbytes: int) -> int:
        size = vmm_granular(nbytes)
        ptr = self.vmm_reserve(size, VMM_GRANULARITY)
        self._back_reservation(ptr, size)
        return ptr

    def _backed_alloc_at(self, ptr: int, size: int) -> None:
        """A reservation of `size` bytes at exactly `ptr`, backed (a migrated job's memory)."""
        if ptr % VMM_GRANULARITY or size % VMM_GRANULARITY:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"0x{ptr:x}+{size} is not on the {VMM_GRANULARITY >> 20} MiB granularity the cuda "
                              f"backend maps memory at (the job comes from a server that places memory otherwise)")
        self.vmm_reserve_at(ptr, size)
        self._back_reservation(ptr, size)

    def _back_reservation(self, ptr: int, size: int) -> None:
        """Backs a fresh reservation and records it; a reservation that cannot be backed is released."""
        try:
            handle = self._back(ptr, size)
        except DeviceError:
            self.vmm_free(ptr, size)
            raise
        self._backed[ptr] = [size, handle]

    def _back(self, ptr: int, size: int) -> object:
        """New physical memory mapped, accessible, at [ptr, ptr + size)."""
        handle = self.vmm_create(size)
        try:
            self.vmm_map(ptr, size, 0, handle)
            try:
                self.vmm_set_access(ptr, size, True)
            except DeviceError:
                self.vmm_unmap(ptr, size)
                raise
        except DeviceError:
            self.vmm_release(handle)
            raise
        return handle

    def _backed_free(self, ptr: int) -> bool:
        """Free an allocation made here (evicted or not); False if it is not one."""
        entry = self._backed.pop(ptr, None)
        if entry is None:
            return False
        size, handle = entry
        if handle is not None:
            self.vmm_unmap(ptr, size)
            self.vmm_release(handle)
        self.vmm_free(ptr, size)
        return True

    # ---- AddressRestore ---------------------------------------------------------------------
    def mem_evict(self, ptr: int) -> None:
        entry = self._backed.get(ptr)
        if entry is None or entry[1] is None:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not a resident allocation this server "
                                                        f"backed with a reservation (tally-server --suspendable)")
        self.vmm_unmap(ptr, entry[0])
        self.vmm_release(entry[1])
        entry[1] = None

    def mem_alloc_at(self, ptr: int, nbytes: int) -> None:
        entry = self._backed.get(ptr)
        if entry is None:
            if not self._restorable:
                raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, "the cuda backend places memory at given addresses only "
                                                            "with tally-server --suspendable")
            self._backed_alloc_at(ptr, vmm_granular(nbytes))       # a migrated job's
            return
        if entry[1] is not None:
            raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"0x{ptr:x} is allocated already")
        entry[1] = self._back(ptr, entry[0])

    def mem_free_evicted(self, ptr: int) -> None:
        self._backed_free(ptr)

    def module_memory(self, module) -> dict[str, tuple[int, int]]:
        return dict(module.storage.variables) if module.storage is not None else {}

    def module_unmovable(self, module) -> str | None:
        return module.pinned

    def module_evict(self, module) -> None:
        if module.storage is not None:
            self._evict_storage(module.storage)

    def module_restore(self, module) -> None:
        if module.storage is not None:
            self._restore_storage(module.storage)

    def vmm_reserve_at(self, ptr: int, nbytes: int) -> None:
        """A reservation at the address a migrated job's pointers name (the hint, checked):
        its own (cuMemAddressReserve), or one backing its memory (_backed_alloc_at)."""
        got = self.vmm_reserve(nbytes, VMM_GRANULARITY, ptr)
        if got != ptr:
            self.vmm_free(got, nbytes)
            raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"device addresses [0x{ptr:x}, 0x{ptr + nbytes:x}) are "
                                                         f"taken in this server's address space")

    def vmm_read(self, handle: object, offset: int, dst: memoryview) -> None:
        self._through_mapping(handle, offset, len(dst), lambda ptr: self._check(
            cu.cuMemcpyDtoH(_host_address(dst), ptr, len(dst))))

    def vmm_write(self, handle: object, offset: int, src: memoryview) -> None:
        self._through_mapping(handle, offset, len(src), lambda ptr: self._check(
            cu.cuMemcpyHtoD(ptr, _host_address(src), len(src))))

    def _through_mapping(self, handle: object, offset: int, nbytes: int, copy) -> None:
        """Physical memory is reached only through a mapping: a scratch one for the copy."""
        if offset % VMM_GRANULARITY:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"offset {offset} is not a multiple of the granularity")
        size = vmm_granular(nbytes)
        ptr = self.vmm_reserve(size, VMM_GRANULARITY)
        try:
            self.vmm_map(ptr, size, offset, handle)
            try:
                self.vmm_set_access(ptr, size, True)
                self._current()
                copy(ptr)
            finally:
                self.vmm_unmap(ptr, size)
        finally:
            self.vmm_free(ptr, size)


def _host_address(view: memoryview) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else 0
