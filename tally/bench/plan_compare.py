"""`tally-bench plan`: the planner against its baselines and bounds on
MIG-serving-style fleets (tally/bench/plan_workloads.py).

For each workload and partition kind (MIG instances, tally SM shares) it
reports the GPUs each plan needs: the optimizer (with its LP lower bound, gap
and time), MIG-serving's greedy, whole GPUs, and every GPU cut into its
smallest partitions, plus the saving against whole GPUs. Every plan is checked
to cover every service's demand.
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from datetime import date
from pathlib import Path

from tally.bench.plan_workloads import SHAPES, generate
from tally.cluster.planner.baselines import all_smallest, whole_gpus
from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.gpus import GPU_TYPES, PARTITION_KINDS, gpu_type
from tally.cluster.planner.greedy import greedy
from tally.cluster.planner.optimizer import optimize
from tally.cluster.planner.problem import Problem
from tally.cluster.planner.profiles import EXAMPLE, load_profile
from tally.cluster.planner.services import PlanRequest


def add_parser(sub) -> None:
    p = sub.add_parser("plan", help="tally-plan's optimizer vs MIG-serving's greedy, whole GPUs and all-smallest "
                                    "partitions on four seeded fleets, MIG and SM shares")
    p.add_argument("--workloads", default=",".join(SHAPES), help="comma-separated (default: %(default)s)")
    p.add_argument("--partitions", default=",".join(PARTITION_KINDS), help="comma-separated (default: %(default)s)")
    p.add_argument("--gpu", choices=sorted(GPU_TYPES), default="a100-40gb")
    p.add_argument("--profile-mig", default=EXAMPLE, help="MIG profile table (default: the bundled example)")
    p.add_argument("--profile-sm-share", default=EXAMPLE, help="SM-share profile table (default: the bundled example)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--scale", type=float, default=1.0, help="multiply each fleet's number of services")
    p.add_argument("--time-limit", type=float, default=60.0, help="optimizer seconds per plan (default: %(default)s)")
    p.add_argument("--json", type=Path, help="write the report here")
    p.add_argument("--png", type=Path, help="write the GPUs-per-plan figure here")


def compare(shape: str, kind: str, gpu: str, profile_source: str, seed: int = 0, scale: float = 1.0,
            time_limit: float = 60.0) -> dict:
    profile = load_profile(profile_source, gpu, kind)
    services = generate(shape, profile, seed=seed, scale=scale)
    problem = Problem(PlanRequest(gpu_type(gpu), kind, profile, services))
    opt = optimize(problem, time_limit)
    fast = greedy(problem)
    whole, smallest = whole_gpus(problem), all_smallest(problem)
    covered = all(r.meets_demand(problem) for r in (opt, fast, whole, smallest))
    return {
        "workload": shape, "partitions": kind, "services": problem.n,
        "optimizer": opt.gpus, "optimizer_seconds": round(opt.seconds, 2), "optimizer_status": opt.status,
        "lp_bound": round(opt.lp_bound, 3), "lower_bound": opt.lower_bound, "gap": round(opt.gap, 5),
        "config_lp_bound": round(opt.details["config_lp_bound"], 3),
        "mip_bound": None if opt.details.get("mip_bound") is None else round(float(opt.details["mip_bound"]), 3),
        "greedy": fast.gpus, "greedy_seconds": round(fast.seconds, 2),
        "whole_gpus": whole.gpus, "all_smallest": smallest.gpus,
        "all_smallest_on_whole_gpus": len(smallest.details["on_whole_gpus"]),
        "saving_vs_whole": round(1 - opt.gpus / whole.gpus, 4),
        "greedy_saving_vs_whole": round(1 - fast.gpus / whole.gpus, 4),
        "all_plans_cover_demand": covered,
    }


def summary_table(rows: list[dict]) -> str:
    head = (f"{'workload':<12} {'parts':<9} {'svc':>4} {'LP bound':>9} {'optimizer':>9} {'gap':>6} {'time':>6} "
            f"{'greedy':>7} {'whole':>6} {'smallest':>8} {'saving':>7}")
    lines = [head]
    for r in rows:
        lines.append(f"{r['workload']:<12} {r['partitions']:<9} {r['services']:>4} {r['lp_bound']:>9.2f} "
                     f"{r['optimizer']:>9} {100 * r['gap']:>5.2f}% {r['optimizer_seconds']:>5.1f}s "
                     f"{r['greedy']:>7} {r['whole_gpus']:>6} {r['all_smallest']:>8} "
                     f"{100 * r['saving_vs_whole']:>6.1f}%")
    return "\n".join(lines)


def main(args: argparse.Namespace) -> int:
    shapes = [s.strip() for s in args.workloads.split(",") if s.strip()]
    kinds = [k.strip() for k in args.partitions.split(",") if k.strip()]
    bad = [s for s in shapes if s not in SHAPES] + [k for k in kinds if k not in PARTITION_KINDS]
    if bad or not shapes or not kinds:
        print(f"tally-bench plan: unknown workloads/partitions {bad}; workloads: {', '.join(SHAPES)}; "
              f"partitions: {', '.join(PARTITION_KINDS)}", file=sys.stderr)
        return 2
    rows = []
    started = time.monotonic()
    print(summary_table([]), flush=True)
    try:
        for shape in shapes:
            for kind in kinds:
                source = args.profile_mig if kind == "mig" else args.profile_sm_share
                rows.append(compare(shape, kind, args.gpu, source, args.seed, args.scale, args.time_limit))
                print(summary_table(rows[-1:]).splitlines()[-1], flush=True)
    except PlanInputError as e:
        print(f"tally-bench plan: {e}", file=sys.stderr)
        return 2
    report = {"date": date.today().isoformat(), "machine": f"{platform.node()} ({platform.processor() or 'cpu'})",
              "gpu": args.gpu, "seed": args.seed, "scale": args.scale, "time_limit": args.time_limit,
              "wall_seconds": round(time.monotonic() - started, 1), "rows": rows}
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")
    if args.png:
        from tally.bench.plan_plots import plot_plan
        plot_plan(rows, args.png)
    return 0 if all(r["all_plans_cover_demand"] for r in rows) else 1
