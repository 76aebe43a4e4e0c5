"""`tally-bench graphs`' sim model: an LLM's decode step, replayed as a CUDA graph by
the high-priority job, next to best-effort training, with graph replays as one unit
and node by node (tally-server --graph-replay units|nodes).

The decode step is a graph of a 32-layer transformer's kernels for one token at a
batch of 1-64 sequences (12 kernels a layer, then the LM head and sampling: 386
kernels), of the shape an H100 runs them: the weight GEMVs are memory bound (their
time grows little with the batch), attention reads the KV cache (grows with it);
the GEMMs are cuBLAS's (no PTX: they run whole). Steps arrive at random (Poisson)
at half the load an idle device can serve; a step's latency is its completion
minus its arrival, queueing included. The best-effort job is the co-location
benchmark's GPT training loop (tally/bench/workloads.py).

What the host spends is modeled per job (SimBackend's host_launch_us): each kernel
launch call costs the server's cost per launch measured by `tally-bench graphs`
(node by node) plus a native launch's CPU time; a graph replay costs the server's
cost per replay (as one unit) plus one native launch call. The native figure is
the issue's "about 2-4 us of CPU" per cuLaunchKernel on Hopper (3 us here); a
cuGraphLaunch is taken to cost the same one call.
"""
from __future__ import annotations

import random
import statistics
import struct
from dataclasses import dataclass

from tally.backends.sim import SimBackend
from tally.backends.sim.model import H100_SXM5_80GB, KernelCost
from tally.bench.sim_jobs import TrainingJob, install_kernels
from tally.bench.workloads import TRAINING_MODELS, KernelShape
from tally.scheduler import HostCallback, StreamExecutor, make_policy
from tally.scheduler.ops import GraphReplay, Launch, ReplayGraph
from tally.backends.sim.variants import SimVariantProvider

NATIVE_LAUNCH_CPU_US = 3.0
LAYERS = 32
_PARAMS = struct.Struct("<QQ")


def _k(name: str, blocks: int, threads: int, block_us: float, per_sm: int, transformable: bool = True) -> KernelShape:
    return KernelShape(name, max(1, blocks), threads, KernelCost(block_us, per_sm, transformable))


def decode_step(batch: int) -> tuple[KernelShape, ...]:
    """One token for `batch` sequences: the kernels of a 32-layer decoder, in order."""
    weights = 1 + batch / 128           # GEMVs read the weights once whatever the batch
    p = f"decode{batch}."
    layer = (
        _k(p + "rmsnorm", batch, 256, 3.0, 8),
        _k(p + "qkv_gemv", 264, 256, 6.0 * weights, 2, transformable=False),
        _k(p + "rope", batch, 128, 2.0, 8),
        _k(p + "kv_append", batch, 128, 2.0, 8),
        _k(p + "attention", 32 * batch, 128, 4.0 + batch / 8, 4),
        _k(p + "o_proj", 264, 256, 4.0 * weights, 2, transformable=False),
        _k(p + "residual", batch, 256, 1.5, 8),
        _k(p + "rmsnorm2", batch, 256, 3.0, 8),
        _k(p + "gate_up", 264, 256, 12.0 * weights, 2, transformable=False),
        _k(p + "silu_mul", 4 * batch, 256, 2.0, 8),
        _k(p + "down", 264, 256, 8.0 * weights, 2, transformable=False),
        _k(p + "residual2", batch, 256, 1.5, 8),
    )
    return layer * LAYERS + (_k(p + "lm_head", 528, 256, 20.0 * weights, 2, transformable=False),
                             _k(p + "sample", batch, 1024, 5.0, 1))


@dataclass(frozen=True)
class HostCosts:
    """Server CPU per call, from `tally-bench graphs`' measurement."""
    per_launch_us: float        # a kernel launch (node by node)
    per_replay_us: float        # a graph replay as one unit


