"""The `emulator` device: a CPU that runs PTX (this package, hot loop in
csrc/src/emulator/).

Memory is real (allocations at device-like addresses from 0x7f00_0000_0000,
backed by host memory only where a kernel or copy touches it); streams run on
their own threads; kernels are lowered from PTX at their first launch. A
launch's blocks run on up to `sm_count` worker threads at once, one per SM
(%smid is the worker's number); a launch with an SM cap runs on at most that
many (`sm_usage` records, per stream, the most any launch used). A
kernel that faults (illegal address, divergent barrier, time limit, an
instruction the emulator lacks) fails that launch only: the error is kept on
its stream and the device keeps working. A failed device assert fails it with
CUDA_ERROR_ASSERT, its message (CUDA's format) in the DeviceError's `stderr`.

Kernel printf output is kept per stream (`take_printf(stream)`) and, unless
`printf_to_stdout=False`, also written to the server's stdout.

Options: total_memory (bytes of address space to hand out, backed only where
touched), sm_count (what %nsmid and the device attributes say; a launch's
blocks take %smid 0..n-1 round-robin, n its SM cap or sm_count),
compute_capability (what the device reports, (9, 0) by default: modules load
only PTX for it or older; `tally-server --emulate-cc`), driver_version (the
CUDA version cuDriverGetVersion reports, 13000 by default: modules load only PTX
of an ISA version that release knows; `--emulate-driver`), launch_timeout_s
and max_warp_instructions (per-launch limits; 0 = none), printf_to_stdout.
`stats` counts launches and executed thread/warp instructions.
"""
from __future__ import annotations

import sys
import threading
import uuid as uuidlib
from collections.abc import Callable

from tally._core import emulator as core
from tally.backends.base import (BackendTraits, DataPlaneDevice, DeviceDescription, Dim3, FuncAttribute,
                                 ModuleSource, NoHostRegistration, clamp_sm_grant)
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_PTX,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY,
    DeviceError,
)
from tally.backends.clusters import launch_cluster
from tally.backends.device_attributes import launch_limits, synthetic_attributes
from tally.backends.ptx_variants import PtxVariants
from tally.backends.emulator.device_launches import run_device_launches
from tally.backends.emulator.layout import LayoutError
from tally.backends.emulator.module import EmulatorFunction, EmulatorModule
from tally.backends.emulator import value_waits
from tally.backends.emulator.streams import EmulatorEvent, EmulatorStream
from tally.backends.tensor_maps import TallyTensorMaps
from tally.backends.texture_objects import TallyTextureObjects
from tally.backends.graph_launch import StreamOrderedGraphs

DEFAULT_COMPUTE_CAPABILITY = (9, 0)
DEFAULT_DRIVER_VERSION = 13000      # CUDA 13.0: loads PTX up to ISA 9.0
DEFAULT_HEAP_BYTES = 8 << 20        # cudaLimitMallocHeapSize's default, as the driver's


def _memory_call(fn, *args):
    for a in args:
        if isinstance(a, int) and not 0 <= a < 1 << 64:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{a} is not a device address or size (0 <= value < 2**64)")
    try:
        return fn(*args)
    except core.MemoryError as e:
        code, message = e.args
        raise DeviceError(code, message) from None


