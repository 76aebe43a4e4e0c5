"""Scheduler benchmarks on the sim backend.

1. Executor cost per kernel launch: submitting a Launch through the
   StreamExecutor (which also records the completion event, the notify-stream
   wait and the callback it needs) against calling the backend's launch
   directly, in the same run. Paths: `fifo` (fast path, no policy call), a
   high-priority client under `priority` (fast path), and a best-effort kernel
   under `priority` (queued while the previous one runs; the policy decision,
   profiler plan and transformed launch happen when it completes). Reported
   per kernel: submitting only (the discrete sim does not advance meanwhile),
   and submitting plus running to completion (which includes simulating).
2. Co-location outcome (issue 6): high-priority p99 under each policy against
   the same job alone in the same run, and system throughput; plus how long the
   simulation takes per simulated second.
   Target: `priority` p99 <= 1.10 x alone, with a Whisper-like best-effort job.

Run: python -m pytest bench/bench_colocate.py --benchmark-only -s
"""
from __future__ import annotations

import statistics
import struct
import time

import pytest

from tally.backends.sim import SimBackend, sim_module_source
from tally.backends.sim.model import KernelCost
from tally.bench.colocate import ALL_POLICIES, ColocateConfig, run_colocate
from tally.scheduler import Launch, StreamExecutor, make_policy

BATCH = 500


def _sim():
    sim = SimBackend()
    sim.define_kernel("k", (8,), KernelCost(block_time_us=5.0, max_blocks_per_sm=4))
    fn = sim.module_function(sim.module_load(sim_module_source("k")), "k")
    return sim, fn


def _median_per_launch(submit_batch, drain, repeat=7) -> tuple[float, float]:
    """(submit only, submit + run to completion) seconds per kernel, medians."""
    submit, total = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        submit_batch()
        submitted = time.perf_counter()
        drain()
        submit.append((submitted - start) / BATCH)
        total.append((time.perf_counter() - start) / BATCH)
    return statistics.median(submit), statistics.median(total)


def _direct():
    sim, fn = _sim()
    stream = sim.stream_create()
    params = struct.pack("<Q", 0)

    def batch():
        for _ in range(BATCH):
            sim.launch(fn, (432, 1, 1), (256, 1, 1), 0, stream, params)
    return batch, lambda: sim.stream_synchronize(stream)


def _through_executor(policy: str, priority: str):
    sim, fn = _sim()
    ex = StreamExecutor(sim, make_policy(policy), sim.variant_provider(), clock=sim.clock)
    ex.add_client("job", priority)
    op = Launch(fn, (432, 1, 1), (256, 1, 1), 0, struct.pack("<Q", 0))

    def batch():
        for _ in range(BATCH):
            ex.submit("job", 0, op)
    return batch, lambda: ex.synchronize_client("job")


PATHS = {
    "fifo": ("fifo", "best-effort"),
    "priority, high-priority client": ("priority", "high"),
    "priority, best-effort client": ("priority", "best-effort"),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_executor_cost_per_launch(benchmark, figures, path):
    direct_submit, direct_total = _median_per_launch(*_direct())
    batch, drain = _through_executor(*PATHS[path])
    submit, total = _median_per_launch(batch, drain)
    benchmark.pedantic(batch, rounds=3, iterations=1, teardown=drain)
    figures.add("executor cost per launch (CPU, sim backend; baseline: backend.launch directly, same run)",
                f"{path}: submit {submit * 1e6:.1f} us (direct {direct_submit * 1e6:.1f} us, "
                f"{submit / direct_submit:.1f}x); submit + run to completion {total * 1e6:.1f} us "
                f"(direct {direct_total * 1e6:.1f} us, {total / direct_total:.1f}x)")


def test_colocation_tail_latency_against_alone(benchmark, figures):
    config = ColocateConfig(policies=ALL_POLICIES, be_model="whisper-train", load=0.5, duration=2.0)
    holder = {}

    def run():
        holder["result"] = run_colocate(config)
    benchmark.pedantic(run, rounds=1, iterations=1)
    report = holder["result"].report
    alone = report["alone"]
    figures.add("co-location (sim, A100 model, bert-base at load 0.5 on the azure trace + whisper-train)",
                f"alone: p50 {alone['hp_p50_ms']:.2f} ms, p99 {alone['hp_p99_ms']:.2f} ms "
                f"({report['hp_arrivals']} requests in {config.duration} s)")
    for name, r in report["policies"].items():
        be = ", ".join(f"{x:.2f}" for x in r["be_normalized_throughput"])
        figures.add("co-location (sim, A100 model, bert-base at load 0.5 on the azure trace + whisper-train)",
                    f"{name}: p99 {r['hp_p99_ms']:.2f} ms = {r['hp_p99_vs_alone']:.3f}x alone; "
                    f"best-effort [{be}]; system throughput {r['system_throughput']:.2f}; "
                    f"simulated in {r['wall_seconds'] / config.duration:.2f} s per simulated s")
    assert report["policies"]["priority"]["hp_p99_vs_alone"] <= 1.10
