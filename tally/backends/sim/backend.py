"""The `sim` device backend: a virtual clock and a kernel cost model.

It implements DeviceBackend exactly, so the scheduler runs on it unchanged, and
it makes scheduler behaviour (the high-priority job's tail latency under
interference) testable deterministically on a machine without a GPU.

- Streams execute their operations in order; kernels go to the SM model in
  device.py (waves of thread blocks, stream priorities, PTB workers); a launch
  with an SM cap holds at most the blocks that many SMs hold at once;
  copies take latency + bytes / bandwidth on copy engines (no SMs).
- Memory operations really move bytes (memory.py). Kernels compute nothing
  unless their definition carries an `effect(memory, params, grid, block,
  blocks)` that applies the original kernel's work to a range of linear block
  indices; sliced and PTB launches call it for exactly the blocks they ran,
  which is how tests check that a preempted kernel computes the right result.
- Transformed launches follow ptx_passes.launch_plan: sliced functions read
  (block_offset, grid) from the extra parameters; PTB functions read the state
  buffer's task counter at start, watch its preempt flag and write the counter
  back when they end.
- Discrete mode (default): time passes only when someone steps the loop (a
  blocking call does so itself). `realtime=True`: virtual time follows the wall
  clock, for `tally-server --backend sim`.

Kernel identities: a function's cost comes from the definition registered under
its name (`define_kernel`) or the backend's KernelCostTable (model.py).
Modules are real PTX (entries read by ptx.py) or sim manifests made by
`sim_module_source(*names)`.
"""
from __future__ import annotations

import uuid
from typing import Callable

from tally.backends.base import (
    BackendTraits,
    DeviceDescription,
    Dim3,
    ModuleSource,
    NoHostRegistration,
    NoManagedMemory,
    NoVirtualMemory,
    clamp_sm_grant,
)
from tally.protocol.errors import (
    CUDA_ERROR_INVALID_HANDLE,
    CUDA_ERROR_INVALID_VALUE,
    CUDA_ERROR_NOT_FOUND,
    CUDA_ERROR_NOT_READY,
    DeviceError,
)
from tally.backends.clusters import KernelCluster, launch_cluster
from tally.backends.graph_launch import GraphCopy, GraphMemset, KernelGraph
from tally.backends.sim.device import SimDevice
from tally.backends.sim.loop import SimClock, SimLoop
from tally.backends.sim.memory import SimMemory
from tally.backends.sim.model import A100_SXM4_40GB, GPU_PRESETS, KernelCost, KernelCostTable, SimGPU
from tally.backends.sim.objects import (SIM_MANIFEST_PREFIX, KernelEffect, SimEvent, SimFunction,
                                        SimKernelDef, SimModule, SimStream, packed_params,
                                        sim_module_source)
from tally.backends.sim.ops import CallbackOp, CopyOp, KernelOp, Op, RecordOp, ValueWaitOp, WaitOp
from tally.backends.sim.ptx import entry_params, global_sizes
from tally.backends.sim.variants import SimVariantProvider
from tally.backends.tensor_maps import TallyTensorMaps
from tally.backends.texture_objects import TallyTextureObjects

__all__ = ["KernelEffect", "SimBackend", "SimFunction", "sim_module_source"]

# CUdevice_attribute ids (cuda.h) the sim answers.
_ATTR_MAX_THREADS_PER_BLOCK = 1
_ATTR_MAX_BLOCK_DIM = (2, 3, 4)
_ATTR_MAX_GRID_DIM = (5, 6, 7)
_ATTR_WARP_SIZE = 10
_ATTR_MULTIPROCESSOR_COUNT = 16
_ATTR_MAX_THREADS_PER_SM = 39
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76
_ATTR_MAX_BLOCKS_PER_SM = 106
_ATTR_COOPERATIVE_LAUNCH, _ATTR_COOPERATIVE_MULTI_DEVICE_LAUNCH = 95, 96


