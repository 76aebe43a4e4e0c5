"""Profiled pairs: an online job at some load next to a best-effort job at some
SM share, run on tally's sim backend under tally's priority scheduling. The
sim's cost model is the ground truth the speed predictor learns and the cluster
simulator charges jobs by.

Measured per pair: the best-effort job's normalized throughput (iterations per
second next to the online job / alone on the whole GPU) and the online job's p99
latency over its p99 alone at the same load. Online requests arrive as a Poisson
process (fixed seed) at `load` times the rate one request alone would saturate.

The SM share a best-effort job gets under dynamic SM allocation (MuxFlow) is 100
minus the online job's SM activity at its current load (dynamic_sm_percent);
without it, a fixed share (FIXED_SM_PERCENT).
"""
from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from tally.backends.sim import SimBackend
from tally.backends.sim.model import SimGPU
from tally.bench import traces
from tally.bench.sim_jobs import InferenceJob, TrainingJob
from tally.cluster.placement.catalog import BestEffortJob, OnlineJob
from tally.cluster.placement.profile import ProfileRecord, profile_best_effort, profile_online
from tally.scheduler.executor import StreamExecutor
from tally.scheduler.policies import make_policy
from tally.scheduler.profiler import TransparentProfiler

FIXED_SM_PERCENT = 50.0
MIN_SM_PERCENT = 10.0
DRAIN_SECONDS = 1.0


def online_activity(online: ProfileRecord, load: float) -> float:
    return min(1.0, load * online.sm_activity)


def dynamic_sm_percent(online: ProfileRecord, load: float) -> float:
    return float(np.clip(100.0 * (1.0 - online_activity(online, load)), MIN_SM_PERCENT, 100.0))


@dataclass(frozen=True)
class PairResult:
    online: str
    load: float
    best_effort: str
    sm_percent: float
    be_normalized: float
    hp_p99_ratio: float
    sm_mode: str = "dynamic"       # how sm_percent was chosen: "dynamic" | "fixed"


def _executor(sim: SimBackend, gpu: SimGPU, policy: str) -> StreamExecutor:
    return StreamExecutor(sim, make_policy(policy), sim.variant_provider(), TransparentProfiler(gpu.sm_count),
                          clock=sim.clock)


def service_time(gpu: SimGPU, online: OnlineJob) -> float:
    """Seconds one request takes on an idle GPU."""
    sim = SimBackend(gpu)
    job = InferenceJob(sim, _executor(sim, gpu, "fifo"), "hp", online.model, [0.0])
    job.start()
    sim.loop.wait_until(lambda: bool(job.latencies), "one request")
    return job.latencies[0]


def _run(gpu: SimGPU, online: OnlineJob | None, arrivals, be: BestEffortJob | None, sm_percent: float | None,
         seconds: float) -> tuple[list[float], float]:
    """(online latencies, best-effort iterations per second) of one run."""
    sim = SimBackend(gpu)
    executor = _executor(sim, gpu, "priority")
    hp = InferenceJob(sim, executor, "hp", online.model, arrivals) if online else None
    train = TrainingJob(sim, executor, "be", be.model, stop_at=seconds, sm_percent=sm_percent) if be else None
    for job in (hp, train):
        if job is not None:
            job.start()
    sim.run_until(seconds)
    rate = 0.0
    if train is not None:
        rate = train.progress(executor.counters()["clients"]["be"]["kernels_completed"]) / seconds
    latencies: list[float] = []
    if hp is not None:
        deadline = int((seconds + DRAIN_SECONDS) * 1e9)
        while hp.unfinished():
            nxt = sim.loop.next_time()
            if nxt is None or nxt > deadline:
                break
            sim.loop.step()
        latencies = hp.latencies + [sim.now() - t for t in hp.unfinished()]
    return latencies, rate


def arrivals_for(online_service: float, load: float, seconds: float, seed: int) -> np.ndarray:
    return traces.poisson_arrivals(load / online_service, seconds, seed)


