"""`tally-bench colocate`: a high-priority inference job next to best-effort
training jobs, under each scheduling policy and alone.

Reported per policy: p50/p99 latency of the high-priority requests, the
normalized throughput of every job (its throughput divided by its throughput
when it runs alone on the device) and the system throughput (the sum of the
normalized throughputs). "Alone" runs use the `fifo` policy (nothing to
schedule when one job is present).

How jobs are run is a Runner's business; the statistics and the report are
shared. SimRunner simulates everything in one process on the `sim` backend
(deterministic, no GPU, seconds). A runner for real devices (`--backend
cuda|emulator`) would start `tally-server --policy P` and the jobs under
`tally-run`, feed the inference job the same arrival times and collect the same
per-request latencies and iteration times from the jobs' logs; it is not
written yet (it needs the client/server path and job scripts).
"""
from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Protocol

import numpy as np

from tally.backends.sim import SimBackend
from tally.backends.sim.model import GPU_PRESETS
from tally.bench import traces
from tally.bench.sharing_levers import SharingLevers
from tally.bench.sim_jobs import InferenceJob, TrainingJob
from tally.bench.workloads import INFERENCE_MODELS, TRAINING_MODELS
from tally.scheduler.executor import BE_TRANSFORMS, StreamExecutor
from tally.scheduler.hooks import Hooks
from tally.scheduler.policies import POLICIES, make_policy
from tally.scheduler.profiler import DEFAULT_TURNAROUND_THRESHOLD_MS, TransparentProfiler

ALL_POLICIES = ("fifo", "kernel-priority", "time-slice", "priority")


@dataclass(frozen=True)
class ColocateConfig:
    policies: tuple[str, ...] = ALL_POLICIES
    trace: str = "azure"
    load: float = 0.5                 # fraction of time the inference job alone keeps the GPU busy
    be_jobs: int = 1
    hp_model: str = "bert-base"
    be_model: str = "whisper-train"
    duration: float = 4.0             # seconds of (virtual) time per run
    seed: int = 0
    gpu: str = "a100"
    be_transform: str = "auto"
    turnaround_threshold_ms: float = DEFAULT_TURNAROUND_THRESHOLD_MS
    time_slice_ms: float = 10.0
    drain_s: float = 2.0              # after `duration`, time allowed for queued requests to finish
    # SM shares of the best-effort jobs while they share the device (tally-server's flags)
    be_sm_percent: float | None = None    # a static share (--be-sm-percent); None: the whole device
    dynamic_sm: bool = False              # --dynamic-sm: 100% minus the high-priority SM activity
    be_sm_floor: float = 10.0             # --be-sm-floor
    be_util_target: float | None = None   # --be-util-target: compute control (0, 1]
    sample_period_ms: float = 50.0        # how often the dynamic share / compute control are updated

    def validate(self) -> None:
        unknown = [p for p in self.policies if p not in POLICIES]
        if unknown or not self.policies:
            raise ValueError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
        if self.trace not in traces.TRACE_KINDS:
            raise ValueError(f"unknown trace {self.trace!r}; choose one of {', '.join(traces.TRACE_KINDS)}")
        if not 0 < self.load < 1:
            raise ValueError(f"--load is the inference job's share of GPU time alone: in (0, 1), got {self.load}")
        if self.be_jobs < 0:
            raise ValueError(f"--be-jobs must be >= 0, got {self.be_jobs}")
        if self.hp_model not in INFERENCE_MODELS:
            raise ValueError(f"unknown inference model {self.hp_model!r}; choose one of {', '.join(INFERENCE_MODELS)}")
        if self.be_model not in TRAINING_MODELS:
            raise ValueError(f"unknown training model {self.be_model!r}; choose one of {', '.join(TRAINING_MODELS)}")
        if self.gpu not in GPU_PRESETS:
            raise ValueError(f"unknown GPU {self.gpu!r}; choose one of {', '.join(GPU_PRESETS)}")
        if self.be_transform not in BE_TRANSFORMS:
            raise ValueError(f"--be-transform must be one of {', '.join(BE_TRANSFORMS)}")
        if not self.duration > 0:
            raise ValueError(f"--duration must be > 0 s, got {self.duration}")
        if self.be_sm_percent is not None and not 0 < self.be_sm_percent <= 100:
            raise ValueError(f"--be-sm-percent is a share of the SMs in (0, 100], got {self.be_sm_percent}")
        if not 0 < self.be_sm_floor <= 100:
            raise ValueError(f"--be-sm-floor is a share of the SMs in (0, 100], got {self.be_sm_floor}")
        if self.be_util_target is not None and not 0 < self.be_util_target <= 1:
            raise ValueError(f"--be-util-target is a utilization in (0, 1], got {self.be_util_target}")
        if not self.sample_period_ms > 0:
            raise ValueError(f"--sample-period-ms must be > 0, got {self.sample_period_ms}")


