"""The `null` device: accepts every call, executes nothing.

It exists to measure tally's own forwarding cost (client -> ring -> server ->
backend) with the device taken out of the picture. Memory is address space
only: allocations get distinct, aligned addresses and are checked on free, but
no bytes are stored; a device-to-host copy leaves the destination untouched.
"""
from __future__ import annotations

import bisect
import threading
import uuid as uuidlib
from dataclasses import dataclass, field
from typing import Callable

from tally.backends.base import (BackendTraits, DataPlaneDevice, DeviceDescription, KernelParam, ModuleSource,
                                 NoHostRegistration, clamp_sm_grant)
from tally.protocol.errors import (
    CUDA_ERROR_ALREADY_MAPPED,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_OUT_OF_MEMORY,
    DeviceError,
)
from tally.backends.device_attributes import synthetic_attributes
from tally.backends.ptx_variants import PtxVariants
from tally.backends.tensor_maps import TallyTensorMaps
from tally.backends.texture_objects import TallyTextureObjects
from tally.backends.graph_launch import StreamOrderedGraphs

ALIGNMENT = 256
BASE_ADDRESS = 0x7F00_0000_0000
# The device's virtual address space: 256 TiB, as a GPU's unified address space is of
# that order. Ranges are handed out upwards and, once the top is reached, from the
# lowest gap big enough; a request no gap fits is refused (tally-bench fuzz found
# that an absurd reservation once pushed every later address past 2**64).
ADDRESS_END = BASE_ADDRESS + (1 << 48)


@dataclass
class NullFunction:
    name: str
    params: tuple[KernelParam, ...] = ()


@dataclass
class NullModule:
    functions: dict[str, NullFunction] = field(default_factory=dict)
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)


class NullStream:
    pass


class NullEvent:
    pass


