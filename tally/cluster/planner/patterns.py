"""The strong LP lower bound: column generation over service patterns.

The configuration LP (colgen.py) lets a service run on a fraction of a part,
so with many small services it sits well below every integer plan. Here each
service instead chooses a *pattern*, an integer number of parts of each size
that covers its demand, and GPUs choose layouts:

    minimize   sum_L z_L
    subject to sum_i sum_k parts(i, k, p) lambda_ik <= sum_L count_Lp z_L   every size p   (price mu_p)
               sum_k lambda_ik = 1                                          every service i (price sigma_i)
               z, lambda >= 0

the Dantzig-Wolfe reformulation of part_counts.py's MIP by service. Its LP
relaxation keeps each service's parts whole, so it bounds the integer optimum
much more tightly. Patterns are generated: a service's best new pattern is the
cheapest integer cover of its demand at the part prices mu (a one-row integer
knapsack, solved by HiGHS through scipy.optimize.milp; the part prices mostly
settle at once, at each size's share of the GPU, so answers are cached by
price vector and the confirming round costs no solves). Layouts are few (13 MIG,
42 for 10% SM shares) and all present from the start. If the deadline stops it
early, the bound is the Lagrangian one, LP value + sum_i min(0, reduced cost_i),
which is valid at any iteration.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, linprog, milp

from tally.cluster.planner.problem import Problem


def _initial_patterns(problem: Problem) -> list[list[np.ndarray]]:
    """For each service and usable part size, enough parts of that size alone."""
    sizes = len(problem.partitions)
    out = []
    for i in range(problem.n):
        patterns = []
        for p in np.flatnonzero(problem.cap[i] > 0):
            y = np.zeros(sizes)
            y[p] = math.ceil(problem.demand[i] / problem.cap[i, p] - 1e-9)
            patterns.append(y)
        out.append(patterns)
    return out


def _cheapest_cover(problem: Problem, i: int, prices: np.ndarray) -> np.ndarray:
    usable = problem.cap[i] > 0
    res = milp(prices + 1e-9, integrality=np.ones(len(prices)),
               constraints=[LinearConstraint(problem.cap[i][None, :], lb=problem.demand[i] * (1 - 1e-9), ub=np.inf)],
               bounds=Bounds(0, np.where(usable, np.inf, 0.0)))
    return np.round(res.x)


@dataclass
class PatternBound:
    bound: float                 # no plan needs fewer GPUs
    chosen: np.ndarray           # services x sizes: each service's heaviest pattern in the LP optimum
    stats: dict


def pattern_bound(problem: Problem, deadline: float) -> PatternBound:
    n, sizes, layouts = problem.n, len(problem.partitions), len(problem.layouts)
    patterns = _initial_patterns(problem)
    cache: dict[tuple[int, bytes], np.ndarray] = {}
    rounds = 0
    while True:
        rounds += 1
        owners = [i for i in range(n) for _ in patterns[i]]
        columns = np.column_stack([y for i in range(n) for y in patterns[i]])
        size_rows = np.hstack([-problem.layout_counts.T, columns])
        choose_rows = np.zeros((n, layouts + len(owners)))
        choose_rows[owners, layouts + np.arange(len(owners))] = 1
        cost = np.concatenate([np.ones(layouts), np.zeros(len(owners))])
        res = linprog(cost, A_ub=size_rows, b_ub=np.zeros(sizes), A_eq=choose_rows, b_eq=np.ones(n),
                      bounds=(0, None), method="highs")
        if res.status != 0:
            raise RuntimeError(f"the pattern LP failed: {res.message}")
        prices, sigma = -res.ineqlin.marginals, res.eqlin.marginals
        reduced = np.zeros(n)
        key = np.round(prices, 9).tobytes()
        for i in range(n):
            y = cache.get((i, key))
            if y is None:
                y = cache[(i, key)] = _cheapest_cover(problem, i, prices)
            reduced[i] = prices @ y - sigma[i]
            if reduced[i] < -1e-7:
                patterns[i].append(y)
        converged = not np.any(reduced < -1e-7)
        if converged or time.monotonic() > deadline:
            break
    bound = float(res.fun) + (0.0 if converged else float(np.minimum(reduced, 0).sum()))
    weights = res.x[layouts:]
    chosen = np.zeros((n, sizes))
    for i in range(n):
        mine = [k for k, owner in enumerate(owners) if owner == i]
        chosen[i] = columns[:, mine[int(np.argmax(weights[mine]))]]
    return PatternBound(bound, chosen.astype(int),
                        {"pattern_rounds": rounds, "patterns": len(owners), "pattern_lp_converged": converged})
