"""Simulated jobs for the co-location benchmark, driving a StreamExecutor the
way a client session would: every GPU operation is submitted to the executor,
and the job learns about completions through host callbacks in stream order
(as cuLaunchHostFunc / a synchronizing copy would tell a real job).

- InferenceJob: a single-stream server. Requests arrive at given times and are
  served one at a time in arrival order; a request is an input copy, the
  model's kernels (launched asynchronously, like PyTorch's CPU running ahead),
  an output copy, and a callback that records its latency (completion minus
  arrival, so queueing behind earlier requests counts, as a user sees it).
- TrainingJob: an endless loop of iterations, each a batch copy, the model's
  kernels and a loss read-back, then the next iteration (the read-back is the
  synchronization point a training loop has at every step).
"""
from __future__ import annotations

import collections
import struct

from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import SimGPU, resident_blocks_per_sm
from tally.bench.workloads import InferenceModel, KernelShape, TrainingModel
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.ops import HostCallback, Launch, MemcpyDtoH, MemcpyHtoD

_PARAMS = struct.Struct("<QQ")     # every modeled kernel takes (in, out) pointers


def alone_time(gpu: SimGPU, shape: KernelShape) -> float:
    """Seconds the kernel takes on an idle simulated GPU (the wave model)."""
    per_wave = gpu.sm_count * resident_blocks_per_sm(gpu, shape.cost, shape.threads)
    waves = -(-shape.blocks // per_wave)
    return (gpu.launch_overhead_us + waves * shape.cost.block_time_us) / 1e6


def install_kernels(sim: SimBackend, shapes: tuple[KernelShape, ...]) -> dict[str, object]:
    """Define the shapes' kernels on the sim and load them as one module."""
    names = []
    for shape in shapes:
        if shape.name not in sim.kernels:
            sim.define_kernel(shape.name, param_sizes=(8, 8), cost=shape.cost)
            names.append(shape.name)
    unique = list(dict.fromkeys(s.name for s in shapes))
    module = sim.module_load(sim_module_source(*unique))
    return {name: sim.module_function(module, name) for name in unique}


def _launches(sim: SimBackend, shapes: tuple[KernelShape, ...], in_ptr: int, out_ptr: int) -> list[Launch]:
    functions = install_kernels(sim, shapes)
    params = _PARAMS.pack(in_ptr, out_ptr)
    return [Launch(functions[s.name], (s.blocks, 1, 1), (s.threads, 1, 1), 0, params) for s in shapes]


class InferenceJob:
    def __init__(self, sim: SimBackend, executor: StreamExecutor, client_id: str,
                 model: InferenceModel, arrivals):
        self.sim, self.executor, self.client_id = sim, executor, client_id
        self.arrivals = [float(t) for t in arrivals]
        self.latencies: list[float] = []          # seconds, in completion order
        self.completed_at: list[float] = []
        self._pending: collections.deque[float] = collections.deque()
        self._busy = False
        self._serving: float | None = None        # arrival time of the request in service
        self._next = 0
        executor.add_client(client_id, "high")
        self._input = bytes(model.input_bytes)
        in_ptr = sim.mem_alloc(max(model.input_bytes, 8))
        out_ptr = sim.mem_alloc(max(model.output_bytes, 8))
        self._ops = ([MemcpyHtoD(in_ptr, self._input)] + _launches(sim, model.kernels, in_ptr, out_ptr)
                     + [MemcpyDtoH(memoryview(bytearray(model.output_bytes)), out_ptr, model.output_bytes)])

    def unfinished(self) -> list[float]:
        """Arrival times of requests that have not completed."""
        serving = [] if self._serving is None else [self._serving]
        return serving + list(self._pending) + self.arrivals[self._next:]

    def start(self) -> None:
        self._schedule_next_arrival()

    def _schedule_next_arrival(self) -> None:
        if self._next < len(self.arrivals):
            self.sim.clock.call_at(self.arrivals[self._next], self._arrive)

    def _arrive(self) -> None:
        self._pending.append(self.arrivals[self._next])
        self._next += 1
        self._schedule_next_arrival()
        if not self._busy:
            self._issue()

    def _issue(self) -> None:
        arrived = self._pending.popleft()
        self._busy = True
        self._serving = arrived
        for op in self._ops:
            self.executor.submit(self.client_id, 0, op)
        self.executor.submit(self.client_id, 0, HostCallback(lambda: self._done(arrived)))

    def _done(self, arrived: float) -> None:
        now = self.sim.now()
        self.latencies.append(now - arrived)
        self.completed_at.append(now)
        self._busy = False
        self._serving = None
        if self._pending:
            self._issue()


class TrainingJob:
    def __init__(self, sim: SimBackend, executor: StreamExecutor, client_id: str,
                 model: TrainingModel, stop_at: float, sm_percent: float | None = None):
        self.sim, self.executor, self.client_id = sim, executor, client_id
        self.stop_at = stop_at
        self.iterations_done_at: list[float] = []
        executor.add_client(client_id, "best-effort", sm_percent)
        self._batch = bytes(model.batch_bytes)
        in_ptr = sim.mem_alloc(max(model.batch_bytes, 8))
        out_ptr = sim.mem_alloc(8)
        self._ops = ([MemcpyHtoD(in_ptr, self._batch)] + _launches(sim, model.kernels, in_ptr, out_ptr)
                     + [MemcpyDtoH(memoryview(bytearray(4)), out_ptr, 4)])
        self._kernel_time = [alone_time(sim.gpu, shape) for shape in model.kernels]
        self._kernel_time_prefix = [0.0]
        for t in self._kernel_time:
            self._kernel_time_prefix.append(self._kernel_time_prefix[-1] + t)

    def start(self) -> None:
        self._iterate()

    def progress(self, kernels_completed: int) -> float:
        """Iterations done, counting the current one by the share of its
        kernels' (alone) time already completed, so short runs measure
        throughput without rounding to whole iterations."""
        whole, part = divmod(kernels_completed, len(self._kernel_time))
        return whole + self._kernel_time_prefix[part] / self._kernel_time_prefix[-1]

    def _iterate(self) -> None:
        if self.sim.now() >= self.stop_at:
            return
        for op in self._ops:
            self.executor.submit(self.client_id, 0, op)
        self.executor.submit(self.client_id, 0, HostCallback(self._done))

    def _done(self) -> None:
        self.iterations_done_at.append(self.sim.now())
        self._iterate()
