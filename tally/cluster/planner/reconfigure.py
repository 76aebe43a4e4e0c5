"""Reconfiguration: from the current deployment to one for new demands and
SLOs, touching as few GPUs as possible and never letting a service drop below
what it must serve during the move.

1. Target. The optimizer first finds the fewest GPUs N the new services need.
   Then a MIP (HiGHS) chooses how many GPUs of each current configuration to
   keep as they are and which new configurations (in part_counts.py's
   aggregated form) to add, at most N GPUs in all, minimizing the GPUs
   touched: max(current GPUs changed, new configurations placed), since a
   changed GPU is reused for a new configuration. A kept part counts only if
   its batch still meets the service's new SLO.
2. Steps (reconfigure_steps.py). While the move lasts every service keeps at
   least min(old required, new required, what it ran before) throughput (its
   floor). New configurations go first onto GPUs that are free (new machines
   when the plan grows); then GPUs change in place, keeping the instances the
   new configuration shares with the old one running, one GPU at a time and
   only when the others cover every floor during the change; if nothing can
   change safely, a spare GPU is borrowed (reported: the price of moving
   without a dip).
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from tally.cluster.planner.deployment import Deployment, GpuPlan, PartPlan, config_parts
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.optimizer import optimize
from tally.cluster.planner.part_counts import PartCounts, deal_out
from tally.cluster.planner.plan import summarize
from tally.cluster.planner.problem import GpuConfig, Problem
from tally.cluster.planner.reconfigure_steps import Step, sequence
from tally.cluster.planner.services import PlanRequest


@dataclass
class Reconfiguration:
    target: Deployment
    steps: list[Step]
    summary: dict

    def to_dict(self) -> dict:
        return {"summary": self.summary,
                "steps": [{"action": s.action, "gpu": s.gpu, "kept": _describe(s.kept), "stopped": _describe(s.stopped),
                           "started": _describe(s.started), "floor_met": s.floor_met} for s in self.steps],
                "deployment": self.target.to_dict()}


def _kept_coverage(problem: Problem, gpu: GpuPlan) -> np.ndarray:
    """What a current GPU left as it is gives each new service."""
    index = {s.name: i for i, s in enumerate(problem.services)}
    out = np.zeros(problem.n)
    for part in gpu.parts:
        i = index.get(part.service)
        if i is None or part.model != problem.services[i].model:
            continue
        rows = [r for r in problem.request.profile.rows_for(part.model, part.partition) if r.batch == part.batch]
        if rows and rows[0].latency_ms <= problem.services[i].p99_ms:
            out[i] += rows[0].throughput
    return out


def _target_mip(problem: Problem, groups: list[tuple[np.ndarray, int]], total: int, time_limit: float):
    """keep_g (per current-config group), y (parts), z (layouts), t (touched)."""
    n, sizes, layouts, g = problem.n, len(problem.partitions), len(problem.layouts), len(groups)
    y0, z0, t = g, g + n * sizes, g + n * sizes + layouts
    width = t + 1
    rows, cols, vals, lower, upper = [], [], [], [], []
    row = 0

    def add(entries, lo, hi):
        nonlocal row
        for c, v in entries:
            rows.append(row)
            cols.append(c)
            vals.append(v)
        lower.append(lo)
        upper.append(hi)
        row += 1

    for i in range(n):
        add([(k, cov[i] / problem.demand[i]) for k, (cov, _) in enumerate(groups) if cov[i] > 0]
            + [(y0 + i * sizes + p, problem.cap[i, p] / problem.demand[i])
               for p in range(sizes) if problem.cap[i, p] > 0],
            1 - 1e-9, np.inf)
    for p in range(sizes):
        add([(y0 + i * sizes + p, 1.0) for i in range(n)]
            + [(z0 + k, -problem.layout_counts[k, p]) for k in range(layouts) if problem.layout_counts[k, p]],
            -np.inf, 0)
    add([(k, 1.0) for k in range(g)] + [(z0 + k, 1.0) for k in range(layouts)], 0, total)
    current = sum(count for _, count in groups)
    add([(t, 1.0)] + [(k, 1.0) for k in range(g)], current, np.inf)           # t >= changed GPUs
    add([(t, 1.0)] + [(z0 + k, -1.0) for k in range(layouts)], 0, np.inf)      # t >= new configurations
    matrix = coo_array((vals, (rows, cols)), shape=(row, width)).tocsc()
    objective = np.zeros(width)
    objective[t] = 1.0
    objective[z0:t] = 1e-3                       # among equally few touched, fewer GPUs
    upper_bounds = np.full(width, np.inf)
    upper_bounds[:g] = [count for _, count in groups]
    upper_bounds[y0:z0] = np.where((problem.cap > 0).ravel(), np.inf, 0)
    res = milp(objective, constraints=[LinearConstraint(matrix, lower, upper)], integrality=np.ones(width),
               bounds=Bounds(0, upper_bounds), options={"time_limit": max(1.0, time_limit)})
    if res.x is None:
        raise RuntimeError(f"the reconfiguration MIP found no plan: {res.message}")
    x = np.round(res.x).astype(int)
    return x[:g], PartCounts(x[z0:t], x[y0:z0].reshape(n, sizes), "", None, res.message)


def _describe(parts: list[PartPlan]) -> list[str]:
    return [f"{p.profile}: {p.service} (b{p.batch})" for p in parts]


def reconfigure(current: Deployment, request: PlanRequest, time_limit: float = 60.0) -> Reconfiguration:
    started = time.monotonic()
    if current.gpu != request.gpu.key or current.partitions != request.kind:
        raise PlanInputError(f"the current deployment is {current.gpu} with {current.partitions} partitions, the new "
                             f"plan {request.gpu.key} with {request.kind}; a reconfiguration keeps both the same")
    problem = Problem(request)
    fresh = optimize(problem, time_limit / 2, request.max_gpus)

    by_signature: dict[tuple, list[GpuPlan]] = {}
    for gpu in current.gpus:
        by_signature.setdefault(gpu.signature(), []).append(gpu)
    members = list(by_signature.values())
    groups = [(_kept_coverage(problem, gpus[0]), len(gpus)) for gpus in members]
    total = fresh.gpus if request.max_gpus is None else max(fresh.gpus, request.max_gpus)
    keep, counts = _target_mip(problem, groups, total, started + time_limit - time.monotonic())

    kept = [gpu for gpus, k in zip(members, keep) for gpu in gpus[:k]]
    changing = [gpu for gpus, k in zip(members, keep) for gpu in gpus[k:]]
    new_configs: list[GpuConfig] = [c for c, number in deal_out(problem, counts) for _ in range(number)]
    old_required = {s["name"]: float(s["throughput"]) for s in current.services}
    demand = {s.name: s.throughput for s in problem.services}
    running: dict[str, float] = {}
    for gpu in current.gpus:
        for part in gpu.parts:
            running[part.service] = running.get(part.service, 0.0) + part.throughput
    floor = {name: min(old_required.get(name, 0.0), demand[name], running.get(name, 0.0)) for name in demand}
    first_free = max((g.index for g in current.gpus), default=-1) + 1
    steps, placed, borrowed = sequence(request.gpu, request.kind, floor, demand, kept, changing,
                                       [config_parts(problem, c) for c in new_configs], first_free)

    gpus = sorted([GpuPlan(g.index, g.parts) for g in kept] + placed, key=lambda g: g.index)
    capacity = {s.name: 0.0 for s in problem.services}
    for gpu in gpus:
        for part in gpu.parts:
            capacity[part.service] = capacity.get(part.service, 0.0) + part.throughput
    services = [{"name": s.name, "model": s.model, "throughput": s.throughput, "p99_ms": s.p99_ms,
                 "capacity": round(capacity[s.name], 3), **({"command": s.command} if s.command else {})}
                for s in problem.services]
    new_machines = max(0, len(new_configs) - len(changing))
    summary = {"gpus_before": len(current.gpus), "gpus_after": len(gpus), "fresh_optimum": fresh.gpus,
               "kept": len(kept), "changed": len(changing), "new_machines": new_machines, "borrowed": borrowed,
               "touched": len(changing) + new_machines + borrowed, "steps": len(steps),
               "floors_met": all(s.floor_met for s in steps), "seconds": round(time.monotonic() - started, 3)}
    target = Deployment(current.gpu, current.partitions, problem.scheme.step_percent, gpus, services,
                        {**summarize(problem, fresh, compare=False), "gpus": len(gpus),
                         "algorithm": "reconfiguration"})
    return Reconfiguration(target, steps, summary)