class SimBackend(NoVirtualMemory, NoManagedMemory, NoHostRegistration, TallyTensorMaps, TallyTextureObjects):
    kind = "sim"
    traits = BackendTraits(runs_cubins=True, errors_are_context_wide=False, session_spin_us=20.0,
                           executes_work=True, virtual_clock=True, printf_per_stream=False,
                           variants_from_ptx=False, confines_sms=True)

    def __init__(self, gpu: SimGPU = A100_SXM4_40GB, *, costs: KernelCostTable | None = None,
                 realtime: bool = False, eager: bool = False, host_launch_us: float = 0.0,
                 host_graph_launch_us: float | None = None):
        """host_launch_us: the host (server) CPU time of each kernel launch call, modeled
        as one thread per stream making its calls in turn (a job's session thread): a
        call's kernels reach their stream no earlier than the previous call's end plus
        this. host_graph_launch_us: the same for a graph replay, one call for all its
        kernels (None: host_launch_us). 0: launch calls take no time (the executor's
        own costs are not modeled)."""
        for name, value in (("host_launch_us", host_launch_us), ("host_graph_launch_us", host_graph_launch_us)):
            if value is not None and not value >= 0:
                raise ValueError(f"{name} must be >= 0, got {value}")
        self.gpu = gpu
        self.host_launch_us = host_launch_us
        self.host_graph_launch_us = host_graph_launch_us
        self._host_free_ns: dict[int, int] = {}     # id(stream) -> when its last launch call ends
        self.costs = costs or KernelCostTable()
        self.kernels: dict[str, SimKernelDef] = {}
        self.loop = SimLoop(realtime=realtime)
        self.clock = SimClock(self.loop)
        self.memory = SimMemory(gpu.memory_bytes)
        self.device = SimDevice(self.loop, gpu.sm_count, eager=eager)
        self._streams: list[SimStream] = []
        self.arrivals = 0
        self.kernels_run = 0

    @classmethod
    def realtime(cls, gpu: SimGPU | str = A100_SXM4_40GB, **options) -> "SimBackend":
        """The sim for `tally-server --backend sim`: virtual time follows the wall
        clock. `gpu` is a SimGPU or a preset name (sim.model.GPU_PRESETS)."""
        if isinstance(gpu, str):
            if gpu not in GPU_PRESETS:
                raise ValueError(f"unknown simulated GPU {gpu!r}; choose one of {', '.join(GPU_PRESETS)}")
            gpu = GPU_PRESETS[gpu]
        return cls(gpu, realtime=True, **options)

    def variant_provider(self) -> SimVariantProvider:
        """Sliced and PTB kernels modeled on the cost model, not built from PTX."""
        return SimVariantProvider()

    # kernel definitions ----------------------------------------------------------
    def define_kernel(self, name: str, param_sizes: tuple[int, ...] | None = None,
                      cost: KernelCost | None = None, effect: KernelEffect | None = None) -> None:
        self.kernels[name] = SimKernelDef(param_sizes, cost, effect)

    def run_until(self, seconds: float) -> None:
        self.loop.run_until(int(round(seconds * 1e9)))

    def now(self) -> float:
        return self.clock.now()

    # device ----------------------------------------------------------------------
    def describe(self) -> DeviceDescription:
        g = self.gpu
        attrs = {_ATTR_MAX_THREADS_PER_BLOCK: g.max_threads_per_block, _ATTR_WARP_SIZE: 32,
                 _ATTR_MULTIPROCESSOR_COUNT: g.sm_count,
                 _ATTR_MAX_THREADS_PER_SM: g.max_threads_per_sm,
                 _ATTR_CC_MAJOR: g.compute_capability[0], _ATTR_CC_MINOR: g.compute_capability[1],
                 _ATTR_MAX_BLOCKS_PER_SM: g.max_blocks_per_sm,
                 _ATTR_COOPERATIVE_LAUNCH: 1, _ATTR_COOPERATIVE_MULTI_DEVICE_LAUNCH: 1}
        attrs.update(zip(_ATTR_MAX_BLOCK_DIM, (1024, 1024, 64), strict=True))
        attrs.update(zip(_ATTR_MAX_GRID_DIM, (2**31 - 1, 65535, 65535), strict=True))
        return DeviceDescription(name=g.name, uuid=uuid.uuid5(uuid.NAMESPACE_DNS, g.name).bytes,
                                 total_memory=g.memory_bytes, compute_capability=g.compute_capability,
                                 sm_count=g.sm_count, attributes=attrs)

    # memory ------------------------------------------------------------------------
    def mem_alloc(self, nbytes: int) -> int:
        with self.loop.lock:
            return self.memory.alloc(nbytes)

    def mem_free(self, ptr: int) -> None:
        with self.loop.lock:
            self.memory.free(ptr)

    def mem_info(self) -> tuple[int, int]:
        return self.memory.total_bytes - self.memory.used_bytes, self.memory.total_bytes

    def write_now(self, address: int, data: bytes) -> None:
        """The simulated device keeps no bytes (a texture descriptor is only its address)."""

    # modules -------------------------------------------------------------------------
    def module_load(self, source: ModuleSource) -> SimModule:
        with self.loop.lock:
            if source.original.startswith(SIM_MANIFEST_PREFIX):
                names = source.original[len(SIM_MANIFEST_PREFIX):].decode().split(",")
                return SimModule({n: None for n in names if n})
            if source.ptx is None:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                                  "the sim backend reads kernel names from PTX and this module has "
                                  "none (cubin only); load a module with PTX or a sim manifest")
            module = SimModule(dict(entry_params(source.ptx)))
            for name, size in global_sizes(source.ptx).items():
                module.globals[name] = (self.memory.alloc(size), size)
            return module

    def module_unload(self, module: SimModule) -> None:
        with self.loop.lock:
            module.loaded = False
            for ptr, _size in module.globals.values():
                self.memory.free(ptr)
            module.globals.clear()

    def module_function(self, module: SimModule, name: str) -> SimFunction:
        if name not in module.entries:
            raise DeviceError(CUDA_ERROR_NOT_FOUND, f"module has no kernel named {name!r}")
        definition = self.kernels.get(name, SimKernelDef())
        layout = module.entries[name]
        if definition.param_sizes is not None:
            params, known = packed_params(definition.param_sizes), True
        elif layout is not None:
            params, known = layout, True
        else:
            params, known = (), False
        return SimFunction(name, params, definition.cost or self.costs.lookup(name),
                           definition.effect, known)

    def module_global(self, module: SimModule, name: str) -> tuple[int, int]:
        if name not in module.globals:
            raise DeviceError(CUDA_ERROR_NOT_FOUND, f"module has no global named {name!r}")
        return module.globals[name]

    def function_attributes(self, fn) -> dict:
        return {}       # the cost model has no per-thread resources

    # streams and events ----------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> SimStream:
        with self.loop.lock:
            stream = SimStream(priority)
            self._streams.append(stream)
            return stream

    def stream_destroy(self, stream: SimStream) -> None:
        with self.loop.lock:
            self._host_free_ns.pop(id(stream), None)
            stream.destroyed = True   # pending work still runs, as in CUDA
            if stream.idle and stream in self._streams:
                self._streams.remove(stream)

    def event_create(self, timing: bool = True) -> SimEvent:
        return SimEvent(timing)

    def event_destroy(self, event: SimEvent) -> None:
        pass   # pending records still complete; nothing to release

    # asynchronous operations ---------------------------------------------------------------
    def sm_grant(self, requested_sms: int) -> int:
        return clamp_sm_grant(requested_sms, self.gpu.sm_count)

    def launch(self, fn: SimFunction, grid: Dim3, block: Dim3, shared_bytes: int,
               stream: SimStream, params: bytes, sm_cap: int | None = None,
               cluster: Dim3 | None = None, cooperative: bool = False) -> None:
        # A cooperative grid is timed as any other: the model runs a launch's blocks in
        # waves, and the client already refused grids that cannot be resident at once.
        op = self._kernel_op(fn, grid, block, params, sm_cap, cluster)
        op.issued_ns = self._host_call(stream, self.host_launch_us)
        self._enqueue(stream, op)

    # graphs: a replay is one host call; its kernels run in order on the stream, the
    # first after the launch overhead, the others after a graph node's
    def graph_create(self, graph: KernelGraph) -> KernelGraph:
        return graph

    def graph_launch(self, graph: KernelGraph, stream: SimStream, sm_cap: int | None = None) -> None:
        ops = [n if isinstance(n, (GraphMemset, GraphCopy)) else
               self._kernel_op(n.function, n.grid, n.block, n.params, sm_cap, n.cluster) for n in graph.nodes]
        cost = self.host_launch_us if self.host_graph_launch_us is None else self.host_graph_launch_us
        issued = self._host_call(stream, cost)
        for i, op in enumerate(ops):
            if isinstance(op, GraphMemset):
                self.memset_async(op.dst, op.value, op.element_size, op.count, stream)
                continue
            if isinstance(op, GraphCopy):
                self.memcpy_dtod_async(op.dst, op.src, op.nbytes, stream)
                continue
            op.issued_ns = issued
            if i:
                op.overhead_us = self.gpu.graph_node_overhead_us
            self._enqueue(stream, op)

    def graph_destroy(self, graph: KernelGraph) -> None:
        pass

    def _host_call(self, stream: SimStream, cost_us: float) -> int:
        """When a launch call made now for `stream`, taking `cost_us`, returns (virtual ns)."""
        if not cost_us:
            return 0
        with self.loop.lock:
            end = max(self.loop.now_ns, self._host_free_ns.get(id(stream), 0)) + int(cost_us * 1000)
            self._host_free_ns[id(stream)] = end
            return end

    def _kernel_op(self, fn: SimFunction, grid: Dim3, block: Dim3, params: bytes, sm_cap: int | None,
                   cluster: Dim3 | None) -> KernelOp:
        if not isinstance(fn, SimFunction):
            raise DeviceError(CUDA_ERROR_INVALID_HANDLE, f"{fn!r} is not a sim function")
        if min(grid) < 1 or min(block) < 1:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"grid {grid} / block {block} has a zero dimension")
        threads = block[0] * block[1] * block[2]
        if threads > self.gpu.max_threads_per_block:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"block {block} has {threads} threads, the device allows "
                              f"{self.gpu.max_threads_per_block}")
        if fn.params_known and len(params) != fn.launch_param_bytes:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE,
                              f"{fn.name} takes {fn.launch_param_bytes} parameter bytes, got {len(params)}")
        if sm_cap is not None and not 1 <= sm_cap <= self.gpu.sm_count:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"SM cap {sm_cap} is outside 1..{self.gpu.sm_count}")
        if cluster is not None:
            # The cost model has no clusters (a cluster's blocks cost what they cost
            # apart); the device's limits on its shape are still the device's.
            launch_cluster(fn.name, tuple(grid), tuple(cluster), KernelCluster())
        return KernelOp(fn, tuple(grid), tuple(block), bytes(params), sm_cap)

    def memcpy_htod_async(self, dst: int, src: memoryview, stream: SimStream) -> None:
        src = memoryview(src).cast("B")
        self._check(dst, src.nbytes)
        self._enqueue(stream, CopyOp("htod", dst, src, src.nbytes, self._copy_ns(src.nbytes, self.gpu.htod_gb_per_s)))

    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream: SimStream) -> None:
        dst = memoryview(dst).cast("B")
        if dst.readonly:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, "device-to-host copy into a read-only buffer")
        self._check(src, dst.nbytes)
        self._enqueue(stream, CopyOp("dtoh", dst, src, dst.nbytes, self._copy_ns(dst.nbytes, self.gpu.dtoh_gb_per_s)))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: SimStream) -> None:
        self._check(dst, nbytes)
        self._check(src, nbytes)
        self._enqueue(stream, CopyOp("dtod", dst, src, nbytes, self._copy_ns(nbytes, self.gpu.dtod_gb_per_s)))

    def memset_async(self, dst: int, value: int, element_size: int, count: int,
                     stream: SimStream) -> None:
        if element_size not in (1, 2, 4):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size must be 1, 2 or 4, got {element_size}")
        self._check(dst, element_size * count)
        nbytes = element_size * count
        self._enqueue(stream, CopyOp("memset", dst, (value, element_size, count), nbytes,
                                      self._copy_ns(nbytes, self.gpu.dtod_gb_per_s)))

    def event_record(self, event: SimEvent, stream: SimStream) -> None:
        with self.loop.lock:
            event.record_gen += 1
            event.pending.add(event.record_gen)
            self._enqueue(stream, RecordOp(event, event.record_gen))

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        with self.loop.lock:
            self._enqueue(stream, WaitOp(event, event.record_gen))

    def host_callback(self, stream: SimStream, fn: Callable[[], None]) -> None:
        self._enqueue(stream, CallbackOp(fn))

    def stream_wait_value(self, stream: SimStream, address: int, value: int, width: int,
                          condition: int) -> None:
        self._check(address, width)
        self._enqueue(stream, ValueWaitOp(address, value, width, condition))

    def stream_write_value(self, stream: SimStream, address: int, value: int, width: int) -> None:
        self._check(address, width)
        data = (value & ((1 << (8 * width)) - 1)).to_bytes(width, "little")
        self._enqueue(stream, CopyOp("htod", address, data, width, self._copy_ns(width, self.gpu.dtod_gb_per_s)))

    def stream_release_waits(self, stream: SimStream) -> None:
        with self.loop.lock:
            stream.waits_released = True

    def stream_set_access_policy(self, stream: SimStream, window) -> None:
        pass   # the cost model has no L2 residency to steer

    # synchronization ------------------------------------------------------------------------
    def stream_synchronize(self, stream: SimStream) -> None:
        self.loop.catch_up()
        self.loop.wait_until(lambda: stream.idle, "a stream to drain")
        self._raise_pending(stream)

    def stream_query(self, stream: SimStream) -> bool:
        with self.loop.lock:
            self.loop.catch_up()
            self._raise_pending(stream)
            return stream.idle

    def event_synchronize(self, event: SimEvent) -> None:
        self.loop.catch_up()
        self.loop.wait_until(lambda: event.complete, "an event")

    def event_query(self, event: SimEvent) -> bool:
        with self.loop.lock:
            self.loop.catch_up()
            return event.complete

    def event_host_time(self, event: SimEvent) -> float | None:
        return None             # its time is the virtual clock's, this server's own

    def event_elapsed_ms(self, start: SimEvent, end: SimEvent) -> float:
        with self.loop.lock:
            for ev in (start, end):
                if not ev.timing or ev.record_gen == 0:
                    raise DeviceError(CUDA_ERROR_INVALID_HANDLE,
                                      "elapsed time needs two recorded events created with timing")
                if not ev.complete or ev.time_ns is None:
                    raise DeviceError(CUDA_ERROR_NOT_READY, "event has not completed yet")
            return (end.time_ns - start.time_ns) / 1e6

    def synchronize(self) -> None:
        self.loop.catch_up()
        self.loop.wait_until(lambda: all(s.idle for s in self._streams), "the device to drain")
        for stream in list(self._streams):
            self._raise_pending(stream)

    def data_plane(self) -> None:
        return None       # in-process, on a virtual clock: its work is Python's to issue

    def close(self) -> None:
        self.loop.close()

    # internals ---------------------------------------------------------------------------------
    def _check(self, ptr: int, nbytes: int) -> None:
        with self.loop.lock:
            if nbytes < 0:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"negative size {nbytes}")
            try:
                self.memory.check_range(ptr, nbytes)
            except DeviceError as e:
                raise DeviceError(CUDA_ERROR_INVALID_VALUE, e.message) from None

    def _copy_ns(self, nbytes: int, gb_per_s: float) -> int:
        return int(self.gpu.copy_latency_us * 1000 + nbytes / gb_per_s)

    def _raise_pending(self, stream: SimStream) -> None:
        with self.loop.lock:
            if stream.errors:
                raise stream.errors.popleft()

    def _enqueue(self, stream: SimStream, op: "Op") -> None:
        with self.loop.lock:
            if stream.destroyed:
                raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "stream was destroyed")
            self.loop.catch_up()
            stream.ops.append(op)
            if not stream.busy:
                self._advance(stream)
                self.loop.changed.notify_all()     # ops may have completed on the spot

    def _advance(self, stream: SimStream) -> None:
        while stream.ops and not stream.busy:
            stream.busy = True
            if stream.ops[0].start(self, stream):
                stream.ops.popleft()
                stream.busy = False
        if stream.idle and stream.destroyed and stream in self._streams:
            self._streams.remove(stream)

    def op_done(self, stream: SimStream) -> None:
        stream.ops.popleft()
        stream.busy = False
        self._advance(stream)

    def fail(self, stream: SimStream, error: DeviceError) -> None:
        stream.errors.append(error)

