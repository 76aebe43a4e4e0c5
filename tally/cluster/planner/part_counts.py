"""The integer master in aggregated form: layouts and part counts.

A GPU configuration is a layout plus one service per part, and parts of the
same size are interchangeable between GPUs. So a set of configurations is
fully described by how many GPUs get each layout (z_L) and how many parts of
each size each service runs on (y_ip); any such (z, y) with
sum_i y_ip <= sum_L count(L, p) z_L can be dealt out into configurations.
The integer master over *all* columns is therefore this MIP, with
n x sizes + layouts variables instead of one per configuration:

    minimize   sum_L z_L
    subject to sum_p cap_ip y_ip >= demand_i           every service i
               sum_i y_ip <= sum_L count_Lp z_L        every part size p
               at_least <= sum_L z_L (<= budget)
               y, z >= 0 integer

HiGHS (scipy.optimize.milp) solves it within the time limit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from tally.cluster.planner.problem import IDLE, GpuConfig, Problem


@dataclass
class PartCounts:
    layouts: np.ndarray        # GPUs per layout
    parts: np.ndarray          # services x sizes: parts each service runs on
    status: str
    dual_bound: float | None     # HiGHS's proven lower bound
    message: str


def solve_part_counts(problem: Problem, time_limit: float, max_gpus: int | None = None,
                      at_least: int = 0) -> tuple[PartCounts | None, bool]:
    """The plan HiGHS found (None if none) and whether it proved there is none
    (no plan within max_gpus), as opposed to running out of time.
    `at_least` is a known lower bound on the GPUs (the pattern LP's, rounded
    up): as a constraint it lets HiGHS stop as soon as it meets it."""
    n, sizes, layouts = problem.n, len(problem.partitions), len(problem.layouts)
    y_count = n * sizes
    usable = (problem.cap > 0).ravel()
    rows, cols, vals = [], [], []
    for i in range(n):                      # coverage, scaled by demand
        for p in range(sizes):
            if problem.cap[i, p] > 0:
                rows.append(i)
                cols.append(i * sizes + p)
                vals.append(problem.cap[i, p] / problem.demand[i])
    for p in range(sizes):                  # parts used <= parts the layouts provide
        for i in range(n):
            rows.append(n + p)
            cols.append(i * sizes + p)
            vals.append(1.0)
        for k in range(layouts):
            if problem.layout_counts[k, p]:
                rows.append(n + p)
                cols.append(y_count + k)
                vals.append(-problem.layout_counts[k, p])
    matrix = coo_array((vals, (rows, cols)), shape=(n + sizes, y_count + layouts)).tocsc()
    lower = np.concatenate([np.full(n, 1 - 1e-9), np.full(sizes, -np.inf)])
    upper = np.concatenate([np.full(n, np.inf), np.zeros(sizes)])
    constraints = [LinearConstraint(matrix, lower, upper)]
    objective = np.concatenate([np.zeros(y_count), np.ones(layouts)])
    constraints.append(LinearConstraint(objective[None, :], at_least, np.inf if max_gpus is None else max_gpus))
    y_upper = np.where(usable, np.inf, 0.0)
    res = milp(objective, constraints=constraints, integrality=np.ones(y_count + layouts),
               bounds=Bounds(0, np.concatenate([y_upper, np.full(layouts, np.inf)])),
               options={"time_limit": max(0.5, time_limit), "mip_rel_gap": 1e-6})
    if res.x is None:
        return None, res.status == 2
    x = np.round(res.x).astype(int)
    return PartCounts(x[y_count:], x[:y_count].reshape(n, sizes), "optimal" if res.status == 0 else "time limit",
                      getattr(res, "mip_dual_bound", None), res.message), False


def deal_out(problem: Problem, counts: PartCounts) -> list[tuple[GpuConfig, int]]:
    """Configurations from part counts: each layout's parts, GPU by GPU, go to
    the services still owed parts of that size (biggest demands first)."""
    owed = {p: [i for i in np.argsort(-problem.demand) for _ in range(counts.parts[i, p])]
            for p in range(len(problem.partitions))}
    grouped: dict[GpuConfig, int] = {}
    for k, number in enumerate(counts.layouts):
        layout = problem.layouts[k]
        for _ in range(number):
            services = tuple(int(owed[p].pop(0)) if owed[p] else IDLE for p in layout)
            config = GpuConfig(layout, services)
            grouped[config] = grouped.get(config, 0) + 1
    return list(grouped.items())


def solve_layouts(problem: Problem, parts: np.ndarray, time_limit: float) -> PartCounts | None:
    """The fewest GPUs whose layouts hold the given parts (services x sizes):
    the second half of rounding the pattern LP."""
    need = parts.sum(axis=0)
    layouts = len(problem.layouts)
    res = milp(np.ones(layouts), integrality=np.ones(layouts), bounds=Bounds(0, np.inf),
               constraints=[LinearConstraint(problem.layout_counts.T, lb=need, ub=np.inf)],
               options={"time_limit": max(0.5, time_limit)})
    if res.x is None:
        return None
    return PartCounts(np.round(res.x).astype(int), parts, "optimal" if res.status == 0 else "time limit",
                      None, res.message)
