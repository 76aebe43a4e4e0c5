"""A job's profile: what placement knows about it before pairing it.

MuxFlow's workload profiler runs each job alone briefly and records its speed
and resource use. Here a job runs alone on tally's sim backend under tally's
executor (the same path `tally-bench colocate` uses), which gives its solo
throughput; the kernel-level figures come from its kernels' alone times on the
same simulated GPU (what tally's transparent profiler measures per kernel):
- sm_activity: time-weighted share of SMs holding at least one block while the
  job runs alone (DCGM's SM activity; for an online job, per busy second),
- gpu_util: share of wall time a kernel of the job is running (DCGM's GPU util),
- mean_kernel_ms, mean_block_us: how coarse its work is (how long an idle gap it
  needs, how fast tally can preempt it),
- untransformable_share: share of kernel time in kernels tally cannot slice or
  preempt (cubin-only),
- memory_bytes.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

from tally.backends.sim import SimBackend
from tally.backends.sim.model import SimGPU
from tally.bench.sim_jobs import TrainingJob, alone_time
from tally.bench.workloads import KernelShape
from tally.cluster.placement.catalog import BestEffortJob, OnlineJob
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.policies import make_policy
from tally.scheduler.profiler import TransparentProfiler


@dataclass(frozen=True)
class ProfileRecord:
    name: str
    role: str                      # "online" | "best-effort"
    solo_throughput: float         # iterations (best-effort) or requests (online, back to back) per second
    sm_activity: float             # 0..1
    gpu_util: float                # 0..1
    mean_kernel_ms: float
    mean_block_us: float
    untransformable_share: float   # 0..1
    memory_bytes: int

    def to_json(self) -> dict:
        return asdict(self)

    @staticmethod
    def from_json(d: dict) -> "ProfileRecord":
        return ProfileRecord(**d)


def _kernel_stats(gpu: SimGPU, kernels: tuple[KernelShape, ...]) -> dict:
    times = [alone_time(gpu, k) for k in kernels]
    total = sum(times)
    # the block scheduler spreads a grid over SMs first: a grid narrower than the GPU leaves SMs idle
    active = sum(t * min(1.0, k.blocks / gpu.sm_count) for t, k in zip(times, kernels))
    cubin = sum(t for t, k in zip(times, kernels) if not k.cost.transformable)
    return {"kernel_seconds": total, "active_seconds": active, "mean_kernel_ms": total / len(kernels) * 1e3,
            "mean_block_us": sum(k.cost.block_time_us * t for t, k in zip(times, kernels)) / total,
            "untransformable_share": cubin / total}


def _solo_training_rate(gpu: SimGPU, job: BestEffortJob, seconds: float) -> float:
    sim = SimBackend(gpu)
    executor = StreamExecutor(sim, make_policy("fifo"), sim.variant_provider(),
                              TransparentProfiler(gpu.sm_count), clock=sim.clock)
    train = TrainingJob(sim, executor, "be", job.model, stop_at=seconds)
    train.start()
    sim.run_until(seconds)
    done = executor.counters()["clients"]["be"]["kernels_completed"]
    return train.progress(done) / seconds


def profile_best_effort(gpu: SimGPU, job: BestEffortJob, seconds: float = 0.5) -> ProfileRecord:
    stats = _kernel_stats(gpu, job.model.kernels)
    rate = _solo_training_rate(gpu, job, seconds)
    util = min(1.0, stats["kernel_seconds"] * rate)
    return ProfileRecord(job.name, "best-effort", rate, min(1.0, stats["active_seconds"] * rate), util,
                         stats["mean_kernel_ms"], stats["mean_block_us"], stats["untransformable_share"],
                         job.memory_bytes)


def profile_online(gpu: SimGPU, job: OnlineJob, service_seconds: float) -> ProfileRecord:
    """Per busy second: an online job's load scales its activity (see pairs.online_activity)."""
    stats = _kernel_stats(gpu, job.model.kernels)
    busy = stats["active_seconds"] / service_seconds
    return ProfileRecord(job.name, "online", 1.0 / service_seconds, min(1.0, busy),
                         min(1.0, stats["kernel_seconds"] / service_seconds), stats["mean_kernel_ms"],
                         stats["mean_block_us"], stats["untransformable_share"], job.memory_bytes)
