"""`tally-bench profile`: each model's throughput and p99 latency on each
partition size and batch, written as a planner profile table.

How a measurement is taken is a ProfileRunner's business (profile_runner.py);
the table is shared.

- SimProfileRunner (`--backend sim`) runs the kernel-level models of
  profile_models.py on the `sim` backend: one batch through the scheduler on a
  simulated GPU that has the partition's SMs (an SM share is the job's kernels
  confined to that share of the SMs; a MIG instance is its SM count). The sim
  is deterministic and serves one batch at a time, so the p99 latency is that
  batch's latency and the throughput is batch / latency. What it does not
  model: memory bandwidth and L2 split between partitions.
- ProcessProfileRunner (`--backend cuda|emulator`, profile_processes.py) starts
  a tally-server per share and batch and runs a real model-serving program
  under `tally-run --priority high --sm-percent P` (green contexts on a GPU;
  the emulator caps the job to its share of its worker threads). It measures
  SM shares only: MIG instances are GPU partitions tally does not make.
"""
from __future__ import annotations

import dataclasses
import math
import os
import shlex
import sys
import time
from pathlib import Path

from tally.backends.sim import SimBackend
from tally.backends.sim.model import GPU_PRESETS, GiB, SimGPU
from tally.bench.profile_models import MODEL_MEMORY_GB, PROFILE_MODELS, batched
from tally.bench.profile_runner import Measurement, Partition, ProfileRunner
from tally.bench.sim_jobs import InferenceJob
from tally.cluster.planner.gpus import MIG, SM_SHARE, gpu_type
from tally.cluster.planner.layouts import PartitionScheme
from tally.cluster.planner.profiles import ProfileRow, ProfileTable
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.policies import make_policy
from tally.scheduler.profiler import TransparentProfiler

BACKENDS = ("sim", "emulator", "cuda")
DEFAULT_BATCHES = {"sim": (1, 2, 4, 8, 16, 32), "cuda": (1, 2, 4, 8, 16, 32), "emulator": (1, 2, 4)}
DEFAULT_SHARES = {"emulator": (25, 50, 100)}     # elsewhere: every step of --step
DEFAULT_DURATION_S = {"emulator": 1.5, "cuda": 3.0}
EMULATOR_NOTE = ("emulator figures are CPU-interpreter timings, not a GPU's: they show how the share confines the "
                 "job (throughput grows with the share up to this host's {cores} CPU cores), not a GPU's speed")


class UnsupportedBackend(ValueError):
    pass


class SimProfileRunner:
    source = ("tally-bench profile --backend sim: the sim backend's cost model (tally/backends/sim/model.py) "
              "running the kernel-level models of tally/bench/profile_models.py, one batch at a time on a "
              "simulated GPU with the partition's SMs")
    models = tuple(PROFILE_MODELS)
    default_models = tuple(PROFILE_MODELS)
    memory_gb = MODEL_MEMORY_GB

    def __init__(self, gpu: SimGPU):
        self.gpu = gpu

    def measure(self, model: str, partition: Partition, batch: int) -> Measurement:
        sim = SimBackend(dataclasses.replace(self.gpu, sm_count=partition.sms))
        executor = StreamExecutor(sim, make_policy("fifo"), sim.variant_provider(),
                                  TransparentProfiler(partition.sms), clock=sim.clock)
        job = InferenceJob(sim, executor, "profiled", batched(PROFILE_MODELS[model], batch), [0.0])
        job.start()
        sim.loop.wait_until(lambda: bool(job.latencies), "one batch")
        latency = job.latencies[0]
        return Measurement(batch / latency, latency * 1e3)


def sim_runner(gpu: str) -> SimProfileRunner:
    target = gpu_type(gpu)
    preset = GPU_PRESETS[target.sim_preset]
    return SimProfileRunner(dataclasses.replace(preset, memory_bytes=target.memory_gb * GiB))


