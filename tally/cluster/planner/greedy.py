"""MIG-serving's fast algorithm: a greedy that adds one GPU at a time.

A service's completion rate is the share of its required throughput already
served (at most 1). Each round scores a candidate GPU configuration by the
completion it adds, each service's share weighted by the complement of its
completion rate (1 - rate), so services far from done count most, and adds
the best-scoring configuration. Candidates: for every maximal layout, its parts
(largest first) each go to the service whose weighted completion gains most.
It stops when every service is complete.
"""
from __future__ import annotations

import time

import numpy as np

from tally.cluster.planner.problem import IDLE, GpuConfig, Problem
from tally.cluster.planner.result import PlanResult


def _best_config_for_layout(problem: Problem, layout: tuple[int, ...], served: np.ndarray) -> tuple[float, GpuConfig]:
    demand = problem.demand
    weight = np.clip(1 - served / demand, 0, 1)
    tentative = served.copy()
    services, score = [], 0.0
    for p in layout:
        gain = np.minimum(problem.cap[:, p], np.maximum(demand - tentative, 0)) / demand * weight
        i = int(np.argmax(gain))
        if gain[i] <= 0:
            services.append(IDLE)
            continue
        services.append(i)
        score += float(gain[i])
        tentative[i] += problem.cap[i, p]
    return score, GpuConfig(layout, tuple(services))


def greedy(problem: Problem) -> PlanResult:
    started = time.monotonic()
    served = np.zeros(problem.n)
    counts: dict[GpuConfig, int] = {}
    while np.any(served < problem.demand * (1 - 1e-9)):
        score, config = max((_best_config_for_layout(problem, layout, served) for layout in problem.layouts),
                            key=lambda pair: pair[0])
        if score <= 0:      # cannot happen once every service has a partition meeting its SLO
            raise RuntimeError("greedy made no progress")
        counts[config] = counts.get(config, 0) + 1
        served += problem.coverage(config)
    return PlanResult("greedy", list(counts.items()), time.monotonic() - started)
