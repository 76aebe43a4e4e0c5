"""What the `sim` backend's streams execute: one class per operation kind,
and how a kernel launch becomes a run on the SM model (device.py).

Operations run on a SimMachine: the parts of the simulated GPU they act on
(SimBackend is one), so this module does not know the backend."""
from __future__ import annotations

from typing import Callable, Protocol

from ptx_passes.launch_plan import PTB_EXTRA, PTB_STATE_BYTES, SLICE_EXTRA, extra_params_offset, total_blocks
from tally.backends.base import Dim3
from tally.backends.stream_memory_ops import wait_satisfied
from tally.protocol.errors import CUDA_ERROR_INVALID_VALUE, DeviceError
from tally.backends.sim.device import SM_UNITS, KernelRun, SimDevice
from tally.backends.sim.loop import SimLoop
from tally.backends.sim.memory import SimMemory
from tally.backends.sim.model import SimGPU, resident_blocks_per_sm
from tally.backends.sim.objects import SimEvent, SimFunction, SimStream
from tally.scheduler.run_mode import RunMode


class SimMachine(Protocol):
    """What an operation acts on: the GPU's parameters, its event loop, memory and
    SMs, the kernel counters, and how a stream goes on after an operation."""

    gpu: SimGPU
    loop: SimLoop
    memory: SimMemory
    device: SimDevice
    arrivals: int          # kernels handed to the SMs so far (their launch order)
    kernels_run: int

    def op_done(self, stream: SimStream) -> None:
        """The stream's current operation finished: start the next ones."""

    def fail(self, stream: SimStream, error: DeviceError) -> None:
        """Keep `error` on the stream for its next synchronization."""


def kernel_arrives(backend: SimMachine, stream: SimStream, op: "KernelOp") -> None:
    """The kernel's launch overhead has passed: hand it to the SM model as a
    run of blocks, slices or PTB tasks, per the launch contract. An SM cap
    limits the run to the blocks `sm_cap` SMs hold at once (its slots)."""
    fn = op.fn
    backend.arrivals += 1
    rank = (stream.priority, backend.arrivals)
    r = resident_blocks_per_sm(backend.gpu, fn.cost, op.block[0] * op.block[1] * op.block[2])
    unit = SM_UNITS // r
    cap_slots = None if op.sm_cap is None else op.sm_cap * r
    base_ns = fn.cost.block_time_us * 1000
    extras_at = extra_params_offset(fn.original_param_bytes)
    original_params = op.params[:fn.original_param_bytes]
    if fn.kind is RunMode.PTB:
        state_ptr, flag_ptr, *grid = PTB_EXTRA.unpack_from(op.params, extras_at)
        grid = tuple(grid)
        try:
            backend.memory.check_range(state_ptr, PTB_STATE_BYTES)
            backend.memory.check_range(flag_ptr, 4)
            counter0 = backend.memory.read_u32(state_ptr)
        except DeviceError as e:
            backend.fail(stream, e)
            backend.op_done(stream)
            return
        total = max(0, total_blocks(grid) - counter0)

        def flag_is_set() -> bool:
            return backend.memory.read_u32(flag_ptr) != 0

        def finished(started: int) -> None:
            backend.memory.unwatch(flag_ptr)
            backend.memory.write_u32(state_ptr, counter0 + started + run.exhausted_workers)
            _kernel_done(backend, stream, fn, original_params, grid, op.block,
                              range(counter0, counter0 + started))

        run = KernelRun(rank=rank, unit=unit, task_ns=int(base_ns * (1 + fn.cost.ptb_task_overhead)),
                        total=total, max_slots=_capped(total_blocks(op.grid), cap_slots), on_finish=finished,
                        flag_is_set=flag_is_set)
        backend.memory.watch(flag_ptr, lambda: backend.device.flag_changed(run))
        backend.device.add(run)
        return
    if fn.kind is RunMode.SLICE:
        offset, *grid = SLICE_EXTRA.unpack_from(op.params, extras_at)
        grid, count = tuple(grid), total_blocks(op.grid)
        if offset + count > total_blocks(grid):
            backend.fail(stream, DeviceError(CUDA_ERROR_INVALID_VALUE,
                                          f"slice [{offset}, {offset + count}) is outside grid {grid}"))
            backend.op_done(stream)
            return
        blocks, task_ns = range(offset, offset + count), int(base_ns * (1 + fn.cost.slice_block_overhead))
    else:
        grid, blocks, task_ns = op.grid, range(total_blocks(op.grid)), int(base_ns)
    backend.device.add(KernelRun(
        rank=rank, unit=unit, task_ns=task_ns, total=len(blocks), max_slots=_capped(len(blocks), cap_slots),
        on_finish=lambda _started: _kernel_done(backend, stream, fn, original_params, grid, op.block, blocks)))

def _capped(slots: int, cap_slots: int | None) -> int:
    return slots if cap_slots is None else min(slots, cap_slots)