@dataclass
class RunRecord:
    """What one run produced, before statistics."""

    hp_latencies: list[float] = field(default_factory=list)      # seconds; unfinished ones censored
    hp_unfinished: int = 0
    hp_completed_in_window: int = 0
    be_progress: list[float] = field(default_factory=list)    # iterations done by `duration`, per job
    counters: dict = field(default_factory=dict)
    levers: dict = field(default_factory=dict)                  # SM shares / compute control at the end
    wall_seconds: float = 0.0


class Runner(Protocol):
    def service_time(self) -> float:
        """Seconds one inference request takes on an idle device."""

    def run(self, policy: str, with_hp: bool, be_count: int, arrivals: np.ndarray) -> RunRecord: ...


class SimRunner:
    def __init__(self, config: ColocateConfig):
        self.config = config
        self.gpu = GPU_PRESETS[config.gpu]

    def _executor(self, sim: SimBackend, policy: str, hooks: Hooks | None = None) -> StreamExecutor:
        c = self.config
        options = {"quantum_ms": c.time_slice_ms} if policy == "time-slice" else {}
        profiler = TransparentProfiler(self.gpu.sm_count, c.turnaround_threshold_ms)
        return StreamExecutor(sim, make_policy(policy, **options), sim.variant_provider(), profiler,
                              clock=sim.clock, be_transform=c.be_transform, hooks=hooks)

    def service_time(self) -> float:
        sim = SimBackend(self.gpu)
        job = InferenceJob(sim, self._executor(sim, "fifo"), "hp", INFERENCE_MODELS[self.config.hp_model], [0.0])
        job.start()
        sim.loop.wait_until(lambda: bool(job.latencies), "one request")
        return job.latencies[0]

    def run(self, policy: str, with_hp: bool, be_count: int, arrivals: np.ndarray) -> RunRecord:
        c = self.config
        started = time.perf_counter()
        sim = SimBackend(self.gpu)
        # the levers apply while the jobs share the device; alone, a job has all of it
        levers = SharingLevers.from_config(c) if with_hp else SharingLevers()
        executor = self._executor(sim, policy, levers.hooks)
        hp = InferenceJob(sim, executor, "hp", INFERENCE_MODELS[c.hp_model], arrivals) if with_hp else None
        bes = [TrainingJob(sim, executor, f"be{i}", TRAINING_MODELS[c.be_model], stop_at=c.duration,
                           sm_percent=levers.be_sm_percent)
               for i in range(be_count)]
        levers.attach(executor, [job.client_id for job in bes])
        for job in ([hp] if hp else []) + bes:
            job.start()
        sim.run_until(c.duration)
        levers.stop()
        record = RunRecord()
        clients = executor.counters()["clients"]
        record.be_progress = [j.progress(clients[j.client_id]["kernels_completed"]) for j in bes]
        if hp is not None:
            deadline = int((c.duration + c.drain_s) * 1e9)
            while hp.unfinished():
                nxt = sim.loop.next_time()
                if nxt is None or nxt > deadline:
                    break
                sim.loop.step()
            end = sim.now()
            left = hp.unfinished()
            record.hp_latencies = hp.latencies + [end - t for t in left]
            record.hp_unfinished = len(left)
            record.hp_completed_in_window = sum(1 for t in hp.completed_at if t <= c.duration)
        record.counters = executor.counters()
        record.levers = levers.describe()
        record.wall_seconds = time.perf_counter() - started
        return record


