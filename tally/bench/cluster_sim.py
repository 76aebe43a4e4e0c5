"""The cluster simulator behind `tally-bench cluster`: N GPUs, each running one
online job whose load follows a daily cycle, and M best-effort jobs arriving over
time, placed every `interval` seconds by one placement policy.

Time advances in scheduling intervals. In each: online loads move, GPUs go
unhealthy or come back (their best-effort job is evicted back to the queue,
keeping its progress, as a checkpointed job would), arrivals join the queue, the
policy places waiting jobs on free healthy GPUs, and each running job advances by
its true normalized throughput at the online job's current load, taken from the
pairs measured on the sim (interpolated between the measured loads). Policies
decide by the speed predictor's estimates, never by the truth. The same seed gives
every policy the same cluster, jobs, loads and health events.

Policies:
- matching: maximum-weight bipartite matching on predicted throughput, dynamic SM (MuxFlow)
- greedy: best predicted pair first, dynamic SM
- random: queue order, random fitting GPU, dynamic SM (MuxFlow without the predictor: "-S")
- protection-only: as random, with a fixed SM share instead of dynamic SM ("MuxFlow-S-M")
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

POLICIES = ("matching", "greedy", "random", "protection-only")
DYNAMIC, FIXED = 0, 1


@dataclass
class ClusterModel:
    """Everything a run needs, as arrays. Indices: i online type, l load level, j best-effort type, m SM mode."""

    loads: np.ndarray              # measured load levels, ascending (L,)
    truth_be: np.ndarray           # (I, L, J, 2) normalized throughput measured on the sim
    truth_p99: np.ndarray          # (I, L, J, 2) online p99 / alone
    pred_loads: np.ndarray         # load grid of the predictions (P,)
    pred_be: np.ndarray            # (I, P, J, 2) the predictor's estimates
    online_memory: np.ndarray      # (I,) bytes
    be_memory: np.ndarray          # (J,) bytes
    gpu_memory: int


@dataclass(frozen=True)
class Workload:
    gpu_online: np.ndarray         # (N,) online type per GPU
    gpu_base_load: np.ndarray      # (N,)
    gpu_phase: np.ndarray          # (N,)
    job_type: np.ndarray           # (M,) best-effort type
    job_arrival: np.ndarray        # (M,) seconds, ascending
    job_work: np.ndarray           # (M,) seconds alone on a whole GPU
    outages: np.ndarray            # (K, 3): gpu, start, end (seconds)


def make_workload(model: ClusterModel, gpus: int, jobs: int, seed: int, arrival_hours: float,
                  median_job_minutes: float, outage_rate_per_gpu_day: float) -> Workload:
    """Shaped like MuxFlow's traces: online load with a daily cycle around a per-GPU
    level, log-normal job durations (long tail), Poisson arrivals."""
    rng = np.random.default_rng(seed)
    i_types, j_types = model.truth_be.shape[0], model.truth_be.shape[2]
    horizon = arrival_hours * 3600 * 4
    outages = []
    count = rng.poisson(outage_rate_per_gpu_day * gpus * horizon / 86400)
    for g, start in zip(rng.integers(0, gpus, count), rng.uniform(0, horizon, count)):
        outages.append((g, start, start + rng.uniform(600, 3600)))
    return Workload(
        gpu_online=rng.integers(0, i_types, gpus),
        gpu_base_load=rng.uniform(model.loads[0], model.loads[-1] - 0.08, gpus),
        gpu_phase=rng.uniform(0, 2 * np.pi, gpus),
        job_type=rng.integers(0, j_types, jobs),
        job_arrival=np.sort(rng.uniform(0, arrival_hours * 3600, jobs)),
        job_work=np.clip(rng.lognormal(np.log(median_job_minutes * 60), 0.8, jobs), 120, 8 * 3600),
        outages=np.array(outages, dtype=float).reshape(-1, 3))


def _load_at(w: Workload, t: float, lo: float, hi: float) -> np.ndarray:
    return np.clip(w.gpu_base_load + 0.08 * np.sin(2 * np.pi * t / 86400 + w.gpu_phase), lo, hi)


def _interp(loads: np.ndarray, table: np.ndarray, online: np.ndarray, load: np.ndarray, job: np.ndarray,
            mode: int) -> np.ndarray:
    """table[online, load, job, mode], linear in load between the measured levels."""
    pos = np.clip(np.interp(load, loads, np.arange(len(loads))), 0, len(loads) - 1)
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, len(loads) - 1)
    frac = pos - lo
    return table[online, lo, job, mode] * (1 - frac) + table[online, hi, job, mode] * frac


def simulate(model: ClusterModel, w: Workload, policy: str, interval: float = 60.0, seed: int = 0,
             max_hours: float = 200.0) -> dict:
    if policy not in POLICIES:
        raise ValueError(f"unknown placement policy {policy!r}; choose from {', '.join(POLICIES)}")
    from tally.cluster.placement.matching import greedy, match, random_fit, usable_edges   # scipy: cluster extra
    rng = np.random.default_rng(seed + 1)
    mode = FIXED if policy == "protection-only" else DYNAMIC
    n, m = len(w.gpu_online), len(w.job_type)
    lo_load, hi_load = float(model.loads[0]), float(model.loads[-1])
    gpu_job = np.full(n, -1)
    progress = np.zeros(m)
    finish = np.full(m, np.nan)
    started = np.full(m, np.nan)
    queue: list[int] = []
    next_arrival = 0
    free_memory = model.gpu_memory - model.online_memory[w.gpu_online]
    t = 0.0
    window_end = float(w.job_arrival[-1]) if m else 0.0
    sum_rate_window = 0.0
    window_ticks = 0
    p99_samples: list[np.ndarray] = []
    evictions = 0
    decide_seconds = 0.0
    ticks = 0
    while np.isnan(finish).any() and t < max_hours * 3600:
        load = _load_at(w, t, lo_load, hi_load)
        down = np.zeros(n, dtype=bool)
        if len(w.outages):
            active = (w.outages[:, 1] <= t) & (t < w.outages[:, 2])
            down[w.outages[active, 0].astype(int)] = True
        for g in np.nonzero(down & (gpu_job >= 0))[0]:        # evicted: back to the front of the queue
            queue.insert(0, int(gpu_job[g]))
            gpu_job[g] = -1
            evictions += 1
        while next_arrival < m and w.job_arrival[next_arrival] <= t:
            queue.append(next_arrival)
            next_arrival += 1
        free = np.nonzero(~down & (gpu_job < 0))[0]
        if len(free) and queue:
            started_at = time.perf_counter()
            jobs = np.array(queue)
            lb = np.clip(np.searchsorted(model.pred_loads, load[free]), 0, len(model.pred_loads) - 1)
            weights = model.pred_be[w.gpu_online[free][:, None], lb[:, None], w.job_type[jobs][None, :], mode]
            weights = usable_edges(weights, free_memory[free], model.be_memory[w.job_type[jobs]],
                                   np.ones(len(free), dtype=bool))
            if policy == "matching":
                pairs = match(weights)
            elif policy == "greedy":
                pairs = greedy(weights)
            else:
                pairs = random_fit(weights, rng)
            decide_seconds += time.perf_counter() - started_at
            placed = set()
            for r, c in pairs:
                gpu_job[free[r]] = jobs[c]
                placed.add(c)
                if np.isnan(started[jobs[c]]):
                    started[jobs[c]] = t
            queue = [int(j) for k, j in enumerate(jobs) if k not in placed]
        busy = np.nonzero(gpu_job >= 0)[0]
        if len(busy):
            jobs = gpu_job[busy]
            rate = _interp(model.loads, model.truth_be, w.gpu_online[busy], load[busy], w.job_type[jobs], mode)
            p99_samples.append(_interp(model.loads, model.truth_p99, w.gpu_online[busy], load[busy],
                                       w.job_type[jobs], mode))
            need = w.job_work[jobs] - progress[jobs]
            step = rate * interval
            done = step >= need
            frac = np.where(done, need / np.maximum(step, 1e-12), 1.0)
            progress[jobs] += np.minimum(step, need)
            finish[jobs[done]] = t + frac[done] * interval
            gpu_job[busy[done]] = -1
            if t < window_end:
                sum_rate_window += float(rate.sum())
                window_ticks += 1
        elif t < window_end:
            window_ticks += 1
        t += interval
        ticks += 1
    finished = ~np.isnan(finish)
    jct = finish[finished] - w.job_arrival[finished]
    p99 = np.concatenate(p99_samples) if p99_samples else np.array([1.0])
    return {
        "policy": policy,
        "jobs_finished": int(finished.sum()),
        "total_normalized_throughput": sum_rate_window / max(window_ticks, 1),
        "avg_jct_hours": float(jct.mean() / 3600) if len(jct) else None,
        "p50_jct_hours": float(np.median(jct) / 3600) if len(jct) else None,
        "makespan_hours": float((np.nanmax(finish) - w.job_arrival[0]) / 3600) if finished.any() else None,
        "online_p99_vs_alone_mean": float(p99.mean()),
        "online_p99_vs_alone_p99": float(np.percentile(p99, 99)),
        "evictions": evictions,
        "ticks": ticks,
        "decision_seconds": decide_seconds,
        "jct_hours_sorted": np.sort(jct / 3600).tolist(),
    }
