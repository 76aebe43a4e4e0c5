"""Plan a deployment: the chosen algorithm's plan, with the baselines and
bounds it is judged by in its summary."""
from __future__ import annotations

from tally.cluster.planner.baselines import all_smallest, whole_gpus
from tally.cluster.planner.deployment import Deployment, deployment_from
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.greedy import greedy
from tally.cluster.planner.optimizer import optimize
from tally.cluster.planner.problem import Problem
from tally.cluster.planner.result import PlanResult
from tally.cluster.planner.services import PlanRequest

ALGORITHMS = ("optimizer", "greedy")


def run_algorithm(problem: Problem, algorithm: str, time_limit: float, max_gpus: int | None) -> PlanResult:
    if algorithm == "optimizer":
        return optimize(problem, time_limit, max_gpus)
    if algorithm == "greedy":
        result = greedy(problem)
        if max_gpus is not None and result.gpus > max_gpus:
            raise PlanInputError(f"infeasible GPU budget: the greedy plan needs {result.gpus} GPUs, the budget is "
                                 f"{max_gpus}; raise max_gpus or try --algorithm optimizer")
        return result
    raise PlanInputError(f"unknown algorithm {algorithm!r}; choose one of {', '.join(ALGORITHMS)}")


def summarize(problem: Problem, result: PlanResult, compare: bool = True) -> dict:
    summary = {"algorithm": result.algorithm, "status": result.status, "seconds": round(result.seconds, 3),
               "gpus": result.gpus}
    if result.lp_bound is not None:
        summary.update(lp_bound=round(result.lp_bound, 4), lower_bound=result.lower_bound,
                       gap=round(result.gap, 6),
                       config_lp_bound=round(result.details.get("config_lp_bound", 0.0), 4))
        if result.details.get("mip_bound") is not None:
            summary["mip_bound"] = round(float(result.details["mip_bound"]), 4)
    if compare:
        whole = whole_gpus(problem).gpus
        smallest = all_smallest(problem)
        summary.update(whole_gpus=whole, all_smallest=smallest.gpus,
                       all_smallest_on_whole_gpus=len(smallest.details["on_whole_gpus"]),
                       saving_vs_whole=round(1 - result.gpus / whole, 6))
        if result.algorithm != "greedy":
            summary["greedy"] = greedy(problem).gpus
    return summary


def plan(request: PlanRequest, algorithm: str = "optimizer", time_limit: float = 60.0,
         compare: bool = True) -> Deployment:
    problem = Problem(request)
    result = run_algorithm(problem, algorithm, time_limit, request.max_gpus)
    return deployment_from(problem, result, summarize(problem, result, compare))
