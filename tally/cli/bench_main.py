"""`tally-bench`: benchmarks users run against tally.

    tally-bench demo                       # tally's main job: two CUDA programs sharing one device
    tally-bench colocate --backend sim --json out.json --png out.png
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tally.bench.colocate import ALL_POLICIES, ColocateConfig, run_colocate
from tally.bench.traces import TRACE_KINDS
from tally.bench.workloads import INFERENCE_MODELS, TRAINING_MODELS
from tally.scheduler.executor import BE_TRANSFORMS
from tally.scheduler.profiler import DEFAULT_TURNAROUND_THRESHOLD_MS

BACKENDS = ("sim", "cuda", "emulator")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="compile two CUDA programs and run them under tally-run against a "
                                    "tally-server (GPU if present, else the CPU emulator)")
    d.add_argument("--backend", choices=("auto", "cuda", "emulator", "null", "sim"), default="auto")
    d.add_argument("--requests", type=int, default=200, help="inference requests (default: %(default)s)")
    d.add_argument("--steps", type=int, default=300, help="training steps (default: %(default)s)")
    c = sub.add_parser("colocate", help="high-priority inference next to best-effort training, "
                                        "under each policy and alone")
    c.add_argument("--backend", choices=BACKENDS, default="sim")
    c.add_argument("--policies", default=",".join(ALL_POLICIES),
                   help="comma-separated (default: %(default)s)")
    c.add_argument("--trace", choices=TRACE_KINDS, default="azure")
    c.add_argument("--load", type=float, default=0.5,
                   help="share of GPU time the inference job needs alone, in (0, 1) (default: %(default)s)")
    c.add_argument("--be-jobs", type=int, default=1)
    c.add_argument("--hp-model", choices=sorted(INFERENCE_MODELS), default="bert-base")
    c.add_argument("--be-model", choices=sorted(TRAINING_MODELS), default="whisper-train")
    c.add_argument("--duration", type=float, default=2.0, help="seconds per run (default: %(default)s)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--gpu", choices=("a100", "h100"), default="a100", help="simulated GPU (sim backend)")
    c.add_argument("--be-transform", choices=BE_TRANSFORMS, default="auto")
    c.add_argument("--turnaround-threshold-ms", type=float, default=DEFAULT_TURNAROUND_THRESHOLD_MS)
    c.add_argument("--time-slice-ms", type=float, default=10.0)
    c.add_argument("--json", type=Path, help="write the report here")
    c.add_argument("--png", type=Path, help="write the latency-CDF / throughput figure here")
    return parser


def _summary(report: dict) -> str:
    alone = report["alone"]
    lines = [f"alone: p50 {alone['hp_p50_ms']:.2f} ms  p99 {alone['hp_p99_ms']:.2f} ms  "
             f"({report['hp_arrivals']} requests at {report['hp_rate_per_s']:.0f}/s)"]
    for name, r in report["policies"].items():
        be = ", ".join(f"{x:.2f}" for x in r["be_normalized_throughput"])
        lines.append(f"{name:>16}: p50 {r['hp_p50_ms']:8.2f} ms  p99 {r['hp_p99_ms']:8.2f} ms "
                     f"({r['hp_p99_vs_alone']:.2f}x alone)  best-effort [{be}]  "
                     f"system {r['system_throughput']:.2f}")
    return "\n".join(lines)


def colocate(args: argparse.Namespace) -> int:
    if args.backend != "sim":
        print(f"tally-bench colocate: --backend {args.backend} is not available yet: it needs the "
              "tally-server/tally-run path and the job scripts; use --backend sim", file=sys.stderr)
        return 2
    try:
        config = ColocateConfig(
            policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
            trace=args.trace, load=args.load, be_jobs=args.be_jobs, hp_model=args.hp_model,
            be_model=args.be_model, duration=args.duration, seed=args.seed, gpu=args.gpu,
            be_transform=args.be_transform, turnaround_threshold_ms=args.turnaround_threshold_ms,
            time_slice_ms=args.time_slice_ms)
        config.validate()
    except ValueError as e:
        print(f"tally-bench colocate: {e}", file=sys.stderr)
        return 2
    result = run_colocate(config)
    print(_summary(result.report))
    if args.json:
        args.json.write_text(json.dumps(result.report, indent=1, sort_keys=True) + "\n")
    if args.png:
        from tally.bench.plots import plot_colocate
        plot_colocate(result.report, result.latencies_ms, args.png)
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.command == "colocate":
        return colocate(args)
    if args.command == "demo":
        from tally.bench.demo import run_demo
        return run_demo(args.backend, args.requests, args.steps)
    return 2


if __name__ == "__main__":
    sys.exit(main())
