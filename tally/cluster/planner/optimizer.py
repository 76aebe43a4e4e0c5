"""The optimizer: lower bounds by column generation, the plan by a MIP.

1. Column generation over GPU configurations (colgen.py, Gilmore-Gomory):
   the configuration LP's optimum, the classic cutting-stock bound. It lets a
   service use a fraction of a partition, so with many small services it is
   loose; it is reported as `config_lp_bound`.
2. Column generation over service patterns (patterns.py): the LP where every
   service runs on whole partitions. Its optimum is the `lp_bound` plans are
   measured against (the gap).
3. The integer master over every configuration, in its aggregated form of
   layout and part counts (part_counts.py), solved by HiGHS in what is left of
   the time limit. HiGHS's own proven bound is reported as `mip_bound`.
If HiGHS finds no integer solution in time, the configuration LP's solution
rounded up is the plan (feasible, if further from the bound).
"""
from __future__ import annotations

import math
import time

from tally.cluster.planner.colgen import generate_columns, round_up
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.part_counts import deal_out, solve_part_counts
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
    pool, config_bound, x_lp, stats = generate_columns(problem, deadline=started + CONFIG_CG_SHARE * time_limit)
    bound, pattern_stats = pattern_bound(problem, deadline=started + (CONFIG_CG_SHARE + PATTERN_CG_SHARE) * time_limit)
    bound = max(bound, config_bound)
    stats.update(pattern_stats, config_lp_bound=config_bound, bounds_seconds=time.monotonic() - started)
    lower = math.ceil(bound - 1e-6)
    if max_gpus is not None and lower > max_gpus:
        raise _budget_error(lower, bound, max_gpus, "the services need at least")
    counts = solve_part_counts(problem, started + time_limit - time.monotonic(), max_gpus, at_least=lower)
    if counts is not None:
        configs, status = deal_out(problem, counts), counts.status
        stats.update(mip=counts.message, mip_bound=counts.dual_bound)
    elif max_gpus is not None:
        raise _budget_error(lower, bound, max_gpus, f"no plan was found within {time_limit:g} s that fits; at least")
    else:
        configs, status = round_up(pool, x_lp), "time limit (configuration LP rounded up)"
    result = PlanResult("optimizer", configs, time.monotonic() - started, lp_bound=bound, status=status,
                        details=stats)
    if max_gpus is not None and result.gpus > max_gpus:
        raise _budget_error(result.gpus, bound, max_gpus, "the best plan found needs")
    return result
