"""The plans the optimizer is measured against.

- whole GPUs: no partitioning; each service gets whole GPUs (MIG 7/7, or a
  100% SM share), as many as its demand needs.
- all smallest: every GPU cut into its smallest partitions (7 x 1/7 for MIG,
  10 x 10% for 10% SM shares); each service gets as many as it needs and
  services share GPUs. A service whose SLO or memory rules out the smallest
  partition gets whole GPUs instead; `details["on_whole_gpus"]` names them.
"""
from __future__ import annotations

import math
import time

from tally.cluster.planner.problem import IDLE, GpuConfig, Problem
from tally.cluster.planner.result import PlanResult


def _whole(problem: Problem, i: int) -> tuple[GpuConfig, int]:
    p = problem.whole
    return GpuConfig((p,), (i,)), math.ceil(problem.demand[i] / problem.cap[i, p] - 1e-9)


def whole_gpus(problem: Problem) -> PlanResult:
    started = time.monotonic()
    configs = [_whole(problem, i) for i in range(problem.n)]
    return PlanResult("whole GPUs", configs, time.monotonic() - started)


def all_smallest(problem: Problem) -> PlanResult:
    started = time.monotonic()
    p = 0
    per_gpu = int(problem.units[-1] // problem.units[p])
    fits = [i for i in range(problem.n) if problem.cap[i, p] > 0]
    queue = [i for i in fits for _ in range(math.ceil(problem.demand[i] / problem.cap[i, p] - 1e-9))]
    counts: dict[GpuConfig, int] = {}
    for start in range(0, len(queue), per_gpu):
        chunk = queue[start:start + per_gpu]
        config = GpuConfig((p,) * per_gpu, tuple(chunk) + (IDLE,) * (per_gpu - len(chunk)))
        counts[config] = counts.get(config, 0) + 1
    misfits = [i for i in range(problem.n) if problem.cap[i, p] <= 0]
    configs = list(counts.items()) + [_whole(problem, i) for i in misfits]
    return PlanResult(f"all {problem.scheme.display(problem.partitions[p])}", configs, time.monotonic() - started,
                      details={"on_whole_gpus": [problem.services[i].name for i in misfits]})