class NullBackend(NoHostRegistration, PtxVariants, TallyTensorMaps, TallyTextureObjects, StreamOrderedGraphs):
    kind = "null"
    traits = BackendTraits(runs_cubins=True, errors_are_context_wide=False, session_spin_us=20.0,
                           executes_work=False, virtual_clock=False, printf_per_stream=False,
                           variants_from_ptx=True, confines_sms=False, restores_at_address=True,
                           migrates_jobs=True)

    def __init__(self, total_memory: int = 80 << 30, sm_count: int = 132):
        self._total = total_memory
        self._sm_count = sm_count
        self._next = BASE_ADDRESS
        self._live: dict[int, int] = {}
        self._starts: list[int] = []            # sorted bases of _live and _reserved (for _place)
        self._managed: dict[int, int] = {}      # managed memory: base -> bytes (also in _live)
        self._reserved: dict[int, int] = {}     # virtual memory: reservation base -> bytes
        self._physical: dict[int, int] = {}     # physical handle -> bytes
        self._next_handle = 0
        self._lock = threading.Lock()
        self._uuid = uuidlib.uuid5(uuidlib.NAMESPACE_DNS, "null.tally").bytes

    def describe(self) -> DeviceDescription:
        cc = (9, 0)
        return DeviceDescription(
            name="tally null device", uuid=self._uuid, total_memory=self._total,
            compute_capability=cc, sm_count=self._sm_count,
            attributes=synthetic_attributes(cc, self._sm_count), pci_bus=0, pci_device=0)

    # memory: address space only
    def mem_alloc(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot allocate {nbytes} bytes")
        with self._lock:
            if sum(self._live.values()) + nbytes > self._total:
                raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"out of memory allocating {nbytes} bytes")
            ptr = self._place(nbytes, ALIGNMENT)
            self._live[ptr] = nbytes
            self._occupy(ptr)
            return ptr

    def _place(self, nbytes: int, alignment: int) -> int:
        """An aligned range of nbytes clear of every allocation and reservation (the
        jobs chose the managed addresses: they are stepped over too). Lock held."""
        span = (nbytes + ALIGNMENT - 1) // ALIGNMENT * ALIGNMENT
        ptr = self._first_fit(self._next, span, alignment)
        if ptr is None:
            ptr = self._first_fit(BASE_ADDRESS, span, alignment)
        if ptr is None:
            raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"no free range of {nbytes} bytes in the null device's "
                                                        f"{(ADDRESS_END - BASE_ADDRESS) >> 40} TiB address space")
        self._next = ptr + span
        return ptr

    def _first_fit(self, start: int, span: int, alignment: int) -> int | None:
        ptr = (start + alignment - 1) // alignment * alignment
        starts = self._starts
        i = max(bisect.bisect_right(starts, ptr) - 1, 0)
        while i < len(starts) and ptr + span <= ADDRESS_END:
            base = starts[i]
            end = base + max(self._live.get(base, 0), self._reserved.get(base, 0))
            if ptr + span <= base:
                break
            if end > ptr:
                ptr = (end + alignment - 1) // alignment * alignment
            i += 1
        return ptr if ptr + span <= ADDRESS_END else None

    def _occupy(self, base: int) -> None:
        i = bisect.bisect_left(self._starts, base)
        if i == len(self._starts) or self._starts[i] != base:
            self._starts.insert(i, base)

    def _vacate(self, base: int) -> None:
        if base in self._live or base in self._reserved:
            return
        i = bisect.bisect_left(self._starts, base)
        if i < len(self._starts) and self._starts[i] == base:
            del self._starts[i]

    def mem_free(self, ptr: int) -> None:
        with self._lock:
            if self._live.pop(ptr, None) is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not an allocation")
            self._managed.pop(ptr, None)
            self._vacate(ptr)

    # restoring at addresses (AddressRestore): address space again; no bytes to move
    def mem_alloc_at(self, ptr: int, nbytes: int) -> None:
        with self._lock:
            if sum(self._live.values()) + nbytes > self._total:
                raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"out of memory allocating {nbytes} bytes")
            if any(p < ptr + nbytes and ptr < p + n for p, n in self._live.items()):
                raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"0x{ptr:x} overlaps an allocation")
            self._live[ptr] = nbytes

    def mem_evict(self, ptr: int) -> None:
        self.mem_free(ptr)

    def mem_free_evicted(self, ptr: int) -> None:
        pass

    def module_memory(self, module: NullModule) -> dict[str, tuple[int, int]]:
        return {}         # the null device keeps no globals

    def module_load_at(self, source: ModuleSource, addresses: dict[str, int]) -> NullModule:
        return self.module_load(source)

    def module_unmovable(self, module: NullModule) -> str | None:
        return None

    def module_evict(self, module: NullModule) -> None:
        pass

    def module_restore(self, module: NullModule) -> None:
        pass

    def vmm_read(self, handle: int, offset: int, dst: memoryview) -> None:
        if handle not in self._physical:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown physical handle {handle}")

    def vmm_write(self, handle: int, offset: int, src: memoryview) -> None:
        if handle not in self._physical:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown physical handle {handle}")

    def vmm_reserve_at(self, ptr: int, nbytes: int) -> None:
        with self._lock:
            taken = {**self._live, **self._reserved}
            if any(p < ptr + nbytes and ptr < p + n for p, n in taken.items()):
                raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"0x{ptr:x} overlaps an allocation or reservation")
            self._reserved[ptr] = nbytes
            self._occupy(ptr)

    def managed_alloc(self, address: int, nbytes: int, fd: int) -> None:
        """Address space only, like the rest: the job's own mapping holds the bytes."""
        if nbytes <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot allocate {nbytes} bytes")
        with self._lock:
            if sum(self._live.values()) + nbytes > self._total:
                raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"out of memory allocating {nbytes} bytes")
            if any(p < address + nbytes and address < p + n for p, n in self._live.items()):
                raise DeviceError(CUDA_ERROR_ALREADY_MAPPED, f"0x{address:x} overlaps an allocation")
            self._live[address] = self._managed[address] = nbytes
            self._occupy(address)

    def mem_info(self) -> tuple[int, int]:
        with self._lock:
            return self._total - sum(self._live.values()) - sum(self._physical.values()), self._total

    def write_now(self, address: int, data: bytes) -> None:
        """No device memory holds bytes here (a texture descriptor is only its address)."""

    # virtual memory: address ranges come from the same space; physical memory is a count
    def vmm_reserve(self, nbytes: int, alignment: int, hint: int = 0) -> int:
        # The hint is not honoured (CUDA may ignore it too): nothing here migrates to a null backend's VMM.
        if nbytes <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot reserve {nbytes} bytes")
        with self._lock:
            ptr = self._place(nbytes, max(alignment, ALIGNMENT))
            self._reserved[ptr] = nbytes
            self._occupy(ptr)
            return ptr

    def vmm_free(self, ptr: int, nbytes: int) -> None:
        with self._lock:
            if self._reserved.pop(ptr, None) is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"0x{ptr:x} is not a reservation")
            self._vacate(ptr)

    def vmm_create(self, nbytes: int) -> int:
        with self._lock:
            if sum(self._live.values()) + sum(self._physical.values()) + nbytes > self._total:
                raise DeviceError(CUDA_ERROR_OUT_OF_MEMORY, f"out of memory creating {nbytes} bytes")
            self._next_handle += 1
            handle = self._next_handle
            self._physical[handle] = nbytes
            return handle

    def vmm_release(self, handle: int) -> None:
        with self._lock:
            if self._physical.pop(handle, None) is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"unknown physical handle {handle}")

    def vmm_map(self, ptr: int, nbytes: int, offset: int, handle: int) -> None:
        pass  # nothing executes, so nothing reads mappings; the server checks ownership

    def vmm_unmap(self, ptr: int, nbytes: int) -> None:
        pass

    def vmm_set_access(self, ptr: int, nbytes: int, accessible: bool) -> None:
        pass

    # modules: remember kernel names and layouts so clients can launch them
    def module_load(self, source: ModuleSource) -> NullModule:
        from tally.backends.module_info import kernel_layouts
        module = NullModule()
        for name, params in kernel_layouts(source).items():
            module.functions[name] = NullFunction(name, params)
        return module

    def module_unload(self, module: NullModule) -> None:
        pass

    def module_function(self, module: NullModule, name: str) -> NullFunction:
        try:
            return module.functions[name]
        except KeyError:
            raise DeviceError(CUDA_ERROR_NOT_FOUND, f"no kernel named {name!r} in the module") from None

    def module_global(self, module: NullModule, name: str) -> tuple[int, int]:
        raise DeviceError(CUDA_ERROR_NOT_FOUND, f"the null device keeps no globals ({name!r})")

    def function_attributes(self, fn) -> dict:
        return {}       # a device that runs nothing knows nothing of its kernels (the cubin may)

    def stream_create(self, priority: int = 0) -> NullStream:
        return NullStream()

    def stream_destroy(self, stream: NullStream) -> None:
        pass

    def event_create(self, timing: bool = True) -> NullEvent:
        return NullEvent()

    def event_destroy(self, event: NullEvent) -> None:
        pass

    # asynchronous operations complete at once and do nothing
    def sm_grant(self, requested_sms: int) -> int:
        return clamp_sm_grant(requested_sms, self._sm_count)

    def launch(self, fn, grid, block, shared_bytes, stream, params, sm_cap=None, cluster=None,
               cooperative=False) -> None:
        pass   # a cluster shape too: nothing runs, so nothing is refused

    def graph_launch(self, graph, stream, sm_cap=None) -> None:
        pass   # one call, as on a GPU: nothing runs

    def stream_set_access_policy(self, stream, window) -> None:
        pass

    def memcpy_htod_async(self, dst, src, stream) -> None:
        pass

    def memcpy_dtoh_async(self, dst, src, stream) -> None:
        pass

    def memcpy_dtod_async(self, dst, src, nbytes, stream) -> None:
        pass

    def memset_async(self, dst, value, element_size, count, stream) -> None:
        pass

    def event_record(self, event, stream) -> None:
        pass

    def stream_wait_event(self, stream, event) -> None:
        pass

    def host_callback(self, stream, fn: Callable[[], None]) -> None:
        fn()

    # A wait on a value ends at once: nothing runs here that could write it.
    def stream_wait_value(self, stream, address, value, width, condition) -> None:
        pass

    def stream_write_value(self, stream, address, value, width) -> None:
        pass

    def stream_release_waits(self, stream) -> None:
        pass

    def stream_synchronize(self, stream) -> None:
        pass

    def stream_query(self, stream) -> bool:
        return True

    def event_synchronize(self, event) -> None:
        pass

    def event_query(self, event) -> bool:
        return True

    def event_elapsed_ms(self, start, end) -> float:
        return 0.0

    def event_host_time(self, event) -> float | None:
        return None             # it keeps no time: elapsed times across a migration are refused

    def synchronize(self) -> None:
        pass

    def data_plane(self) -> DataPlaneDevice:
        from tally._core import data_plane

        def register(table, function_id: int, fn, param_bytes: int) -> bool:
            table.add_function(function_id, param_bytes)
            return True

        return DataPlaneDevice(data_plane.NullIssuer(), lambda stream: 0, register, lambda executable: 0)

    def close(self) -> None:
        pass
