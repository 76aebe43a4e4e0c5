"""The jobs placement is trained and benchmarked on: the co-location benchmark's
models (tally/bench/workloads.py) and variants of them, each with a memory size.

A variant scales a model's per-block times and grid sizes and may make more of
its kernels cubin-only (untransformable), so the catalog spans jobs with short
and long kernels, narrow and wide grids, and more or less that tally can slice or
preempt: what decides how well a best-effort job fills an online job's idle gaps.
Memory sizes are drawn per job (an A100 40 GB holds an online and a best-effort
job only when they fit together). Deterministic for a seed.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tally.backends.sim.model import KernelCost
from tally.bench.workloads import INFERENCE_MODELS, TRAINING_MODELS, InferenceModel, KernelShape, TrainingModel

GiB = 1 << 30


@dataclass(frozen=True)
class OnlineJob:
    name: str
    model: InferenceModel
    memory_bytes: int


@dataclass(frozen=True)
class BestEffortJob:
    name: str
    model: TrainingModel
    memory_bytes: int


def _scaled(kernels: tuple[KernelShape, ...], time_factor: float, block_factor: float,
            cubin_share: float, rng: np.random.Generator) -> tuple[KernelShape, ...]:
    out = []
    cubin = {}   # same kernel name, same decision
    for k in kernels:
        if k.name not in cubin:
            cubin[k.name] = (not k.cost.transformable) or rng.random() < cubin_share
        cost = KernelCost(max(0.5, k.cost.block_time_us * time_factor), k.cost.max_blocks_per_sm,
                          transformable=not cubin[k.name])
        out.append(replace(k, blocks=max(1, int(k.blocks * block_factor)), cost=cost))
    return tuple(out)


def online_jobs(count: int = 6, seed: int = 0) -> list[OnlineJob]:
    rng = np.random.default_rng(seed)
    jobs = [OnlineJob(name, model, int(rng.uniform(2, 16)) * GiB) for name, model in sorted(INFERENCE_MODELS.items())]
    bases = sorted(INFERENCE_MODELS)
    while len(jobs) < count:
        base = INFERENCE_MODELS[bases[len(jobs) % len(bases)]]
        t, b = float(rng.choice([0.5, 2.0, 3.0])), float(rng.choice([0.5, 1.0, 2.0]))
        name = f"{base.name}-t{t:g}-b{b:g}"
        model = replace(base, name=name, kernels=_scaled(base.kernels, t, b, 0.0, rng))
        jobs.append(OnlineJob(name, model, int(rng.uniform(2, 16)) * GiB))
    return jobs[:count]


def best_effort_jobs(count: int = 16, seed: int = 1) -> list[BestEffortJob]:
    rng = np.random.default_rng(seed)
    jobs = [BestEffortJob(name, model, int(rng.uniform(6, 30)) * GiB) for name, model in sorted(TRAINING_MODELS.items())]
    bases = sorted(TRAINING_MODELS)
    while len(jobs) < count:
        base = TRAINING_MODELS[bases[int(rng.integers(len(bases)))]]
        t = float(rng.choice([0.25, 0.5, 1.0, 2.0, 4.0]))
        b = float(rng.choice([0.05, 0.2, 0.5, 1.0]))
        cubin = float(rng.choice([0.0, 0.0, 0.2, 0.5]))
        name = f"{base.name}-t{t:g}-b{b:g}-c{cubin:g}"
        if any(j.name == name for j in jobs):
            continue
        model = replace(base, name=name, kernels=_scaled(base.kernels, t, b, cubin, rng))
        jobs.append(BestEffortJob(name, model, int(rng.uniform(6, 30)) * GiB))
    return jobs[:count]
