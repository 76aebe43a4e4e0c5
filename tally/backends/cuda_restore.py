"""The cuda backend's AddressRestore (tally/backends/base.py), for suspending jobs
on a GPU: with `CudaBackend(restorable=True)` (`tally-server --suspendable`)
every job allocation is a virtual-memory reservation with physical memory
mapped into it (cuMemAddressReserve + cuMemCreate + cuMemMap + cuMemSetAccess,
what cuMemAlloc does inside the driver), rounded up to the 2 MiB granularity.
Evicting one unmaps and releases its physical memory and keeps the reservation,
so a restore maps new physical memory at the very same address: the job's raw
pointers stay valid. A driver's cuMemAddressReserve takes an address only as a
hint, which is why the reservation is kept rather than asked for again.

What cannot leave the device this way: module globals (the driver places them
when it loads the module, and a reload would put them elsewhere), so they stay
resident while a job is suspended, and a module cannot be loaded at given
addresses, so a job does not migrate to a cuda-backend server.
"""
from __future__ import annotations

import numpy as np
from cuda.bindings import driver as cu

from tally.backends.base import VMM_GRANULARITY, ModuleSource
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_NOT_SUPPORTED, DeviceError


def _granular(nbytes: int) -> int:
    return -(-nbytes // VMM_GRANULARITY) * VMM_GRANULARITY


class CudaAddressRestore:
    """Mixed into CudaBackend; uses its vmm_* methods, `_current` and `_check`."""

    def _init_restore(self, restorable: bool) -> None:
        self._restorable = restorable
        self._backed: dict[int, list] = {}    # allocation -> [reserved bytes, physical handle or None (evicted)]

    def _backed_alloc(self, nbytes: int) -> int:
        size = _granular(nbytes)
        ptr = self.vmm_reserve(size, VMM_GRANULARITY)
        try:
            handle = self._back(ptr, size)
        except DeviceError:
            self.vmm_free(ptr, size)
            raise
        self._backed[ptr] = [size, handle]
        return ptr

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
        if entry is None or entry[1] is not None:
            raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, f"the cuda backend restores only allocations it evicted "
                                                        f"(their reservation is kept); 0x{ptr:x} is not one")
        entry[1] = self._back(ptr, entry[0])

    def mem_free_evicted(self, ptr: int) -> None:
        self._backed_free(ptr)

    def module_memory(self, module) -> dict[str, tuple[int, int]]:
        return {}        # globals stay resident: see the module docstring

    def module_evict(self, module) -> None:
        pass

    def module_restore(self, module) -> None:
        pass

    def vmm_reserve_at(self, ptr: int, nbytes: int) -> None:
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, "the cuda backend takes no migrated jobs (see module_load_at)")

    def module_load_at(self, source: ModuleSource, addresses: dict[str, int]):
        raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, "the cuda backend cannot load a module with its globals at "
                                                    "given addresses, so jobs do not migrate to it")

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
        size = _granular(nbytes)
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
