"""The `sim` device backend: a virtual clock and a kernel cost model.

It implements DeviceBackend exactly, so the scheduler runs on it unchanged, and
it makes scheduler behaviour (the high-priority job's tail latency under
interference) testable deterministically on a machine without a GPU.

- Streams execute their operations in order; kernels go to the SM model in
  sim_device.py (waves of thread blocks, stream priorities, PTB workers);
  copies take latency + bytes / bandwidth on copy engines (no SMs).
- Memory operations really move bytes (sim_memory.py). Kernels compute nothing
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
its name (`define_kernel`) or the backend's KernelCostTable (sim_model.py).
Modules are real PTX (entries read by sim_ptx.py) or sim manifests made by
`sim_module_source(*names)`.
"""
from __future__ import annotations

import collections
import uuid
from dataclasses import dataclass, field
from typing import Callable

from ptx_passes.launch_plan import (PTB_EXTRA, PTB_STATE_BYTES, SLICE_EXTRA, extra_params_offset,
                                    total_blocks)
from tally.backends.base import (CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_INVALID_VALUE,
                                 CUDA_ERROR_NOT_FOUND, CUDA_ERROR_NOT_READY, DeviceDescription,
                                 DeviceError, Dim3, KernelParam, ModuleSource)
from tally.backends.sim_device import SM_UNITS, KernelRun, SimDevice
from tally.backends.sim_loop import SimClock, SimLoop
from tally.backends.sim_memory import SimMemory
from tally.backends.sim_model import (A100_SXM4_40GB, KernelCost, KernelCostTable, SimGPU,
                                      resident_blocks_per_sm)
from tally.backends.sim_ptx import entry_params, global_sizes

KernelEffect = Callable[[SimMemory, bytes, Dim3, Dim3, range], None]
SIM_MANIFEST_PREFIX = b"tally-sim-module:"

# CUdevice_attribute ids (cuda.h) the sim answers.
_ATTR_MAX_THREADS_PER_BLOCK = 1
_ATTR_MAX_BLOCK_DIM = (2, 3, 4)
_ATTR_MAX_GRID_DIM = (5, 6, 7)
_ATTR_WARP_SIZE = 10
_ATTR_MULTIPROCESSOR_COUNT = 16
_ATTR_MAX_THREADS_PER_SM = 39
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76
_ATTR_MAX_BLOCKS_PER_SM = 106


def sim_module_source(*kernel_names: str) -> ModuleSource:
    """A module for the sim made of kernels defined with define_kernel (or
    priced by the cost table), without writing PTX."""
    return ModuleSource(original=SIM_MANIFEST_PREFIX + ",".join(kernel_names).encode())


@dataclass(frozen=True)
class SimKernelDef:
    param_sizes: tuple[int, ...] | None = None   # None: take the layout from the PTX
    cost: KernelCost | None = None               # None: the cost table's entry
    effect: KernelEffect | None = None


def _packed(sizes: tuple[int, ...]) -> tuple[KernelParam, ...]:
    out, offset = [], 0
    for size in sizes:
        align = min(size, 8) if size in (1, 2, 4, 8) else 8
        offset = -(-offset // align) * align
        out.append(KernelParam(offset, size, align))
        offset += size
    return tuple(out)


@dataclass(eq=False)
class SimFunction:
    name: str
    params: tuple[KernelParam, ...]
    cost: KernelCost
    effect: KernelEffect | None
    params_known: bool
    kind: str = "original"            # "original" | "sliced" | "ptb"
    original: "SimFunction | None" = None

    @property
    def original_param_bytes(self) -> int:
        base = self.original or self
        return max((p.offset + p.size for p in base.params), default=0)

    @property
    def launch_param_bytes(self) -> int:
        extra = {"original": None, "sliced": SLICE_EXTRA, "ptb": PTB_EXTRA}[self.kind]
        if extra is None:
            return self.original_param_bytes
        return extra_params_offset(self.original_param_bytes) + extra.size


@dataclass(eq=False)
class SimModule:
    entries: dict[str, tuple[KernelParam, ...] | None]
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)
    loaded: bool = True


