"""`tally-bench cluster`'s options and entry point (the work is in cluster.py)."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tally.bench.cluster_sim import POLICIES

CLUSTER_EXTRA = "pip install 'tally[cluster]'"


def add_cluster_parser(sub) -> None:
    c = sub.add_parser("cluster", help="placement of best-effort jobs on a simulated cluster: MuxFlow's matching "
                                       "vs greedy, random and protection-only (needs the cluster extra)")
    c.add_argument("--gpus", type=int, default=1000)
    c.add_argument("--jobs", type=int, default=3000, help="best-effort jobs (default: %(default)s)")
    c.add_argument("--policies", default=",".join(POLICIES), help="comma-separated (default: %(default)s)")
    c.add_argument("--gpu", choices=("a100", "h100"), default="a100", help="simulated GPU type")
    c.add_argument("--online-types", type=int, default=6)
    c.add_argument("--best-effort-types", type=int, default=16)
    c.add_argument("--loads", default="0.15,0.35,0.55", help="online loads the pairs are measured at")
    c.add_argument("--pair-seconds", type=float, default=0.3, help="virtual seconds per measured pair")
    c.add_argument("--arrival-hours", type=float, default=3.0, help="jobs arrive over this many hours")
    c.add_argument("--median-job-minutes", type=float, default=20.0, help="median job length alone")
    c.add_argument("--outages-per-gpu-day", type=float, default=0.5, help="GPUs going unhealthy")
    c.add_argument("--predictor-iterations", type=int, default=2000, help="L-BFGS iterations training the MLP")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--workers", type=int, default=0, help="processes measuring pairs (default: every core)")
    c.add_argument("--no-cache", action="store_true", help="measure the pairs again instead of reading the cache")
    c.add_argument("--predictor-in", type=Path, help="use this saved speed predictor instead of training one")
    c.add_argument("--predictor-out", type=Path, help="save the trained speed predictor here")
    c.add_argument("--json", type=Path, help="write the report here")
    c.add_argument("--png", type=Path, help="write the figure here")


def cluster_main(args: argparse.Namespace) -> int:
    try:
        import scipy  # noqa: F401
        import sklearn  # noqa: F401
    except ImportError as e:
        print(f"tally-bench cluster needs scikit-learn and scipy ({e}); install them with: {CLUSTER_EXTRA}",
              file=sys.stderr)
        return 2
    from tally.bench.cluster import ClusterConfig, run_cluster, summary
    from tally.cluster.placement.predictor import PredictorVersionError
    try:
        loads = tuple(float(x) for x in args.loads.split(",") if x.strip())
        config = ClusterConfig(gpus=args.gpus, jobs=args.jobs, loads=loads, pair_seconds=args.pair_seconds,
                               policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
                               gpu=args.gpu, online_types=args.online_types,
                               best_effort_types=args.best_effort_types, arrival_hours=args.arrival_hours,
                               median_job_minutes=args.median_job_minutes,
                               outage_rate_per_gpu_day=args.outages_per_gpu_day, seed=args.seed,
                               workers=args.workers, predictor_iterations=args.predictor_iterations)
        config.validate()
        kwargs = {"predictor_in": args.predictor_in, "predictor_out": args.predictor_out}
        if args.no_cache:
            kwargs["cache_dir"] = None
        report = run_cluster(config, **kwargs)
    except (ValueError, PredictorVersionError, FileNotFoundError) as e:
        print(f"tally-bench cluster: {e}", file=sys.stderr)
        return 2
    print(summary(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.png:
        from tally.bench.cluster_plot import plot_cluster
        plot_cluster(report, args.png)
    return 0