def check_backend(backend: str, kind: str) -> None:
    if backend not in BACKENDS:
        raise UnsupportedBackend(f"unknown backend {backend!r}; use --backend sim (the sim's cost model), emulator "
                                 f"(real processes on the CPU emulator) or cuda (real processes on a GPU)")
    if backend != "sim" and kind == MIG:
        raise UnsupportedBackend(f"--backend {backend} measures SM shares (tally-run --sm-percent); MIG instances "
                                 f"are partitions tally does not make. Use --partitions sm-share, or --backend sim "
                                 f"for a MIG table from the sim's cost model")


def partitions_to_measure(gpu: str, kind: str, step_percent: int | None, shares: list[int] | None
                          ) -> tuple[PartitionScheme, list[Partition]]:
    """The scheme of the table and the partitions to measure: every size, or the
    asked SM shares (the step then defaults to their greatest common divisor with 100)."""
    if shares is not None and kind != SM_SHARE:
        raise ValueError("--shares lists SM shares; it goes with --partitions sm-share")
    if shares is not None:
        bad = [s for s in shares if not 1 <= s <= 100]
        if not shares or bad:
            raise ValueError(f"--shares must be percentages from 1 to 100, got {shares}")
        step = step_percent or math.gcd(100, *shares)
        off_step = [s for s in shares if s % step]
        if off_step:
            raise ValueError(f"--shares {', '.join(map(str, off_step))} are not multiples of --step {step}")
    else:
        step = step_percent or 10
    scheme = PartitionScheme(gpu_type(gpu), kind, step)
    names = [f"{s}%" for s in sorted(set(shares))] if shares is not None else list(scheme.partitions)
    return scheme, [Partition(n, scheme.sms(n), float(n[:-1]) if kind == SM_SHARE else None) for n in names]


def profile_table(runner: ProfileRunner, scheme: PartitionScheme, partitions: list[Partition], models: list[str],
                  batches, example: bool = False, progress=None) -> ProfileTable:
    unknown = [m for m in models if m not in runner.models]
    if unknown:
        raise ValueError(f"unknown models {', '.join(unknown)}; choose from {', '.join(runner.models)}")
    rows: list[ProfileRow] = []
    for name in models:
        started = time.monotonic()
        for partition in partitions:
            for batch in batches:
                m = runner.measure(name, partition, batch)
                rows.append(ProfileRow(name, partition.name, batch, m.throughput, m.latency_ms))
        if progress:
            progress(f"{name}: {len(partitions) * len(batches)} runs in {time.monotonic() - started:.1f} s")
    return ProfileTable(gpu=scheme.gpu.key, partitions=scheme.kind, source=runner.source, rows=rows,
                        memory_gb={m: runner.memory_gb[m] for m in models if m in runner.memory_gb},
                        example=example, step_percent=scheme.step_percent)


def add_parser(sub) -> None:
    from tally.cluster.planner.gpus import GPU_TYPES, PARTITION_KINDS
    p = sub.add_parser("profile", help="each model's throughput and p99 latency per partition size and batch, "
                                       "written as a tally-plan profile table")
    p.add_argument("--backend", default="sim",
                   help="sim (the sim's cost model, default), emulator (real processes on the CPU emulator: "
                        "the share's confinement, not a GPU's speed) or cuda (real processes on this GPU)")
    p.add_argument("--gpu", choices=sorted(GPU_TYPES), default="a100-40gb",
                   help="the GPU type the table is for (the planner's target)")
    p.add_argument("--partitions", choices=PARTITION_KINDS, default="sm-share")
    p.add_argument("--step", type=int, default=None,
                   help="SM-share step in percent (default 10, or the greatest common divisor of --shares)")
    p.add_argument("--shares", help="comma-separated SM shares to measure, in percent (default: every step; "
                                    f"emulator: {','.join(map(str, DEFAULT_SHARES['emulator']))})")
    p.add_argument("--models", help="comma-separated (default: all sim models; real backends: dense-inference)")
    p.add_argument("--batches", help="comma-separated batch sizes (default: "
                                     + "; ".join(f"{b}: {','.join(map(str, v))}" for b, v in DEFAULT_BATCHES.items())
                                     + ")")
    p.add_argument("--example", action="store_true", help="mark the table as example numbers (the bundled ones)")
    real = p.add_argument_group("real processes (--backend emulator|cuda)")
    real.add_argument("--duration", type=float, default=None,
                      help="seconds of back-to-back requests per share and batch (default: "
                           + "; ".join(f"{b}: {s:g}" for b, s in DEFAULT_DURATION_S.items()) + ")")
    real.add_argument("--job-args", help="extra arguments of the serving program, e.g. \"--layers 8 --width 4096\"")
    real.add_argument("--emulate-sms", type=int, default=None, metavar="N",
                      help="the emulator's SM count (worker threads; tally-server's default 8)")
    real.add_argument("--keep-workdir", action="store_true", help="keep the runs' logs and reports")
    p.add_argument("-o", "--output", type=Path, required=True, help="the table (.yaml or .json)")