def _latency_stats(record: RunRecord) -> dict:
    ms = np.asarray(record.hp_latencies) * 1000.0
    if ms.size == 0:
        return {"hp_p50_ms": None, "hp_p99_ms": None}
    p50, p99 = np.percentile(ms, [50, 99])
    return {"hp_p50_ms": float(p50), "hp_p99_ms": float(p99), "hp_mean_ms": float(ms.mean()),
            "hp_requests": int(ms.size), "hp_unfinished": record.hp_unfinished}


@dataclass
class ColocateResult:
    report: dict                               # the JSON document
    latencies_ms: dict[str, np.ndarray]        # "alone" and per policy, for plots


@dataclass
class Baseline:
    """What every co-located run is measured against: the request arrivals and the
    jobs alone on the device."""

    service_s: float
    rate_per_s: float
    arrivals: np.ndarray
    alone_hp: RunRecord
    hp_alone_rate: float          # requests completed per second alone
    be_alone_rate: float          # iterations per second alone (whole device)

    def alone_report(self) -> dict:
        return {**_latency_stats(self.alone_hp), "hp_throughput_per_s": self.hp_alone_rate,
                "be_iterations_per_s": self.be_alone_rate}


def measure_baseline(config: ColocateConfig, runner: Runner) -> Baseline:
    service = runner.service_time()
    rate = config.load / service
    arrivals = traces.arrivals(config.trace, rate, config.duration, config.seed)
    alone_hp = runner.run("fifo", True, 0, arrivals)
    alone_be = runner.run("fifo", False, 1, arrivals) if config.be_jobs else None
    return Baseline(service, rate, arrivals, alone_hp, alone_hp.hp_completed_in_window / config.duration,
                    alone_be.be_progress[0] / config.duration if alone_be else 0.0)


def shared_stats(config: ColocateConfig, baseline: Baseline, record: RunRecord) -> dict:
    """One co-located run's figures, relative to the baseline."""
    hp_norm = ((record.hp_completed_in_window / config.duration) / baseline.hp_alone_rate
               if baseline.hp_alone_rate else 0.0)
    be_norm = [progress / config.duration / baseline.be_alone_rate if baseline.be_alone_rate else 0.0
               for progress in record.be_progress]
    stats = _latency_stats(record)
    alone_p99 = _latency_stats(baseline.alone_hp)["hp_p99_ms"]
    return {
        **stats,
        "hp_p99_vs_alone": stats["hp_p99_ms"] / alone_p99 if alone_p99 else None,
        "hp_normalized_throughput": hp_norm,
        "be_normalized_throughput": be_norm,
        "system_throughput": hp_norm + sum(be_norm),
        "counters": {k: v for k, v in record.counters.items() if k != "clients"},
        "levers": record.levers,
        "wall_seconds": record.wall_seconds,
    }


def run_colocate(config: ColocateConfig, runner: Runner | None = None) -> ColocateResult:
    config.validate()
    runner = runner or SimRunner(config)
    baseline = measure_baseline(config, runner)
    report = {
        "config": asdict(config),
        "hp_service_ms": baseline.service_s * 1000.0,
        "hp_rate_per_s": baseline.rate_per_s,
        "hp_arrivals": int(len(baseline.arrivals)),
        "alone": baseline.alone_report(),
        "policies": {},
    }
    latencies = {"alone": np.asarray(baseline.alone_hp.hp_latencies) * 1000.0}
    for policy in config.policies:
        record = runner.run(policy, True, config.be_jobs, baseline.arrivals)
        report["policies"][policy] = shared_stats(config, baseline, record)
        latencies[policy] = np.asarray(record.hp_latencies) * 1000.0
    return ColocateResult(report, latencies)
