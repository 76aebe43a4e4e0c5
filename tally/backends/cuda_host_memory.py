"""The cuda backend's host memory the device reaches (a mixin of CudaBackend).

Pinned memory is registered with the driver so copies from and to it go by DMA
without staging. Managed memory, and pinned memory a job's kernels read at the
job's own address, are the job's shared-memory objects mapped at that same
address in the server and registered for the device there.

After a context fault nothing reaches the driver: releases are queued on
`_after_reset` and done once a fresh context exists (an address freed at once
could come back and be refused as registered where the driver kept the old
registration).
"""
from __future__ import annotations

import ctypes

import numpy as np
from cuda.bindings import driver as cu

from tally.protocol.errors import (CUDA_ERROR_ALREADY_MAPPED, CUDA_ERROR_NOT_SUPPORTED, CUDA_ERROR_OUT_OF_MEMORY,
                                   DeviceError)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.mmap.restype = ctypes.c_void_p
_libc.mmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long)
_libc.munmap.argtypes = (ctypes.c_void_p, ctypes.c_size_t)
_PROT_READ_WRITE = 0x3
_MAP_SHARED = 0x01
_MAP_FIXED_NOREPLACE = 0x100000
_MAP_FAILED = ctypes.c_void_p(-1).value
_PAGE = 4096


def host_address(view: memoryview) -> int:
    return np.frombuffer(view, dtype=np.uint8).ctypes.data if len(view) else 0


class CudaHostMemory:
    """Uses CudaBackend's `_current`, `_check`, `_lost` and `_after_reset`."""

    def _init_host_memory(self) -> None:
        self._managed: dict[int, int] = {}     # managed memory: address -> bytes mapped
        self._host_mapped: dict[int, int] = {} # pinned memory kernels reach at the job's address

    def _unmap_registered(self, address: int, size: int) -> None:
        """Undo _map_at: the registration and the server's mapping (managed memory's
        mem_free, host_unmap)."""
        if self._lost:
            self._after_reset.append(lambda: self._unregister_late(address, size))
            return
        self._current()
        try:
            self._check(cu.cuMemHostUnregister(address))
        finally:
            _libc.munmap(address, size)

    # pinned host memory: registered, so the driver copies it by DMA without staging (an
    # unregistered buffer is pageable to it: an "async" copy would hold up the thread)
    def host_register(self, view: memoryview) -> None:
        self._current()
        if len(view):
            self._check(cu.cuMemHostRegister(host_address(view), len(view), cu.CU_MEMHOSTREGISTER_PORTABLE))

    def host_unregister(self, view: memoryview) -> None:
        if self._lost:
            if len(view):           # the closure keeps the memory mapped until then
                self._after_reset.append(lambda: self._unregister_late(host_address(view)))
            return
        self._current()
        if len(view):
            self._check(cu.cuMemHostUnregister(host_address(view)))

    # managed memory: the job's shared-memory object is mapped at the job's address in the
    # server too and registered with the driver, which (where the device can use host
    # pointers for registered memory, as on Linux x86-64 since Pascal) gives kernels that
    # same address. The bytes live in host memory and kernels reach them over the bus:
    # coherent, never migrated. Not yet run on a GPU.
    def managed_alloc(self, address: int, nbytes: int, fd: int) -> None:
        self._managed[address] = self._map_at(address, nbytes, fd, "managed memory")

    # pinned memory kernels read at the job's address: mapped and registered the same way
    def host_map(self, address: int, nbytes: int, fd: int) -> bool:
        try:
            self._host_mapped[address] = self._map_at(address, nbytes, fd, "mapped pinned memory")
        except DeviceError:
            return False
        return True

    def host_unmap(self, address: int) -> None:
        size = self._host_mapped.pop(address, None)
        if size is not None:
            self._unmap_registered(address, size)

    def _map_at(self, address: int, nbytes: int, fd: int, what: str) -> int:
        """Maps `fd` at `address` here and registers it for the device at that same
        address; the bytes mapped."""
        self._current()
        size = -(-nbytes // _PAGE) * _PAGE
        got = _libc.mmap(address, size, _PROT_READ_WRITE, _MAP_SHARED | _MAP_FIXED_NOREPLACE, fd, 0)
        if got in (None, _MAP_FAILED) or got != address:
            if got not in (None, _MAP_FAILED):
                _libc.munmap(got, size)     # a kernel without MAP_FIXED_NOREPLACE took it as a hint
            if ctypes.get_errno() == 12:    # ENOMEM
                raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"cannot map {size} bytes of {what}")
            raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"0x{address:x} is taken in the server's address space")
        try:
            flags = cu.CU_MEMHOSTREGISTER_PORTABLE | cu.CU_MEMHOSTREGISTER_DEVICEMAP
            self._check(cu.cuMemHostRegister(address, size, flags))
            device_pointer = int(self._check(cu.cuMemHostGetDevicePointer(address, 0)))
            if device_pointer != address:
                self._check(cu.cuMemHostUnregister(address))
                raise DeviceError(CUDA_ERROR_NOT_SUPPORTED, "this device cannot use host pointers for registered "
                                                            f"memory, which tally's {what} needs")
        except DeviceError:
            _libc.munmap(address, size)
            raise
        return size

    def _unregister_late(self, address: int, size: int = 0) -> None:
        """After a reset: unregister what a faulted context registered, if the driver
        still has it (an error only says it has not), then unmap the server's mapping."""
        cu.cuMemHostUnregister(address)
        if size:
            _libc.munmap(address, size)