def _numbers(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{what} must be comma-separated integers, got {text!r}") from None


def main(args) -> int:
    from tally.bench.process_group import JobFailed
    from tally.bench.process_jobs import JobBuildError
    from tally.bench.profile_processes import ProfileRunError
    from tally.cluster.planner.errors import PlanInputError
    try:
        check_backend(args.backend, args.partitions)
        scheme, partitions = partitions_to_measure(args.gpu, args.partitions, args.step,
                                                   _numbers(args.shares, "--shares")
                                                   or _default_shares(args.backend))
        batches = _numbers(args.batches, "--batches") or list(DEFAULT_BATCHES[args.backend])
        if not batches or min(batches) < 1:
            raise ValueError(f"--batches must be integers >= 1, got {args.batches!r}")
        if args.backend == "sim":
            table = _profile(sim_runner(args.gpu), args, scheme, partitions, batches)
        else:
            table = _profile_processes(args, scheme, partitions, batches)
    except (UnsupportedBackend, ValueError, PlanInputError) as e:
        print(f"tally-bench profile: {e}", file=sys.stderr)
        return 2
    except (JobFailed, JobBuildError, ProfileRunError) as e:
        print(f"tally-bench profile: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("tally-bench profile: interrupted; every server and job it started was stopped", file=sys.stderr)
        return 130
    table.dump(args.output)
    print(f"wrote {len(table.rows)} rows ({len(table.models)} models) to {args.output}")
    return 0


def _default_shares(backend: str) -> list[int] | None:
    shares = DEFAULT_SHARES.get(backend)
    return list(shares) if shares else None


def _profile(runner: ProfileRunner, args, scheme, partitions, batches) -> ProfileTable:
    models = [m.strip() for m in args.models.split(",") if m.strip()] if args.models else list(runner.default_models)
    return profile_table(runner, scheme, partitions, models, batches, args.example,
                         progress=lambda line: print(line, file=sys.stderr))


def _profile_processes(args, scheme, partitions, batches) -> ProfileTable:
    from tally.bench.process_runner import gpu_present
    from tally.bench.profile_processes import ProcessProfileRunner
    if args.backend == "cuda" and not gpu_present():
        raise UnsupportedBackend("--backend cuda needs an NVIDIA driver and GPU, and none was found on this "
                                 "machine; use --backend emulator (real processes on the CPU emulator) or "
                                 "--backend sim (the sim's cost model)")
    if args.emulate_sms is not None and args.emulate_sms < 1:
        raise ValueError(f"--emulate-sms must be >= 1, got {args.emulate_sms}")
    duration = args.duration if args.duration is not None else DEFAULT_DURATION_S[args.backend]
    with ProcessProfileRunner(args.backend, duration, tuple(shlex.split(args.job_args or "")), args.emulate_sms,
                              args.keep_workdir, progress=lambda line: print(line, file=sys.stderr)) as runner:
        if args.backend == "emulator":
            print("tally-bench profile: note: " + EMULATOR_NOTE.format(cores=os.cpu_count()), file=sys.stderr)
        table = _profile(runner, args, scheme, partitions, batches)
        if args.keep_workdir:
            print(f"logs and reports kept in {runner.workdir}", file=sys.stderr)
    return table