def measure_pair(gpu: SimGPU, online: OnlineJob, service: float, load: float, be: BestEffortJob,
                 be_solo_rate: float, sm_percent: float | None, seconds: float, seed: int = 0,
                 alone_p99: float | None = None, sm_mode: str = "dynamic") -> PairResult:
    arrivals = arrivals_for(service, load, seconds, seed)
    if alone_p99 is None:
        alone, _ = _run(gpu, online, arrivals, None, None, seconds)
        alone_p99 = float(np.percentile(alone, 99)) if alone else service
    latencies, rate = _run(gpu, online, arrivals, be, sm_percent, seconds)
    p99 = float(np.percentile(latencies, 99)) if latencies else service
    return PairResult(online.name, load, be.name, float(sm_percent or 100.0), rate / be_solo_rate, p99 / alone_p99,
                      sm_mode)


# -- a data set of pairs ------------------------------------------------------------------------

@dataclass
class PairSet:
    """Profiles of every job and the measured pairs."""

    gpu: str
    profiles: dict[str, ProfileRecord]
    pairs: list[PairResult]

    def to_json(self) -> dict:
        return {"gpu": self.gpu, "profiles": {k: v.to_json() for k, v in self.profiles.items()},
                "pairs": [asdict(p) for p in self.pairs]}

    @staticmethod
    def from_json(d: dict) -> "PairSet":
        return PairSet(d["gpu"], {k: ProfileRecord.from_json(v) for k, v in d["profiles"].items()},
                       [PairResult(**p) for p in d["pairs"]])


_WORK: dict = {}


def _measure_task(task: tuple) -> PairResult:
    i, load, j, mode = task
    w = _WORK
    online, be = w["online"][i], w["be"][j]
    share = dynamic_sm_percent(w["profiles"][online.name], load) if mode == "dynamic" else FIXED_SM_PERCENT
    return measure_pair(w["gpu"], online, w["service"][online.name], load, be,
                        w["profiles"][be.name].solo_throughput, share, w["seconds"],
                        alone_p99=w["alone_p99"][(online.name, load)], sm_mode=mode)


def _alone_task(task: tuple) -> tuple:
    i, load = task
    online = _WORK["online"][i]
    service = _WORK["service"][online.name]
    latencies, _ = _run(_WORK["gpu"], online, arrivals_for(service, load, _WORK["seconds"], 0), None, None,
                        _WORK["seconds"])
    return (online.name, load), float(np.percentile(latencies, 99)) if latencies else service


def measure_pairs(gpu: SimGPU, online: list[OnlineJob], loads: list[float], best_effort: list[BestEffortJob],
                  share_modes: tuple[str, ...] = ("dynamic", "fixed"), seconds: float = 0.4,
                  workers: int | None = None) -> PairSet:
    """Every (online, load, best-effort, share mode) on the sim; `workers` processes (default: all cores)."""
    service = {o.name: service_time(gpu, o) for o in online}
    profiles = {o.name: profile_online(gpu, o, service[o.name]) for o in online}
    profiles.update({b.name: profile_best_effort(gpu, b) for b in best_effort})
    _WORK.clear()
    _WORK.update(gpu=gpu, online=online, be=best_effort, service=service, profiles=profiles, seconds=seconds)
    alone_tasks = [(i, load) for i in range(len(online)) for load in loads]
    unknown = set(share_modes) - {"dynamic", "fixed"}
    if unknown:
        raise ValueError(f"unknown SM share modes {sorted(unknown)}: use dynamic and/or fixed")
    tasks = [(i, load, j, mode) for i in range(len(online)) for load in loads
             for j in range(len(best_effort)) for mode in share_modes]
    workers = workers or os.cpu_count() or 1
    if workers > 1:
        ctx = multiprocessing.get_context("fork")
        with ctx.Pool(workers) as pool:
            _WORK["alone_p99"] = dict(pool.map(_alone_task, alone_tasks))
        with ctx.Pool(workers) as pool:        # a fresh pool: the children must see alone_p99
            pairs = pool.map(_measure_task, tasks, chunksize=4)
    else:
        _WORK["alone_p99"] = dict(map(_alone_task, alone_tasks))
        pairs = list(map(_measure_task, tasks))
    return PairSet(gpu.name, profiles, pairs)


def cached_pairs(cache_dir: Path, key: dict, make) -> tuple[PairSet, bool]:
    """The pair set for `key` from cache_dir, else make() and store it. (set, came from the cache)."""
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    path = cache_dir / f"pairs-{digest}.json"
    if path.exists():
        return PairSet.from_json(json.loads(path.read_text())), True
    made = make()
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(made.to_json()))
    tmp.replace(path)
    return made, False
