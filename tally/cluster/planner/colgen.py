"""Column generation over GPU configurations: the configuration-LP lower bound.

The problem is a cutting-stock problem: choose how many GPUs get each
configuration (layout + service per part) so every service's throughput is
covered, with the fewest GPUs. Its LP relaxation over *all* configurations is
solved by column generation (Gilmore-Gomory): the master LP over the columns
found so far gives each service a dual price; the best new column is, for each
layout, every part running the service with the highest price x throughput
on that part size, which is exact because parts are independent once prices
are fixed. When no column has reduced cost below zero the LP optimum is the
lower bound every integer plan must meet. If time runs out first, the bound
reported is Farley's (LP value / best column value), still valid. The LP is
solved by HiGHS (scipy.optimize.linprog).
"""
from __future__ import annotations

import time

import numpy as np
from scipy.optimize import linprog

from tally.cluster.planner.problem import IDLE, GpuConfig, Problem

_EPS = 1e-9


def _column(problem: Problem, layout: tuple[int, ...], best_service: np.ndarray, best_value: np.ndarray) -> GpuConfig:
    return GpuConfig(layout, tuple(int(best_service[p]) if best_value[p] > _EPS else IDLE for p in layout))


def _single_service_columns(problem: Problem) -> list[GpuConfig]:
    """For each service, the configuration that gives it the most throughput:
    a feasible start for the master LP."""
    out = []
    for i in range(problem.n):
        values = problem.layout_counts @ problem.cap[i]
        layout = problem.layouts[int(np.argmax(values))]
        out.append(GpuConfig(layout, tuple(i if problem.cap[i, p] > 0 else IDLE for p in layout)))
    return out


class ColumnPool:
    def __init__(self, problem: Problem):
        self.problem = problem
        self.configs: list[GpuConfig] = []
        self._columns: list[np.ndarray] = []       # coverage / demand, per config
        self._seen: set[GpuConfig] = set()

    def add(self, config: GpuConfig) -> bool:
        if config in self._seen or all(i == IDLE for i in config.services):
            return False
        self._seen.add(config)
        self.configs.append(config)
        self._columns.append(self.problem.coverage(config) / self.problem.demand)
        return True

    def matrix(self) -> np.ndarray:
        return np.column_stack(self._columns)


def _solve_master_lp(matrix: np.ndarray) -> tuple[float, np.ndarray]:
    n, m = matrix.shape
    res = linprog(np.ones(m), A_ub=-matrix, b_ub=-np.ones(n), bounds=(0, None), method="highs")
    if res.status != 0:
        raise RuntimeError(f"the master LP failed: {res.message}")
    return float(res.fun), -res.ineqlin.marginals


def generate_columns(problem: Problem, deadline: float, per_round: int = 4) -> tuple[ColumnPool, float, dict]:
    """Column generation to LP optimality (or the deadline). Returns the
    columns, a valid lower bound and statistics."""
    pool = ColumnPool(problem)
    for config in _single_service_columns(problem):
        pool.add(config)
    cap_over_demand = problem.cap / problem.demand[:, None]
    rounds, converged = 0, False
    while True:
        rounds += 1
        lp_value, prices = _solve_master_lp(pool.matrix())
        weighted = prices[:, None] * cap_over_demand           # value of service i on one part of size p
        best_service = weighted.argmax(axis=0)
        best_value = weighted.max(axis=0)
        layout_values = problem.layout_counts @ best_value
        best = float(layout_values.max())
        if best <= 1 + 1e-7:
            converged = True
            break
        if time.monotonic() > deadline:
            break
        added = 0
        for k in np.argsort(-layout_values)[:per_round]:
            if layout_values[k] > 1 + 1e-7:
                added += pool.add(_column(problem, problem.layouts[k], best_service, best_value))
        if not added:          # degenerate prices re-proposing known columns: the LP is optimal
            converged = True
            break
    bound = lp_value if converged else lp_value / best
    return pool, bound, {"rounds": rounds, "columns": len(pool.configs), "lp_converged": converged}