@dataclass(eq=False)
class SimStream:
    priority: int
    ops: collections.deque = field(default_factory=collections.deque)
    busy: bool = False
    errors: collections.deque = field(default_factory=collections.deque)
    destroyed: bool = False

    @property
    def idle(self) -> bool:
        return not self.ops


@dataclass(eq=False)
class SimEvent:
    timing: bool
    record_gen: int = 0
    pending: set = field(default_factory=set)
    time_ns: int | None = None
    waiters: list = field(default_factory=list)     # (gen, stream)

    @property
    def complete(self) -> bool:
        return self.record_gen not in self.pending


class SimBackend:
    kind = "sim"
    errors_are_context_wide = False

    def __init__(self, gpu: SimGPU = A100_SXM4_40GB, *, costs: KernelCostTable | None = None,
                 realtime: bool = False, eager: bool = False):
        self.gpu = gpu
        self.costs = costs or KernelCostTable()
        self.kernels: dict[str, SimKernelDef] = {}
        self.loop = SimLoop(realtime=realtime)
        self.clock = SimClock(self.loop)
        self.memory = SimMemory(gpu.memory_bytes)
        self.device = SimDevice(self.loop, gpu.sm_count, eager=eager)
        self._streams: list[SimStream] = []
        self._arrivals = 0
        self.kernels_run = 0

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
                 _ATTR_MAX_BLOCKS_PER_SM: g.max_blocks_per_sm}
        attrs.update(zip(_ATTR_MAX_BLOCK_DIM, (1024, 1024, 64)))
        attrs.update(zip(_ATTR_MAX_GRID_DIM, (2**31 - 1, 65535, 65535)))
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
            params, known = _packed(definition.param_sizes), True
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

    # streams and events ----------------------------------------------------------------
    def stream_create(self, priority: int = 0) -> SimStream:
        with self.loop.lock:
            stream = SimStream(priority)
            self._streams.append(stream)
            return stream

    def stream_destroy(self, stream: SimStream) -> None:
        with self.loop.lock:
            stream.destroyed = True   # pending work still runs, as in CUDA
            if stream.idle and stream in self._streams:
                self._streams.remove(stream)

    def event_create(self, timing: bool = True) -> SimEvent:
        return SimEvent(timing)

    def event_destroy(self, event: SimEvent) -> None:
        pass   # pending records still complete; nothing to release

    # asynchronous operations ---------------------------------------------------------------
    def launch(self, fn: SimFunction, grid: Dim3, block: Dim3, shared_bytes: int,
               stream: SimStream, params: bytes) -> None:
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
        self._enqueue(stream, _KernelOp(fn, tuple(grid), tuple(block), bytes(params)))

    def memcpy_htod_async(self, dst: int, src: memoryview, stream: SimStream) -> None:
        src = memoryview(src).cast("B")
        self._check(dst, src.nbytes)
        self._enqueue(stream, _CopyOp("htod", dst, src, src.nbytes, self._copy_ns(src.nbytes, self.gpu.htod_gb_per_s)))

    def memcpy_dtoh_async(self, dst: memoryview, src: int, stream: SimStream) -> None:
        dst = memoryview(dst).cast("B")
        if dst.readonly:
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, "device-to-host copy into a read-only buffer")
        self._check(src, dst.nbytes)
        self._enqueue(stream, _CopyOp("dtoh", dst, src, dst.nbytes, self._copy_ns(dst.nbytes, self.gpu.dtoh_gb_per_s)))

    def memcpy_dtod_async(self, dst: int, src: int, nbytes: int, stream: SimStream) -> None:
        self._check(dst, nbytes)
        self._check(src, nbytes)
        self._enqueue(stream, _CopyOp("dtod", dst, src, nbytes, self._copy_ns(nbytes, self.gpu.dtod_gb_per_s)))

    def memset_async(self, dst: int, value: int, element_size: int, count: int,
                     stream: SimStream) -> None:
        if element_size not in (1, 2, 4):
            raise DeviceError(CUDA_ERROR_INVALID_VALUE, f"memset element size must be 1, 2 or 4, got {element_size}")
        self._check(dst, element_size * count)
        nbytes = element_size * count
        self._enqueue(stream, _CopyOp("memset", dst, (value, element_size, count), nbytes,
                                      self._copy_ns(nbytes, self.gpu.dtod_gb_per_s)))

    def event_record(self, event: SimEvent, stream: SimStream) -> None:
        with self.loop.lock:
            event.record_gen += 1
            event.pending.add(event.record_gen)
            self._enqueue(stream, _RecordOp(event, event.record_gen))

    def stream_wait_event(self, stream: SimStream, event: SimEvent) -> None:
        with self.loop.lock:
            self._enqueue(stream, _WaitOp(event, event.record_gen))

    def host_callback(self, stream: SimStream, fn: Callable[[], None]) -> None:
        self._enqueue(stream, _CallbackOp(fn))

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

    def _enqueue(self, stream: SimStream, op: "_Op") -> None:
        with self.loop.lock:
            if stream.destroyed:
                raise DeviceError(CUDA_ERROR_INVALID_HANDLE, "stream was destroyed")
            self.loop.catch_up()
            stream.ops.append(op)
            if not stream.busy:
                self._advance(stream)

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

    # kernels on the device model
    def kernel_arrives(self, stream: SimStream, op: "_KernelOp") -> None:
        fn = op.fn
        self._arrivals += 1
        rank = (stream.priority, self._arrivals)
        r = resident_blocks_per_sm(self.gpu, fn.cost, op.block[0] * op.block[1] * op.block[2])
        unit = SM_UNITS // r
        base_ns = fn.cost.block_time_us * 1000
        extras_at = extra_params_offset(fn.original_param_bytes)
        original_params = op.params[:fn.original_param_bytes]
        if fn.kind == "ptb":
            state_ptr, flag_ptr, *grid = PTB_EXTRA.unpack_from(op.params, extras_at)
            grid = tuple(grid)
            try:
                self.memory.check_range(state_ptr, PTB_STATE_BYTES)
                self.memory.check_range(flag_ptr, 4)
                counter0 = self.memory.read_u32(state_ptr)
            except DeviceError as e:
                self.fail(stream, e)
                self.op_done(stream)
                return
            total = max(0, total_blocks(grid) - counter0)

            def flag_is_set() -> bool:
                return self.memory.read_u32(flag_ptr) != 0

            def finished(started: int) -> None:
                self.memory.unwatch(flag_ptr)
                self.memory.write_u32(state_ptr, counter0 + started + run.exhausted_workers)
                self._kernel_done(stream, fn, original_params, grid, op.block,
                                  range(counter0, counter0 + started))

            run = KernelRun(rank=rank, unit=unit, task_ns=int(base_ns * (1 + fn.cost.ptb_task_overhead)),
                            total=total, max_slots=total_blocks(op.grid), on_finish=finished,
                            flag_is_set=flag_is_set)
            self.memory.watch(flag_ptr, lambda: self.device.flag_changed(run))
            self.device.add(run)
            return
        if fn.kind == "sliced":
            offset, *grid = SLICE_EXTRA.unpack_from(op.params, extras_at)
            grid, count = tuple(grid), total_blocks(op.grid)
            if offset + count > total_blocks(grid):
                self.fail(stream, DeviceError(CUDA_ERROR_INVALID_VALUE,
                                              f"slice [{offset}, {offset + count}) is outside grid {grid}"))
                self.op_done(stream)
                return
            blocks, task_ns = range(offset, offset + count), int(base_ns * (1 + fn.cost.slice_block_overhead))
        else:
            grid, blocks, task_ns = op.grid, range(total_blocks(op.grid)), int(base_ns)
        self.device.add(KernelRun(
            rank=rank, unit=unit, task_ns=task_ns, total=len(blocks), max_slots=len(blocks),
            on_finish=lambda _started: self._kernel_done(stream, fn, original_params, grid, op.block, blocks)))

    def _kernel_done(self, stream: SimStream, fn: SimFunction, params: bytes, grid: Dim3,
                     block: Dim3, blocks: range) -> None:
        self.kernels_run += 1
        effect = (fn.original or fn).effect
        if effect is not None and len(blocks):
            try:
                effect(self.memory, params, grid, block, blocks)
            except DeviceError as e:
                self.fail(stream, e)
        self.op_done(stream)

    def record_done(self, event: SimEvent, gen: int) -> None:
        event.pending.discard(gen)
        if gen == event.record_gen:
            event.time_ns = self.loop.now_ns
        still = []
        for waiter_gen, stream in event.waiters:
            if waiter_gen in event.pending:
                still.append((waiter_gen, stream))
            else:
                # defer: finishing a wait may start more work; keep recursion shallow
                self.loop.schedule(self.loop.now_ns, lambda s=stream: self.op_done(s))
        event.waiters = still


