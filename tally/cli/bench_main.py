"""`tally-bench`: benchmarks users run against tally.

    tally-bench demo                       # tally's main job: two CUDA programs sharing one device
    tally-bench colocate --backend sim --json out.json --png out.png
    tally-bench colocate --backend sim --be-transform none --dynamic-sm   # SM shares: tally-server's flags
    tally-bench colocate --sm-sweep --png sweep.png   # high-priority p99 vs best-effort throughput per SM share
    tally-bench colocate --backend emulator|cuda [--workload cuda|torch] ...   # real processes
    tally-bench launch --backend null --json out.json   # a launch's server cost, C++ vs Python data plane
    tally-bench graphs --json out.json                  # a graph replay's server cost as one unit vs node by node
    tally-bench plan --json out.json --png out.png   # tally-plan vs MIG-serving's greedy and baselines
    tally-bench profile --partitions sm-share -o table.yaml   # a tally-plan profile table (sim backend)
    tally-bench profile --backend emulator|cuda --shares 25,50,100 -o table.yaml   # real processes per SM share
    tally-bench cluster --gpus 1000 --jobs 3000 --json out.json --png out.png   # placement policies
    tally-bench chaos --rounds 100 --json out.json   # best-effort jobs killed/evicted around a checked HP job
    tally-bench fuzz --messages 1000000 --json out.json   # mutated requests and handshakes at a real server
    tally-bench migrate --json out.json --png out.png   # suspend/resume/migrate time vs a job's footprint
    tally-bench gpu-check --dry-run | --rehearse --quick   # the GPU kit: its plan; its steps on the CPU emulator
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from tally.cli import extras
from tally.bench.colocate import ALL_POLICIES, ColocateConfig, run_colocate
from tally.bench.process_jobs import (
    BEST_EFFORT,
    DEFAULT_JOBS,
    HIGH,
    PROGRAMS,
    WORKLOADS,
)
from tally.bench.traces import TRACE_KINDS
from tally.bench.workloads import INFERENCE_MODELS, TRAINING_MODELS
from tally.cli.server_flags import add_share_flags, positive_int
from tally.scheduler.executor import BE_TRANSFORMS
from tally.scheduler.profiler import DEFAULT_TURNAROUND_THRESHOLD_MS

BACKENDS = ("sim", "cuda", "emulator")
LAUNCH_BACKENDS = ("null", "cuda")     # tally/bench/launch.py


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tally-bench", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="compile two CUDA programs and run them under tally-run against a "
                                    "tally-server (GPU if present, else the CPU emulator)")
    d.add_argument("--backend", choices=("auto", "cuda", "emulator", "null", "sim"), default="auto")
    d.add_argument("--requests", type=int, default=400, help="inference requests (default: %(default)s)")
    d.add_argument("--steps", type=int, default=600, help="training steps (default: %(default)s)")
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
    c.add_argument("--be-model", choices=sorted(TRAINING_MODELS), default=None,
                   help="the training job (default whisper-train; with --sm-sweep: each of them)")
    c.add_argument("--duration", type=float, default=2.0, help="seconds per run (default: %(default)s)")
    c.add_argument("--seed", type=int, default=0)
    c.add_argument("--gpu", choices=("a100", "h100"), default="a100", help="simulated GPU (sim backend)")
    c.add_argument("--be-transform", choices=BE_TRANSFORMS, default="auto")
    c.add_argument("--turnaround-threshold-ms", type=float, default=DEFAULT_TURNAROUND_THRESHOLD_MS)
    c.add_argument("--time-slice-ms", type=float, default=10.0)
    add_share_flags(c)
    c.add_argument("--sm-sweep", action="store_true",
                   help="(sim) the priority policy with the best-effort job at static SM shares 10..90%%, the "
                        "whole device and --dynamic-sm: high-priority p99 against best-effort throughput, as a "
                        "table (--json, --png: the sweep's report and figure)")
    real = c.add_argument_group("real processes (--backend cuda|emulator)")
    real.add_argument("--workload", choices=WORKLOADS, default="cuda",
                      help="cuda: CUDA C++ jobs (run on the emulator too); torch: PyTorch jobs (GPU)")
    real.add_argument("--hp-job", help="high-priority job: " + _job_names(HIGH))
    real.add_argument("--be-job", help="best-effort job: " + _job_names(BEST_EFFORT))
    real.add_argument("--hp-args", help="extra arguments for the high-priority job, e.g. \"--width 1024\"")
    real.add_argument("--be-args", help="extra arguments for each best-effort job, e.g. \"--samples 65536\"")
    real.add_argument("--be-run-args", help="extra tally-run flags for each best-effort job, e.g. "
                                            "\"--no-jit-capture\" (its kernels compiled at run time then keep "
                                            "no PTX and run whole)")
    real.add_argument("--keep-workdir", action="store_true",
                      help="keep the runs' logs, reports and arrival files (the path is printed)")
    real.add_argument("--workdir", type=Path, metavar="DIR",
                      help="keep them in DIR (made if missing; kept also when the run is interrupted): the "
                           "servers' and jobs' logs of each run")
    c.add_argument("--json", type=Path, help="write the report here")
    c.add_argument("--png", type=Path, help="write the latency-CDF / throughput figure here")
    lb = sub.add_parser("launch", help="what a kernel launch, a synchronization and a wake-up cost tally's server, "
                                       "with the C++ and the Python data plane in the same run")
    lb.add_argument("--backend", choices=LAUNCH_BACKENDS, default="null",
                    help="null: tally's forwarding alone; cuda (a GPU): also the program natively")
    lb.add_argument("--rounds", type=int, default=20, help="timed rounds of launches per job (default: %(default)s)")
    lb.add_argument("--batch", type=int, default=2000, help="launches per round (default: %(default)s)")
    lb.add_argument("--be-rounds", type=int, help="rounds of the best-effort job (default: --rounds)")
    lb.add_argument("--syncs", type=int, default=2000, help="timed synchronizations (default: %(default)s)")
    lb.add_argument("--wakes", type=int, default=200, help="synchronizations after idle (default: %(default)s)")
    lb.add_argument("--gap-us", type=float, default=1000.0, help="idle time before each (default: %(default)s)")
    lb.add_argument("--jobs", type=int, default=4, help="jobs launching at once (default: %(default)s)")
    lb.add_argument("--json", type=Path, help="write the report here")
    from tally.bench.reliability_args import add_reliability_parsers
    add_reliability_parsers(sub)
    g = sub.add_parser("graphs", help="what a CUDA graph replay costs the server as one unit and node by node "
                                      "(null backend), and an LLM decode step's p99 on the sim with each")
    g.add_argument("--nodes", type=int, default=240, help="kernels in the replayed graph (default: %(default)s)")
    g.add_argument("--runs", type=int, default=3, help="job runs per mode, alternating (default: %(default)s)")
    g.add_argument("--batches", default="1,16,64", help="decode batch sizes of the sim model (default: %(default)s)")
    g.add_argument("--steps", type=int, default=300, help="decode steps per sim run (default: %(default)s)")
    g.add_argument("--no-sim", action="store_true", help="measure the server's cost only")
    g.add_argument("--json", type=Path, help="also write the whole report here")
    m = sub.add_parser("migrate", help="suspend, resume and migration time against a job's device footprint, "
                                       "on two tally-servers of this host")
    m.add_argument("--backend", choices=("emulator", "cuda", "null"), default="emulator")
    m.add_argument("--footprints", default="16,64,256,1024",
                   help="the job's device memory in MiB, comma-separated (default: %(default)s)")
    m.add_argument("--repeat", type=positive_int, default=1, metavar="N",
                   help="measure each footprint N times and report the medians (default 1)")
    m.add_argument("--json", type=Path, help="write the rows here")
    m.add_argument("--png", type=Path, help="write the figure here")
    from tally.bench.gpu_check.cli import add_parser as add_gpu_check_parser
    add_gpu_check_parser(sub)
    if not extras.missing("cluster"):
        from tally.bench import plan_compare, profile
        from tally.bench.cluster_args import add_cluster_parser
        plan_compare.add_parser(sub)
        profile.add_parser(sub)
        add_cluster_parser(sub)
    else:   # listed, so `tally-bench plan` says what to install instead of "invalid choice"
        for name in ("plan", "profile", "cluster"):
            sub.add_parser(name, help="(needs pip install 'tally[cluster]')")
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


def _job_names(role: str) -> str:
    return "; ".join(f"{w}: " + ", ".join(n for n, p in PROGRAMS.items() if p.role == role and p.workload == w)
                     + f" (default {DEFAULT_JOBS[w][0 if role == HIGH else 1]})" for w in WORKLOADS)


def colocate_processes(args: argparse.Namespace) -> int:
    """--backend cuda|emulator: real tally-server and tally-run processes."""
    from tally.bench.process_colocate import run_process_colocate
    from tally.bench.process_group import JobFailed
    from tally.bench.process_jobs import JobBuildError
    from tally.bench.process_runner import config_from_args, gpu_present
    try:
        config = config_from_args(args)
        config.validate()
    except ValueError as e:
        print(f"tally-bench colocate: {e}", file=sys.stderr)
        return 2
    if args.backend == "cuda" and not gpu_present():
        print("tally-bench colocate: --backend cuda needs an NVIDIA driver and GPU, and none was found; "
              "use --backend emulator to run the cuda workload on the CPU", file=sys.stderr)
        return 2
    try:
        if args.workdir is not None:
            args.workdir.mkdir(parents=True, exist_ok=True)
        result = run_process_colocate(config, workdir=args.workdir,
                                      keep_workdir=args.keep_workdir or args.workdir is not None)
    except (JobFailed, JobBuildError) as e:
        print(f"tally-bench colocate: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tally-bench colocate: interrupted; every server and job it started was stopped", file=sys.stderr)
        return 130
    print(_summary(result.report))
    for run in result.report["runs"]:
        counters = run["counters"]
        print(f"  server counters [{run['purpose']}, {run['policy']}, {'1' if run['hp'] else 'no'} high-priority, "
              f"{run['be_jobs']} best-effort]: " + ", ".join(
                  f"{k} {counters.get(k, 0)}" for k in ("kernels", "kernels_sliced", "kernels_ptb", "preemptions",
                                                        "untransformable")))
    if result.report["workdir_kept"]:
        print(f"logs and reports kept in {result.report['workdir']}")
    _write_outputs(args, result)
    return 0


def _write_outputs(args: argparse.Namespace, result) -> None:
    if args.json:
        args.json.write_text(json.dumps(result.report, indent=1, sort_keys=True) + "\n")
    if args.png:
        from tally.bench.plots import plot_colocate
        plot_colocate(result.report, result.latencies_ms, args.png)


def colocate(args: argparse.Namespace) -> int:
    if args.sm_sweep and args.backend != "sim":
        print("tally-bench colocate: --sm-sweep runs on the sim backend (--backend sim)", file=sys.stderr)
        return 2
    if args.backend != "sim":
        return colocate_processes(args)
    try:
        config = ColocateConfig(
            policies=tuple(p.strip() for p in args.policies.split(",") if p.strip()),
            trace=args.trace, load=args.load, be_jobs=args.be_jobs, hp_model=args.hp_model,
            be_model=args.be_model or "whisper-train", duration=args.duration, seed=args.seed, gpu=args.gpu,
            be_transform=args.be_transform, turnaround_threshold_ms=args.turnaround_threshold_ms,
            time_slice_ms=args.time_slice_ms, be_sm_percent=args.be_sm_percent, dynamic_sm=args.dynamic_sm,
            be_sm_floor=args.be_sm_floor, be_util_target=args.be_util_target,
            sample_period_ms=args.sample_period_ms)
        config.validate()
    except ValueError as e:
        print(f"tally-bench colocate: {e}", file=sys.stderr)
        return 2
    if args.sm_sweep:
        return sm_sweep(args, config)
    result = run_colocate(config)
    print(_summary(result.report))
    if args.json:
        args.json.write_text(json.dumps(result.report, indent=1, sort_keys=True) + "\n")
    if args.png:
        from tally.bench.plots import plot_colocate
        plot_colocate(result.report, result.latencies_ms, args.png)
    return 0


def launch(args: argparse.Namespace) -> int:
    from tally.bench.launch import LaunchBenchConfig, run_launch_bench, summary
    from tally.bench.process_group import JobFailed
    from tally.bench.process_jobs import JobBuildError
    from tally.bench.process_runner import gpu_present
    config = LaunchBenchConfig(backend=args.backend, rounds=args.rounds, batch=args.batch, syncs=args.syncs,
                               wakes=args.wakes, gap_us=args.gap_us, jobs=args.jobs, be_rounds=args.be_rounds)
    try:
        config.validate()
    except ValueError as e:
        print(f"tally-bench launch: {e}", file=sys.stderr)
        return 2
    if args.backend == "cuda" and not gpu_present():
        print("tally-bench launch: --backend cuda needs an NVIDIA driver and GPU, and none was found; "
              "use --backend null", file=sys.stderr)
        return 2
    try:
        report = run_launch_bench(config)
    except (JobFailed, JobBuildError) as e:
        print(f"tally-bench launch: {e}", file=sys.stderr)
        return 1
    print(summary(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 0


def sm_sweep(args: argparse.Namespace, config: ColocateConfig) -> int:
    from tally.bench.sm_sweep import format_sweep, run_sm_sweep
    models = (args.be_model,) if args.be_model else None
    report = run_sm_sweep(config, models)
    print(format_sweep(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    if args.png:
        from tally.bench.sm_sweep import plot_sm_sweep
        plot_sm_sweep(report, args.png)
    return 0


def graphs(args: argparse.Namespace) -> int:
    from tally.bench.graph_bench import GraphBenchConfig, run_graph_bench, summary
    from tally.bench.process_group import JobFailed
    from tally.bench.process_jobs import JobBuildError
    try:
        batches = tuple(int(b) for b in args.batches.split(","))
        config = GraphBenchConfig(nodes=args.nodes, runs=args.runs, batches=batches, steps=args.steps,
                                  sim=not args.no_sim)
        config.validate()
    except ValueError as e:
        print(f"tally-bench graphs: {e}", file=sys.stderr)
        return 2
    try:
        report = run_graph_bench(config)
    except (JobFailed, JobBuildError) as e:
        print(f"tally-bench graphs: {e}", file=sys.stderr)
        return 1
    print(summary(report))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if getattr(args, "png", None) is not None:   # say so before a long run, not after it
        extras.require("plot", "tally-bench --png")
    if args.command == "colocate":
        return colocate(args)
    if args.command == "launch":
        return launch(args)
    if args.command == "graphs":
        return graphs(args)
    if args.command in ("plan", "profile", "cluster"):
        extras.require("cluster", f"tally-bench {args.command}")
    if args.command == "plan":
        from tally.bench import plan_compare
        return plan_compare.main(args)
    if args.command == "profile":
        from tally.bench import profile
        return profile.main(args)
    if args.command == "cluster":
        from tally.bench.cluster_args import cluster_main
        return cluster_main(args)
    if args.command in ("chaos", "fuzz"):
        from tally.bench.reliability_args import reliability_main
        return reliability_main(args)
    if args.command == "migrate":
        from tally.bench.migrate import run_migrate_bench
        from tally.bench.migrate_report import table, write
        try:
            footprints = [int(x) for x in args.footprints.split(",") if x]
        except ValueError:
            print(f"tally-bench migrate: --footprints {args.footprints!r} is not a list of MiB counts", file=sys.stderr)
            return 2
        rows = run_migrate_bench(footprints, args.backend, repeat=args.repeat,
                                 on_row=lambda r: print(f"{r.footprint_mib} MiB measured", file=sys.stderr))
        print(table(rows))
        write(rows, args.json, args.png)
        return 0 if all(r.exact for r in rows) else 1
    if args.command == "gpu-check":
        from tally.bench.gpu_check.cli import main as gpu_check_main
        return gpu_check_main(args)
    if args.command == "demo":
        from tally.bench.demo import run_demo
        return run_demo(args.backend, args.requests, args.steps)
    return 2


if __name__ == "__main__":
    sys.exit(main())
