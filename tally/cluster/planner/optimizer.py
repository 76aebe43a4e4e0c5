"""The optimizer: lower bounds by column generation, the plan by MIPs.

1. Column generation over GPU configurations (colgen.py, Gilmore-Gomory):
   the configuration LP's optimum, the classic cutting-stock bound. It lets a
   service use a fraction of a partition, so with many small services it is
   loose; it is reported as `config_lp_bound`.
2. Column generation over service patterns (patterns.py): the LP where every
   service runs on whole partitions. Its optimum is the `lp_bound` plans are
   measured against (the gap).
3. A first plan rounds the pattern LP: each service takes its heaviest
   pattern and a small MIP packs those parts into the fewest layouts. If that
   meets the bound (rounded up) it is optimal and we are done.
4. Otherwise HiGHS solves the integer master over every configuration, in its
   aggregated form of layout and part counts (part_counts.py), looking only
   for plans better than the first, in what is left of the time limit.
HiGHS (scipy.optimize.linprog / milp) solves every LP and MIP.
"""
from __future__ import annotations

import math
import time

from tally.cluster.planner.colgen import generate_columns
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.part_counts import deal_out, solve_layouts, solve_part_counts
from tally.cluster.planner.patterns import pattern_bound
from tally.cluster.planner.problem import Problem
from tally.cluster.planner.result import PlanResult

CONFIG_CG_SHARE = 0.15      # of the time limit, at most, for each bound
PATTERN_CG_SHARE = 0.35


def _budget_error(need: int, bound: float, budget: int, why: str) -> PlanInputError:
    return PlanInputError(f"infeasible GPU budget: {why} {need} GPUs (LP lower bound {bound:.2f}), the budget "
                          f"is {budget}; raise max_gpus or lower the services' throughput")


def optimize(problem: Problem, time_limit: float = 60.0, max_gpus: int | None = None) -> PlanResult:
    started = time.monotonic()
    _, config_bound, stats = generate_columns(problem, deadline=started + CONFIG_CG_SHARE * time_limit)
    patterns = pattern_bound(problem, deadline=started + (CONFIG_CG_SHARE + PATTERN_CG_SHARE) * time_limit)
    bound = max(patterns.bound, config_bound)
    stats.update(patterns.stats, config_lp_bound=config_bound, bounds_seconds=round(time.monotonic() - started, 3))
    lower = math.ceil(bound - 1e-6)
    if max_gpus is not None and lower > max_gpus:
        raise _budget_error(lower, bound, max_gpus, "the services need at least")

    def left() -> float:
        return started + time_limit - time.monotonic()

    best = solve_layouts(problem, patterns.chosen, left())
    found = None if best is None else int(best.layouts.sum())
    stats["rounded_pattern_lp"] = found
    status = "optimal" if found is not None and found <= lower else "time limit"
    if status != "optimal":
        ceiling = [c for c in (max_gpus, None if found is None else found - 1) if c is not None]
        ceiling = min(ceiling) if ceiling else None
        better, none_better = (None, True) if ceiling is not None and ceiling < lower else \
            solve_part_counts(problem, left(), ceiling, at_least=lower)
        if better is not None:
            best, status = better, better.status
            stats.update(mip=better.message, mip_bound=better.dual_bound)
        elif none_better and found is not None:
            status = "optimal"          # proved: no plan with fewer GPUs than the rounded one
    if best is None or (max_gpus is not None and int(best.layouts.sum()) > max_gpus):
        raise _budget_error(lower, bound, max_gpus if max_gpus is not None else 0,
                            f"no plan within the budget was found in {time_limit:g} s; at least")
    result = PlanResult("optimizer", deal_out(problem, best), time.monotonic() - started, lp_bound=bound,
                        status=status, details=stats)
    return result
