"""A job's device heap: what its kernels' malloc/free allocate from.

CUDA keeps one such heap per context, sized by cudaLimitMallocHeapSize
(cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE); 8 MiB until the program sets it).
tally runs all of a job's contexts in one session, so the job has one heap that
its contexts share. On a backend whose traits say `device_heap_per_job` (the
emulator) the heap is the job's memory:

- a size the job sets is allocated at once and counted against the job's quota
  and the high-priority reserve, so a heap the job cannot have fails
  cuCtxSetLimit with CUDA_ERROR_OUT_OF_MEMORY (as the driver's does);
- without one, the default-sized heap is allocated, and counted, at the first
  launch of a kernel that calls malloc or free (a launch then fails with
  OUT_OF_MEMORY when it does not fit);
- once such a kernel has been launched the size is fixed: setting another one
  fails with CUDA_ERROR_INVALID_VALUE, as CUDA documents;
- it is freed, and uncounted, when the job goes; it stays resident while the
  job is suspended, and a job whose kernels used it cannot migrate (the heap's
  blocks would not come along).

Elsewhere (a GPU's driver keeps its own heap per context) only the size the job
set is kept, for nothing to use.
"""
from __future__ import annotations

import threading

from tally.backends.base import DeviceHeaps
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_OUT_OF_MEMORY, DeviceError
from tally.server.client.memory import Allocations
from tally.units import format_bytes

DEFAULT_HEAP_BYTES = 8 << 20        # the driver's default cudaLimitMallocHeapSize


class JobDeviceHeap:
    def __init__(self, backend: DeviceHeaps, allocations: Allocations, enabled: bool):
        self._backend = backend
        self._allocations = allocations
        self._enabled = enabled
        self._lock = threading.Lock()
        self.size = DEFAULT_HEAP_BYTES
        self._heap = None                # the backend's heap once allocated
        self._charged = 0
        self._fixed = False              # a kernel that calls malloc/free was launched

    def set_size(self, nbytes: int) -> None:
        """cuCtxSetLimit(CU_LIMIT_MALLOC_HEAP_SIZE, nbytes)."""
        with self._lock:
            if nbytes == self.size and (self._heap is not None or not self._enabled):
                return
            if self._fixed:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"the device heap is in use ({format_bytes(self.size)}): set "
                                  "cudaLimitMallocHeapSize before the first launch of a kernel that calls "
                                  "malloc or free")
            if self._enabled:
                heap = self._allocate(nbytes)
                self._release()
                self._heap, self._charged = heap, nbytes
            self.size = nbytes

    def prepare_launch(self, backend_function, backend_module) -> None:
        """Before a launch: a kernel that calls malloc/free gets the job's heap (allocated now
        if the job never set a size). Raises OUT_OF_MEMORY when it does not fit."""
        if not self._enabled or not self._backend.function_uses_heap(backend_function):
            return
        with self._lock:
            if self._heap is None:
                self._heap, self._charged = self._allocate(self.size), self.size
            self._fixed = True
            self._backend.heap_attach(backend_module, self._heap)

    @property
    def held_bytes(self) -> int:
        return self._charged

    @property
    def in_use(self) -> bool:
        """A kernel that calls malloc/free was launched: the heap may hold the job's blocks."""
        return self._fixed and self._heap is not None

    def close(self) -> None:
        """The job went (its modules are unloaded and its work is done): free the heap."""
        with self._lock:
            self._release()

    def _allocate(self, nbytes: int):
        allocations = self._allocations
        with allocations.charging(nbytes):
            try:
                return self._backend.heap_create(nbytes)
            except DeviceError as e:
                if e.code != CUDA_ERROR_OUT_OF_MEMORY:
                    raise
                raise allocations.device_full(nbytes, *self._backend.mem_info()) from None

    def _release(self) -> None:
        # Dropping the last reference frees the heap's memory (modules that held it are unloaded).
        if self._heap is not None:
            self._heap = None
            self._allocations.uncharge(self._charged)
            self._charged = 0
