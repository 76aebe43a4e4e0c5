"""`tally-bench chaos` and `tally-bench fuzz`: the reliability campaign's command lines."""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_reliability_parsers(sub) -> None:
    c = sub.add_parser("chaos", help="a checked high-priority job while best-effort jobs are killed (SIGKILL, "
                                     "SIGTERM, SIGINT) or evicted mid-allocation, -copy, -kernel and -graph")
    c.add_argument("--rounds", type=int, default=100, help="best-effort jobs struck (default: %(default)s)")
    c.add_argument("--backend", choices=("emulator", "null"), default="emulator")
    c.add_argument("--seed", type=int, default=0, help="draws each round's action, phase and delay")
    c.add_argument("--actions", default="",
                   help="comma-separated from SIGKILL,SIGTERM,SIGINT,evict (default: all; evict where the server "
                        "has it)")
    c.add_argument("--phases", default=",".join(("alloc", "copy", "kernel", "graph")),
                   help="comma-separated phases to aim at (default: %(default)s)")
    c.add_argument("--max-delay-ms", type=float, default=15.0,
                   help="strike up to this long after the phase starts (default: %(default)s)")
    c.add_argument("--keep-workdir", action="store_true", help="keep the server's and the jobs' logs")
    c.add_argument("--json", type=Path, help="write the report here")
    f = sub.add_parser("fuzz", help="mutated ring messages and handshakes at a real tally-server: every bad "
                                    "message answered with an error, no crash, the server still serving")
    f.add_argument("--messages", type=int, default=100_000, help="ring messages (default: %(default)s)")
    f.add_argument("--handshakes", type=int, default=None,
                   help="mutated handshakes (default: one per 100 messages, at least 20)")
    f.add_argument("--backend", choices=("emulator", "null", "sim"), default="null")
    f.add_argument("--seed", type=int, default=0)
    f.add_argument("--json", type=Path, help="write the report here")


def reliability_main(args: argparse.Namespace) -> int:
    if args.command == "chaos":
        return _chaos(args)
    return _fuzz(args)


def _chaos(args: argparse.Namespace) -> int:
    from tally.bench.chaos import ChaosConfig, run_chaos
    from tally.bench.chaos_checks import failed, format_table
    from tally.bench.process_group import JobFailed
    from tally.bench.process_jobs import JobBuildError
    config = ChaosConfig(rounds=args.rounds, backend=args.backend, seed=args.seed,
                         max_delay_s=args.max_delay_ms / 1000.0,
                         actions=tuple(a.strip() for a in args.actions.split(",") if a.strip()),
                         phases=tuple(p.strip() for p in args.phases.split(",") if p.strip()))
    try:
        config.validate()
    except ValueError as e:
        print(f"tally-bench chaos: {e}", file=sys.stderr)
        return 2

    def progress(r) -> None:
        print(f"round {r.index + 1}/{config.rounds}: {r.action} in {r.struck_in or '-'} "
              f"(aimed at {r.target_phase} +{r.delay_s * 1000:.0f} ms): exit {r.exit_status}, "
              f"released in {r.release_s:.2f} s" + (f" [{r.note}]" if r.note else ""), file=sys.stderr, flush=True)

    try:
        report = run_chaos(config, keep_workdir=args.keep_workdir, progress=progress)
    except (JobFailed, JobBuildError) as e:
        print(f"tally-bench chaos: {e}", file=sys.stderr)
        return 1
    print(format_table(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 1 if failed(report["checks"]) else 0


def _fuzz(args: argparse.Namespace) -> int:
    from tally.bench.fuzz_soak import FuzzConfig, format_fuzz, run_fuzz
    handshakes = args.handshakes if args.handshakes is not None else max(20, args.messages // 100)
    config = FuzzConfig(messages=args.messages, handshakes=handshakes, backend=args.backend, seed=args.seed)
    try:
        config.validate()
    except ValueError as e:
        print(f"tally-bench fuzz: {e}", file=sys.stderr)
        return 2
    report = run_fuzz(config)
    print(format_fuzz(report))
    if args.json:
        args.json.write_text(json.dumps(report, indent=1, sort_keys=True) + "\n")
    return 0 if all(c["passed"] for c in report["checks"]) else 1