class EmulatorBackend(NoHostRegistration, PtxVariants, TallyTensorMaps, TallyTextureObjects, StreamOrderedGraphs):
    kind = "emulator"
    traits = BackendTraits(runs_cubins=False, errors_are_context_wide=False, session_spin_us=20.0,
                           executes_work=True, virtual_clock=False, printf_per_stream=True,
                           variants_from_ptx=True, confines_sms=True, restores_at_address=True,
                           migrates_jobs=True, device_heap_per_job=True)

    def __init__(self, total_memory: int = 16 << 30, sm_count: int = 8, launch_timeout_s: float = 300.0,
                 max_warp_instructions: int = 0, printf_to_stdout: bool = True,
                 compute_capability: tuple[int, int] = DEFAULT_COMPUTE_CAPABILITY,
                 driver_version: int = DEFAULT_DRIVER_VERSION):
        self._memory = core.DeviceMemory(total_memory)
        self._sm_count = sm_count
        self._cc = tuple(compute_capability)
        self._driver_version = driver_version
        self._attributes = synthetic_attributes(self._cc, sm_count)
        # the limits a launch is checked against here and in the C++ issuer: the device
        # attributes the job's client reads are their one source
        self.limits = launch_limits(self._attributes)
        self.launch_timeout_s = launch_timeout_s
        self.max_warp_instructions = max_warp_instructions
        self._printf_to_stdout = printf_to_stdout
        self._cancel = core.CancelFlag()
        self._lock = threading.Lock()
        self._streams: set[EmulatorStream] = set()
        self._printf: dict[EmulatorStream, list[str]] = {}
        self._uuid = uuidlib.uuid5(uuidlib.NAMESPACE_DNS, "emulator.tally").bytes
        self.stats = {"launches": 0, "thread_instructions": 0, "warp_instructions": 0}
        # per stream: the most workers (SMs) any of its launches ran blocks on, and the
        # most blocks that ran at once
        self.sm_usage: dict[EmulatorStream, list[int]] = {}

    def describe(self) -> DeviceDescription:
        cc = self._cc
        return DeviceDescription(name="tally emulator", uuid=self._uuid, total_memory=self._memory.capacity,
                                 compute_capability=cc, sm_count=self._sm_count, attributes=self._attributes,
                                 driver_version=self._driver_version)

    # ------------------------------------------------------------------ memory

    def mem_alloc(self, nbytes: int) -> int:
        if nbytes <= 0:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"cannot allocate {nbytes} bytes")
        return _memory_call(self._memory.allocate, nbytes)

    def mem_free(self, ptr: int) -> None:
        _memory_call(self._memory.free, ptr)

    def mem_info(self) -> tuple[int, int]:
        return self._memory.capacity - self._memory.used, self._memory.capacity

    def write_now(self, address: int, data: bytes) -> None:
        """Device bytes written at once, outside any stream (a texture descriptor)."""
        _memory_call(self._memory.write, address, memoryview(data))

    # ------------------------------------------------------------------ restoring at addresses (AddressRestore)

    def mem_alloc_at(self, ptr: int, nbytes: int) -> None:
        _memory_call(self._memory.allocate_at, ptr, nbytes)

    # Next fit hands out a freed address again only after its window wraps: evicting is freeing.
    def mem_evict(self, ptr: int) -> None:
        self.mem_free(ptr)

    def mem_free_evicted(self, ptr: int) -> None:
        pass

    def module_memory(self, module: EmulatorModule) -> dict[str, tuple[int, int]]:
        return {name: (ptr, max(size, 1)) for name, (ptr, size) in module.globals.items()}

    def module_load_at(self, source: ModuleSource, addresses: dict[str, int]) -> EmulatorModule:
        return _memory_call(EmulatorModule, source, self._memory, addresses)

    def module_unmovable(self, module: EmulatorModule) -> str | None:
        return None       # every variable is the emulator's own allocation

    def module_evict(self, module: EmulatorModule) -> None:
        _memory_call(module.evict)

    def module_restore(self, module: EmulatorModule) -> None:
        _memory_call(module.restore)

    def vmm_read(self, handle: int, offset: int, dst: memoryview) -> None:
        _memory_call(self._memory.read_physical, handle, offset, dst)

    def vmm_write(self, handle: int, offset: int, src: memoryview) -> None:
        _memory_call(self._memory.write_physical, handle, offset, src)

    def vmm_reserve_at(self, ptr: int, nbytes: int) -> None:
        _memory_call(self._memory.reserve_at, ptr, nbytes)

    # ------------------------------------------------------------------ virtual memory

    def vmm_reserve(self, nbytes: int, alignment: int, hint: int = 0) -> int:
        return _memory_call(self._memory.reserve, nbytes, max(alignment, 256), hint)

    def vmm_free(self, ptr: int, nbytes: int) -> None:
        _memory_call(self._memory.unreserve, ptr)

    def vmm_create(self, nbytes: int) -> int:
        return _memory_call(self._memory.create_physical, nbytes)

    def vmm_release(self, handle: int) -> None:
        _memory_call(self._memory.release_physical, handle)

    def vmm_map(self, ptr: int, nbytes: int, offset: int, handle: int) -> None:
        _memory_call(self._memory.map, ptr, nbytes, offset, handle)

    def vmm_unmap(self, ptr: int, nbytes: int) -> None:
        _memory_call(self._memory.unmap, ptr, nbytes)

    def vmm_set_access(self, ptr: int, nbytes: int, accessible: bool) -> None:
        _memory_call(self._memory.set_access, ptr, nbytes, accessible)

    # ------------------------------------------------------------------ managed memory

    def managed_alloc(self, address: int, nbytes: int, fd: int) -> None:
        _memory_call(self._memory.adopt_shared, address, nbytes, fd)

    # Pinned memory kernels read at its host address: not device memory, so not charged.
    def host_map(self, address: int, nbytes: int, fd: int) -> bool:
        try:
            _memory_call(self._memory.adopt_shared, address, nbytes, fd, False)
        except DeviceError:
            return False         # the address is taken on the device: copies only
        return True

    def host_unmap(self, address: int) -> None:
        _memory_call(self._memory.free, address)

    # ------------------------------------------------------------------ modules

    def module_load(self, source: ModuleSource) -> EmulatorModule:
        return _memory_call(EmulatorModule, source, self._memory)

    def module_unload(self, module: EmulatorModule) -> None:
        module.unload()

    def module_function(self, module: EmulatorModule, name: str) -> EmulatorFunction:
        try:
            return module.functions[name]
        except KeyError:
            raise DeviceError(CUDA_ERROR_NOT_FOUND, f"no kernel named {name!r} in the module") from None

    def function_attributes(self, fn: EmulatorFunction) -> dict[FuncAttribute, int]:
        """From the kernel's PTX (kernel_resources.py); the emulator compiles for itself,
        so the binary version is the device's."""
        try:
            r = fn.resources()
        except LayoutError as e:
            raise DeviceError(CUDA_ERROR_INVALID_PTX, f"kernel {fn.name}: {e}") from None
        limit = self.limits.max_threads
        max_threads = limit if r.max_threads is None else min(r.max_threads, limit)
        cluster = r.required_cluster or (0, 0, 0)
        return {
            FuncAttribute.MAX_THREADS_PER_BLOCK: max_threads,
            FuncAttribute.SHARED_SIZE_BYTES: r.static_shared_bytes,
            FuncAttribute.CONST_SIZE_BYTES: r.const_bytes,
            FuncAttribute.LOCAL_SIZE_BYTES: r.local_bytes,
            FuncAttribute.NUM_REGS: r.registers,
            FuncAttribute.PTX_VERSION: r.ptx_version,
            FuncAttribute.BINARY_VERSION: self._cc[0] * 10 + self._cc[1],
            FuncAttribute.CLUSTER_SIZE_MUST_BE_SET: int(r.explicit_cluster or r.required_cluster is not None),
            FuncAttribute.REQUIRED_CLUSTER_WIDTH: cluster[0],
            FuncAttribute.REQUIRED_CLUSTER_HEIGHT: cluster[1],
            FuncAttribute.REQUIRED_CLUSTER_DEPTH: cluster[2],
        }

    def module_global(self, module: EmulatorModule, name: str) -> tuple[int, int]:
        try:
            return module.globals[name]
        except KeyError:
            raise DeviceError(CUDA_ERROR_NOT_FOUND, f"no .global/.const variable named {name!r} in the module") from None

    # ------------------------------------------------------------------ device heaps (DeviceHeaps)

    def heap_create(self, nbytes: int):
        return _memory_call(core.DeviceHeap, self._memory, nbytes)

    def heap_attach(self, module: EmulatorModule, heap) -> None:
        module.heap = heap

    def function_uses_heap(self, fn: EmulatorFunction) -> bool:
        return fn.uses_device_heap

    def _heap_of(self, fn: EmulatorFunction):
        """The heap a launch of fn allocates from; a module nobody attached one to (the
        backend used on its own, without a server) gets the driver's default size."""
        module = fn.module
        if module.heap is None:
            with self._lock:
                if module.heap is None:
                    module.heap = self.heap_create(DEFAULT_HEAP_BYTES)
        return module.heap

    # ------------------------------------------------------------------ streams and events

    def stream_create(self, priority: int = 0) -> EmulatorStream:
        stream = EmulatorStream(priority, on_exit=self._forget, run_native=self._run_native)
        with self._lock:
            self._streams.add(stream)
            self._printf[stream] = []
        return stream

    def _forget(self, stream: EmulatorStream) -> None:
        """A destroyed stream's worker finished: drop it (and its unread printf output)."""
        with self._lock:
            self._streams.discard(stream)
            self._printf.pop(stream, None)
            self.sm_usage.pop(stream, None)

    def stream_destroy(self, stream: EmulatorStream) -> None:
        stream.stop()

    def event_create(self, timing: bool = True) -> EmulatorEvent:
        return EmulatorEvent(timing)

    def event_destroy(self, event: EmulatorEvent) -> None:
        pass

    # ------------------------------------------------------------------ asynchronous operations

    def sm_grant(self, requested_sms: int) -> int:
        return clamp_sm_grant(requested_sms, self._sm_count)

    def launch(self, fn: EmulatorFunction, grid: Dim3, block: Dim3, shared_bytes: int, stream: EmulatorStream,
               params: bytes, sm_cap: int | None = None, cluster: Dim3 | None = None,
               cooperative: bool = False) -> None:
        run = self.checked_launch(fn, grid, block, shared_bytes, params, sm_cap, cluster, cooperative)
        stream.submit(lambda: run(stream))

    def checked_launch(self, fn: EmulatorFunction, grid: Dim3, block: Dim3, shared_bytes: int, params: bytes,
                       sm_cap: int | None = None, cluster: Dim3 | None = None, cooperative: bool = False,
                       depth: int = 0) -> Callable[[EmulatorStream], None]:
        """The launch checked as cuLaunchKernel checks it, ready to run on a stream's
        thread; `depth`: how deeply the kernels that launched it nest (0: the host's)."""
        if not isinstance(fn, EmulatorFunction):
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"{fn!r} is not a kernel of this device")
        limits = self.limits
        grid, block = _dims(grid, "grid", limits.max_grid), _dims(block, "block", limits.max_block)
        if block[0] * block[1] * block[2] > limits.max_threads:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"block {block} has more than {limits.max_threads} threads")
        threads = block[0] * block[1] * block[2]
        if fn.max_threads is not None and threads > fn.max_threads:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"kernel {fn.name} allows at most {fn.max_threads} threads "
                                                        f"per block (.maxntid), the launch has {threads}")
        if fn.required_block is not None and block != fn.required_block:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"kernel {fn.name} must be launched with block "
                                                        f"{fn.required_block} (.reqntid), not {block}")
        if not 0 <= shared_bytes <= limits.max_shared_bytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{shared_bytes} bytes of dynamic shared memory (at most {limits.max_shared_bytes})")
        if sm_cap is not None and not 1 <= sm_cap <= self._sm_count:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"SM cap {sm_cap} is outside 1..{self._sm_count}")
        shape = launch_cluster(fn.name, grid, cluster, fn.cluster)
        cluster_dims, explicit = (shape.dims, True) if shape is not None else ((1, 1, 1), False)
        params = bytes(params)
        heap = self._heap_of(fn) if fn.uses_device_heap else None
        if len(params) < fn.param_bytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"kernel {fn.name} takes {fn.param_bytes} parameter bytes, "
                                                        f"the launch passed {len(params)}")

        def run(stream: EmulatorStream) -> None:
            kernel = fn.lowered()
            if kernel.static_shared_bytes + shared_bytes > limits.max_shared_bytes:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  f"kernel {fn.name} needs {kernel.static_shared_bytes} bytes of static and "
                                  f"{shared_bytes} of dynamic shared memory (at most {limits.max_shared_bytes})")
            result = core.run_launch(kernel.program, self._memory, params, grid, block, shared_bytes,
                                     self._sm_count, self.max_warp_instructions, self.launch_timeout_s,
                                     self._cancel, sm_cap or 0, heap, cluster_dims, explicit, cooperative)
            self._launched(stream, fn.name, result)
            if result.device_launches:
                run_device_launches(self, fn, stream, result.device_launches, heap, sm_cap, depth)

        return run

    def _launched(self, stream: EmulatorStream, name: str, result) -> None:
        """After every launch, whoever queued it: statistics, printf output, the fault."""
        with self._lock:
            self.stats["launches"] += 1
            self.stats["thread_instructions"] += result.thread_instructions
            self.stats["warp_instructions"] += result.warp_steps
            usage = self.sm_usage.setdefault(stream, [0, 0])
            usage[0] = max(usage[0], result.sms_used)
            usage[1] = max(usage[1], result.max_concurrent)
        if result.printf_output:
            self._emit_printf(stream, result.printf_output)
        if result.code:
            raise DeviceError(result.code, f"kernel {name} failed: {result.message}", stderr=result.assert_output)

    def _run_native(self, stream: EmulatorStream, op) -> None:
        """Work the C++ data plane queued (a NativeOp), on the stream's thread."""
        if op.is_launch:
            self._launched(stream, op.name, op.run())
        else:
            _memory_call(op.run)

    def _emit_printf(self, stream: EmulatorStream, text: str) -> None:
        with self._lock:
            self._printf.setdefault(stream, []).append(text)
            stream.note_output(True)
        if self._printf_to_stdout:
            sys.stdout.write(text)
            sys.stdout.flush()

    def take_printf(self, stream: EmulatorStream) -> str:
        """Kernel printf output of the stream's launches so far (and forgets it)."""
        with self._lock:
            parts = self._printf.get(stream, [])
            self._printf[stream] = []
            stream.note_output(False)
        return "".join(parts)

    def memcpy_htod_async(self, dst: int, src: memoryview, stream: EmulatorStream) -> None:
        src = memoryview(src).cast("B")
        _memory_call(self._memory.check, dst, len(src), "host-to-device copy")
        stream.submit(lambda: _memory_call(self._memory.write, dst, src))

    def read_device(self, dst, src: int) -> None:
        """Device memory at `src` into the writable buffer `dst`, now (a stream thread's own read)."""
        _memory_call(self._memory.read, dst, src)

    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream: EmulatorStream) -> None:
        dst = memoryview(dst).cast("B")
        _memory_call(self._memory.check, src, len(dst), "device-to-host copy")
        stream.submit(lambda: _memory_call(self._memory.read, dst, src))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: EmulatorStream) -> None:
        _memory_call(self._memory.check, src, nbytes, "device-to-device copy source")
        _memory_call(self._memory.check, dst, nbytes, "device-to-device copy destination")
        stream.submit(lambda: _memory_call(self._memory.copy, dst, src, nbytes))

    def memset_async(self, dst: int, value: int, element_size: int, count: int, stream: EmulatorStream) -> None:
        if element_size not in (1, 2, 4):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size {element_size} (use 1, 2 or 4)")
        _memory_call(self._memory.check, dst, element_size * count, "memset")
        stream.submit(lambda: _memory_call(self._memory.fill, dst, value & 0xFFFFFFFF, element_size, count))

    def event_record(self, event: EmulatorEvent, stream: EmulatorStream) -> None:
        event.record(stream)

    def stream_wait_event(self, stream: EmulatorStream, event: EmulatorEvent) -> None:
        target = event.target()
        if target:
            stream.submit(lambda: event.wait(target))

    def host_callback(self, stream: EmulatorStream, fn: Callable[[], None]) -> None:
        stream.submit(fn)

    def stream_wait_value(self, stream: EmulatorStream, address: int, value: int, width: int,
                          condition: int) -> None:
        _memory_call(self._memory.check, address, width, "stream wait value address")
        read = value_waits.reader(_memory_call, self._memory, address, width)
        stream.submit(value_waits.wait_op(read, value, width, condition, stream.waits_released))

    def stream_write_value(self, stream: EmulatorStream, address: int, value: int, width: int) -> None:
        _memory_call(self._memory.check, address, width, "stream write value address")
        data = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        stream.submit(lambda: _memory_call(self._memory.write, address, data))

    def stream_release_waits(self, stream: EmulatorStream) -> None:
        stream.waits_released.set()

    def stream_set_access_policy(self, stream: EmulatorStream, window) -> None:
        pass   # the emulator has no cache: every access costs the same

    # ------------------------------------------------------------------ synchronization

    def stream_synchronize(self, stream: EmulatorStream) -> None:
        stream.wait_idle()
        stream.raise_error()

    def stream_query(self, stream: EmulatorStream) -> bool:
        idle = stream.idle
        stream.raise_error()
        return idle

    def event_synchronize(self, event: EmulatorEvent) -> None:
        event.wait(event.target())

    def event_query(self, event: EmulatorEvent) -> bool:
        return event.query()

    def event_elapsed_ms(self, start: EmulatorEvent, end: EmulatorEvent) -> float:
        if not (start.timing and end.timing):
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "elapsed time needs two events created with timing")
        (r0, done0, t0), (r1, done1, t1) = start.completion(), end.completion()
        if r0 == 0 or r1 == 0:
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "elapsed time of an event that was never recorded")
        if not (done0 and done1):
            raise DeviceError(CUDA_ERROR_NOT_READY, "the events have not completed yet")
        return (t1 - t0) * 1000.0

    # Events are stamped with time.perf_counter(), CLOCK_MONOTONIC on Linux: the node's clock.
    def event_host_time(self, event: EmulatorEvent) -> float | None:
        recorded, done, at = event.completion()
        return at if recorded and done else None

    def synchronize(self) -> None:
        with self._lock:
            streams = list(self._streams)
        for s in streams:
            s.wait_idle()
        for s in streams:
            s.raise_error()

    def data_plane(self) -> DataPlaneDevice:
        # Work goes onto the streams' C++ queues; their threads run it like any other
        # (csrc/src/emulator/data_plane_issuer.cpp).
        from tally._core import data_plane
        limits = self.limits
        issuer = data_plane.EmulatorIssuer(self._memory, self._sm_count, self.max_warp_instructions,
                                           self.launch_timeout_s, self._cancel,
                                           data_plane.LaunchLimits(limits.max_grid, limits.max_block,
                                                                   limits.max_threads, limits.max_shared_bytes))

        def register(table, function_id: int, fn: EmulatorFunction, param_bytes: int) -> bool:
            if fn.uses_device_heap:
                return False          # the job's heap goes with each launch, the Python way
            try:
                kernel = fn.lowered()
            except DeviceError:
                return False          # every launch fails, the Python way
            table.add_emulator_function(function_id, param_bytes, kernel.program, fn.max_threads or 0,
                                        fn.required_block or (0, 0, 0), kernel.static_shared_bytes,
                                        fn.cluster.dims or (0, 0, 0), fn.cluster.explicit)
            return True

        return DataPlaneDevice(issuer, lambda stream: stream.queue_handle, register)

    def close(self) -> None:
        """Ends running kernels (they fail as cancelled) and stops every stream."""
        self._cancel.set()
        with self._lock:
            streams = list(self._streams)
        for s in streams:
            s.stop()
        for s in streams:
            s.join(timeout=10)


def _dims(d: Dim3, what: str, limits: tuple[int, int, int]) -> tuple[int, int, int]:
    d = tuple(int(x) for x in d)
    if len(d) != 3 or any(x < 1 for x in d) or any(x > m for x, m in zip(d, limits)):
        raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"{what} dimensions {d} are outside 1..{limits}")
    return d
