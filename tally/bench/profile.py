"""`tally-bench profile`: each model's throughput and p99 latency on each
partition size and batch, written as a planner profile table.

How a measurement is taken is a ProfileRunner's business; the table is shared.
SimProfileRunner runs the model on the `sim` backend: one batch through the
scheduler on a simulated GPU that has the partition's SMs (an SM share is the
job's kernels confined to that share of the SMs; a MIG instance is its SM
count). The sim is deterministic and serves one batch at a time, so the p99
latency is that batch's latency and the throughput is batch / latency. What it
does not model: memory bandwidth and L2 split between partitions.

A runner for a GPU would start `tally-server` and run a model-serving program
under `tally-run --sm-percent P` for each share (green contexts confine its
kernels), reading throughput and p99 from the program's report; it is not
written yet because per-job SM shares are not in tally yet, and the command
says so instead of falling back to the sim.
"""
from __future__ import annotations

import dataclasses
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tally.backends.sim import SimBackend
from tally.backends.sim.model import GPU_PRESETS, GiB, SimGPU
from tally.bench.profile_models import MODEL_MEMORY_GB, PROFILE_MODELS, batched
from tally.bench.sim_jobs import InferenceJob
from tally.bench.workloads import InferenceModel
from tally.cluster.planner.gpus import gpu_type
from tally.cluster.planner.layouts import PartitionScheme
from tally.cluster.planner.profiles import ProfileRow, ProfileTable
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.policies import make_policy
from tally.scheduler.profiler import TransparentProfiler

DEFAULT_BATCHES = (1, 2, 4, 8, 16, 32)
SUPPORTED_BACKENDS = ("sim",)
UNSUPPORTED_BACKENDS = {
    "cuda": "profiling on a GPU runs each model under `tally-run --sm-percent P` (green contexts), and per-job SM "
            "shares are not in tally yet",
    "emulator": "the emulator interprets PTX on the CPU and has no timing model of a GPU's SMs",
}


class UnsupportedBackend(ValueError):
    pass


@dataclass(frozen=True)
class Measurement:
    throughput: float          # requests/s
    latency_ms: float          # p99 of one batch


class ProfileRunner(Protocol):
    source: str

    def measure(self, model: InferenceModel, sms: int, batch: int) -> Measurement: ...


class SimProfileRunner:
    source = ("tally-bench profile --backend sim: the sim backend's cost model (tally/backends/sim/model.py) "
              "running the kernel-level models of tally/bench/profile_models.py, one batch at a time on a "
              "simulated GPU with the partition's SMs")

    def __init__(self, gpu: SimGPU):
        self.gpu = gpu

    def measure(self, model: InferenceModel, sms: int, batch: int) -> Measurement:
        sim = SimBackend(dataclasses.replace(self.gpu, sm_count=sms))
        executor = StreamExecutor(sim, make_policy("fifo"), sim.variant_provider(), TransparentProfiler(sms),
                                  clock=sim.clock)
        job = InferenceJob(sim, executor, "profiled", batched(model, batch), [0.0])
        job.start()
        sim.loop.wait_until(lambda: bool(job.latencies), "one batch")
        latency = job.latencies[0]
        return Measurement(batch / latency, latency * 1e3)


def runner_for(backend: str, gpu: str) -> ProfileRunner:
    if backend in UNSUPPORTED_BACKENDS:
        raise UnsupportedBackend(f"--backend {backend} is not supported yet: {UNSUPPORTED_BACKENDS[backend]}; "
                                 f"use --backend sim (the sim's cost model)")
    if backend not in SUPPORTED_BACKENDS:
        raise UnsupportedBackend(f"unknown backend {backend!r}; use --backend sim")
    target = gpu_type(gpu)
    preset = GPU_PRESETS[target.sim_preset]
    return SimProfileRunner(dataclasses.replace(preset, memory_bytes=target.memory_gb * GiB))


def profile_table(runner: ProfileRunner, gpu: str, kind: str, models: list[str], batches=DEFAULT_BATCHES,
                  step_percent: int = 10, example: bool = False, progress=None) -> ProfileTable:
    unknown = [m for m in models if m not in PROFILE_MODELS]
    if unknown:
        raise ValueError(f"unknown models {', '.join(unknown)}; choose from {', '.join(PROFILE_MODELS)}")
    scheme = PartitionScheme(gpu_type(gpu), kind, step_percent)
    rows: list[ProfileRow] = []
    for name in models:
        started = time.monotonic()
        for partition in scheme.partitions:
            for batch in batches:
                m = runner.measure(PROFILE_MODELS[name], scheme.sms(partition), batch)
                rows.append(ProfileRow(name, partition, batch, m.throughput, m.latency_ms))
        if progress:
            progress(f"{name}: {len(scheme.partitions) * len(batches)} runs in {time.monotonic() - started:.1f} s")
    return ProfileTable(gpu=scheme.gpu.key, partitions=kind, source=runner.source, rows=rows,
                        memory_gb={m: MODEL_MEMORY_GB[m] for m in models if m in MODEL_MEMORY_GB},
                        example=example, step_percent=step_percent)


def add_parser(sub) -> None:
    from tally.cluster.planner.gpus import GPU_TYPES, PARTITION_KINDS
    p = sub.add_parser("profile", help="each model's throughput and p99 latency per partition size and batch, "
                                       "written as a tally-plan profile table")
    p.add_argument("--backend", default="sim", help="sim (the sim's cost model); cuda and emulator are not "
                                                    "supported yet")
    p.add_argument("--gpu", choices=sorted(GPU_TYPES), default="a100-40gb")
    p.add_argument("--partitions", choices=PARTITION_KINDS, default="sm-share")
    p.add_argument("--step", type=int, default=10, help="SM-share step in percent (default: %(default)s)")
    p.add_argument("--models", default=",".join(PROFILE_MODELS), help="comma-separated (default: all)")
    p.add_argument("--batches", default=",".join(map(str, DEFAULT_BATCHES)), help="comma-separated batch sizes")
    p.add_argument("--example", action="store_true", help="mark the table as example numbers (the bundled ones)")
    p.add_argument("-o", "--output", type=Path, required=True, help="the table (.yaml or .json)")


def main(args) -> int:
    from tally.cluster.planner.errors import PlanInputError
    try:
        runner = runner_for(args.backend, args.gpu)
        batches = [int(b) for b in args.batches.split(",") if b.strip()]
        if not batches or min(batches) < 1:
            raise ValueError(f"--batches must be integers >= 1, got {args.batches!r}")
        models = [m.strip() for m in args.models.split(",") if m.strip()]
        table = profile_table(runner, args.gpu, args.partitions, models, batches, args.step, args.example,
                              progress=lambda line: print(line, file=sys.stderr))
    except (UnsupportedBackend, ValueError, PlanInputError) as e:
        print(f"tally-bench profile: {e}", file=sys.stderr)
        return 2
    table.dump(args.output)
    print(f"wrote {len(table.rows)} rows ({len(table.models)} models) to {args.output}")
    return 0