class _Op:
    __slots__ = ()

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        """Begin executing; True when the op completed on the spot."""
        raise NotImplementedError


class _KernelOp(_Op):
    __slots__ = ("fn", "grid", "block", "params")

    def __init__(self, fn: SimFunction, grid: Dim3, block: Dim3, params: bytes):
        self.fn, self.grid, self.block, self.params = fn, grid, block, params

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        at = backend.loop.now_ns + int(backend.gpu.launch_overhead_us * 1000)
        backend.loop.schedule(at, lambda: backend.kernel_arrives(stream, self))
        return False


class _CopyOp(_Op):
    __slots__ = ("kind", "dst", "src", "nbytes", "duration_ns")

    def __init__(self, kind: str, dst, src, nbytes: int, duration_ns: int):
        self.kind, self.dst, self.src, self.nbytes, self.duration_ns = kind, dst, src, nbytes, duration_ns

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        backend.loop.schedule(backend.loop.now_ns + self.duration_ns, lambda: self._finish(backend, stream))
        return False

    def _finish(self, backend: SimBackend, stream: SimStream) -> None:
        mem = backend.memory
        try:
            if self.kind == "htod":
                mem.write(self.dst, self.src)
            elif self.kind == "dtoh":
                self.dst[:] = mem.read(self.src, self.nbytes)
            elif self.kind == "dtod":
                mem.write(self.dst, mem.read(self.src, self.nbytes))
            else:
                value, element_size, count = self.src
                mem.fill(self.dst, value, element_size, count)
        except DeviceError as e:
            backend.fail(stream, e)
        backend.op_done(stream)


class _RecordOp(_Op):
    __slots__ = ("event", "gen")

    def __init__(self, event: SimEvent, gen: int):
        self.event, self.gen = event, gen

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        backend.record_done(self.event, self.gen)
        return True


class _WaitOp(_Op):
    __slots__ = ("event", "gen")

    def __init__(self, event: SimEvent, gen: int):
        self.event, self.gen = event, gen

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        if self.gen not in self.event.pending:
            return True
        self.event.waiters.append((self.gen, stream))
        return False


class _CallbackOp(_Op):
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def start(self, backend: SimBackend, stream: SimStream) -> bool:
        loop = backend.loop

        def run_then_resume() -> None:
            try:
                self.fn()
            finally:
                with loop.lock:
                    loop.catch_up()
                    backend.op_done(stream)

        loop.schedule(loop.now_ns + int(backend.gpu.callback_latency_us * 1000),
                      lambda: loop.call_foreign(run_then_resume))
        return False