class DecodeJob:
    """Decode steps arriving at `arrivals`, served one at a time in order, each one
    graph replay (and a host callback that records its latency)."""

    def __init__(self, sim: SimBackend, executor: StreamExecutor, shapes: tuple[KernelShape, ...], arrivals):
        self.sim, self.executor = sim, executor
        self.arrivals = list(arrivals)
        self.latencies: list[float] = []
        self._next = 0
        self._queue: list[float] = []
        self._busy = False
        executor.add_client("decode", "high")
        functions = install_kernels(sim, shapes)
        params = _PARAMS.pack(sim.mem_alloc(8), sim.mem_alloc(8))
        launches = tuple(Launch(functions[s.name], (s.blocks, 1, 1), (s.threads, 1, 1), 0, params) for s in shapes)
        self.graph = ReplayGraph(launches, tuple((i, i + 1) for i in range(len(launches) - 1)), "decode-step")

    def start(self) -> None:
        if self._next < len(self.arrivals):
            self.sim.clock.call_at(self.arrivals[self._next], self._arrive)

    def _arrive(self) -> None:
        self._queue.append(self.arrivals[self._next])
        self._next += 1
        self.start()
        if not self._busy:
            self._issue()

    def _issue(self) -> None:
        arrived = self._queue.pop(0)
        self._busy = True
        self.executor.submit("decode", 0, GraphReplay(self.graph))
        self.executor.submit("decode", 0, HostCallback(lambda: self._done(arrived)))

    def _done(self, arrived: float) -> None:
        self.latencies.append(self.sim.now() - arrived)
        self._busy = False
        if self._queue:
            self._issue()


def _percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def _sim(costs: HostCosts, graph_units: bool) -> tuple[SimBackend, StreamExecutor]:
    sim = SimBackend(H100_SXM5_80GB, host_launch_us=costs.per_launch_us + NATIVE_LAUNCH_CPU_US,
                     host_graph_launch_us=costs.per_replay_us + NATIVE_LAUNCH_CPU_US)
    executor = StreamExecutor(sim, make_policy("priority"), SimVariantProvider(), clock=sim.clock,
                              graph_units=graph_units)
    return sim, executor


def step_time_alone(batch: int, costs: HostCosts, graph_units: bool) -> float:
    """One decode step on an idle device, in seconds."""
    sim, executor = _sim(costs, graph_units)
    job = DecodeJob(sim, executor, decode_step(batch), [0.0])
    job.start()
    sim.run_until(1.0)
    executor.close()
    return job.latencies[0]


def run_decode(batch: int, costs: HostCosts, graph_units: bool, shared: bool, arrivals: list[float]) -> dict:
    sim, executor = _sim(costs, graph_units)
    job = DecodeJob(sim, executor, decode_step(batch), arrivals)
    end = arrivals[-1] + 0.05
    training = TrainingJob(sim, executor, "train", TRAINING_MODELS["gpt-train"], stop_at=end) if shared else None
    job.start()
    if training is not None:
        training.start()
    sim.run_until(end + 0.5)
    counters = executor.counters()
    executor.close()
    if len(job.latencies) != len(arrivals):
        raise RuntimeError(f"{len(arrivals) - len(job.latencies)} decode steps never completed")
    out = {"p50_ms": statistics.median(job.latencies) * 1e3, "p99_ms": _percentile(job.latencies, 0.99) * 1e3,
           "graph_launches": counters["graph_launches"], "graph_nodes_replayed": counters["graph_nodes_replayed"]}
    if training is not None:
        done = [t for t in training.iterations_done_at if t <= end]
        out["training_iterations_per_s"] = len(done) / end
    return out


def decode_model(batches: tuple[int, ...], costs: HostCosts, steps: int, seed: int = 1) -> list[dict]:
    rows = []
    for batch in batches:
        alone = {mode: step_time_alone(batch, costs, mode == "units") for mode in ("units", "nodes")}
        rng = random.Random(seed)
        rate = 0.5 / alone["units"]         # half the load an idle device serves with graph units
        t, arrivals = 0.0, []
        for _ in range(steps):
            t += rng.expovariate(rate)
            arrivals.append(t)
        row = {"batch": batch, "kernels": len(decode_step(batch)),
               "step_alone_ms": {mode: v * 1e3 for mode, v in alone.items()}}
        for mode in ("units", "nodes"):
            for shared in (False, True):
                row[f"{mode}_{'shared' if shared else 'alone'}"] = run_decode(batch, costs, mode == "units",
                                                                              shared, arrivals)
        rows.append(row)
    return rows