def _kernel_done(backend: SimMachine, stream: SimStream, fn: SimFunction, params: bytes, grid: Dim3,
                 block: Dim3, blocks: range) -> None:
    backend.kernels_run += 1
    effect = (fn.original or fn).effect
    if effect is not None and len(blocks):
        try:
            effect(backend.memory, params, grid, block, blocks)
        except DeviceError as e:
            backend.fail(stream, e)
    backend.op_done(stream)

def record_done(backend: SimMachine, event: SimEvent, gen: int) -> None:
    event.pending.discard(gen)
    if gen == event.record_gen:
        event.time_ns = backend.loop.now_ns
    still = []
    for waiter_gen, stream in event.waiters:
        if waiter_gen in event.pending:
            still.append((waiter_gen, stream))
        else:
            # defer: finishing a wait may start more work; keep recursion shallow
            backend.loop.schedule(backend.loop.now_ns, lambda s=stream: backend.op_done(s))
    event.waiters = still


class Op:
    __slots__ = ()

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        """Begin executing; True when the op completed on the spot."""
        raise NotImplementedError


class KernelOp(Op):
    """A kernel reaches the SMs `overhead_us` after it reaches the head of its
    stream (None: the GPU's launch overhead; a graph's later nodes take less), and
    not before `issued_ns`, when the host's launch call that made it returned."""

    __slots__ = ("fn", "grid", "block", "params", "sm_cap", "overhead_us", "issued_ns")

    def __init__(self, fn: SimFunction, grid: Dim3, block: Dim3, params: bytes, sm_cap: int | None = None,
                 overhead_us: float | None = None, issued_ns: int = 0):
        self.fn, self.grid, self.block, self.params, self.sm_cap = fn, grid, block, params, sm_cap
        self.overhead_us, self.issued_ns = overhead_us, issued_ns

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        overhead = backend.gpu.launch_overhead_us if self.overhead_us is None else self.overhead_us
        at = max(backend.loop.now_ns, self.issued_ns) + int(overhead * 1000)
        backend.loop.schedule(at, lambda: kernel_arrives(backend, stream, self))
        return False


class CopyOp(Op):
    __slots__ = ("kind", "dst", "src", "nbytes", "duration_ns")

    def __init__(self, kind: str, dst, src, nbytes: int, duration_ns: int):
        self.kind, self.dst, self.src, self.nbytes, self.duration_ns = kind, dst, src, nbytes, duration_ns

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        backend.loop.schedule(backend.loop.now_ns + self.duration_ns, lambda: self._finish(backend, stream))
        return False

    def _finish(self, backend: SimMachine, stream: SimStream) -> None:
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


class ValueWaitOp(Op):
    """cuStreamWaitValue32/64: the stream holds here until the value in simulated
    memory meets the condition, looked at every POLL_NS of virtual time (work on
    other streams goes on meanwhile), or until its waits are released."""
    __slots__ = ("address", "value", "width", "condition")
    POLL_NS = 10_000

    def __init__(self, address: int, value: int, width: int, condition: int):
        self.address, self.value, self.width, self.condition = address, value, width, condition

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        backend.loop.schedule(backend.loop.now_ns, lambda: self._look(backend, stream))
        return False

    def _look(self, backend: SimMachine, stream: SimStream) -> None:
        try:
            current = int.from_bytes(backend.memory.read(self.address, self.width), "little")
        except DeviceError as e:
            backend.fail(stream, e)
            backend.op_done(stream)
            return
        if stream.waits_released or wait_satisfied(current, self.value, self.width, self.condition):
            backend.op_done(stream)
        else:
            backend.loop.schedule(backend.loop.now_ns + self.POLL_NS, lambda: self._look(backend, stream))


class RecordOp(Op):
    __slots__ = ("event", "gen")

    def __init__(self, event: SimEvent, gen: int):
        self.event, self.gen = event, gen

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        record_done(backend, self.event, self.gen)
        return True


class WaitOp(Op):
    __slots__ = ("event", "gen")

    def __init__(self, event: SimEvent, gen: int):
        self.event, self.gen = event, gen

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        if self.gen not in self.event.pending:
            return True
        self.event.waiters.append((self.gen, stream))
        return False


class CallbackOp(Op):
    __slots__ = ("fn",)

    def __init__(self, fn: Callable[[], None]):
        self.fn = fn

    def start(self, backend: SimMachine, stream: SimStream) -> bool:
        loop = backend.loop

        def run_then_resume() -> None:
            try:
                self.fn()
            finally:
                with loop.lock:
                    loop.catch_up()
                    backend.op_done(stream)
                    loop.changed.notify_all()      # not a loop event: wake waiters ourselves

        loop.schedule(loop.now_ns + int(backend.gpu.callback_latency_us * 1000),
                      lambda: loop.call_foreign(run_then_resume))
        return False
