"""Seeded fleets of inference services for `tally-bench plan`.

MIG-serving evaluates its optimizer on throughput demands drawn from normal and
lognormal distributions, each in two settings, over fleets of hundreds of
GPUs. These are our four shapes of that kind (the distributions' parameters
are ours, not the paper's): each service runs a model drawn from the profile
table, with a p99 SLO a drawn multiple (1.5x to 12x) of the model's batch-1
latency on a whole GPU, and a demand of g whole GPUs' worth of throughput at
that SLO, g drawn from the shape's distribution:

- normal-1: 60 services, g ~ Normal(6, 2)            (about 360 GPUs' worth)
- normal-2: 120 services, g ~ Normal(2, 1)           (about 240)
- lognormal-1: 150 services, g ~ LogNormal(0, 1)     (median 1, long tail; about 250)
- lognormal-2: 80 services, g ~ LogNormal(1.2, 1)    (about 440)

Normal draws are clipped at 0.1 GPU. The same seed gives the same fleet.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tally.cluster.planner.gpus import gpu_type
from tally.cluster.planner.layouts import PartitionScheme
from tally.cluster.planner.profiles import ProfileTable
from tally.cluster.planner.services import Service

SLO_FACTORS = (1.5, 3.0, 6.0, 12.0)


@dataclass(frozen=True)
class WorkloadShape:
    name: str
    services: int
    distribution: str          # "normal" | "lognormal"
    mean: float                # of the normal, or of the lognormal's log
    sigma: float


SHAPES: dict[str, WorkloadShape] = {s.name: s for s in (
    WorkloadShape("normal-1", 60, "normal", 6.0, 2.0),
    WorkloadShape("normal-2", 120, "normal", 2.0, 1.0),
    WorkloadShape("lognormal-1", 150, "lognormal", 0.0, 1.0),
    WorkloadShape("lognormal-2", 80, "lognormal", 1.2, 1.0),
)}


def _gpus_worth(shape: WorkloadShape, rng: np.random.Generator) -> np.ndarray:
    if shape.distribution == "normal":
        return np.clip(rng.normal(shape.mean, shape.sigma, shape.services), 0.1, None)
    return rng.lognormal(shape.mean, shape.sigma, shape.services)


def generate(shape: WorkloadShape | str, profile: ProfileTable, seed: int = 0,
             scale: float = 1.0, models: list[str] | None = None) -> list[Service]:
    """`scale` multiplies the number of services (tests use small fleets)."""
    if isinstance(shape, str):
        shape = SHAPES[shape]
    rng = np.random.default_rng(seed)
    whole = PartitionScheme(gpu_type(profile.gpu), profile.partitions, profile.step_percent).whole
    names = models or profile.models
    count = max(1, round(shape.services * scale))
    shape = WorkloadShape(shape.name, count, shape.distribution, shape.mean, shape.sigma)
    gpus = _gpus_worth(shape, rng)
    services = []
    for n in range(count):
        model = names[int(rng.integers(len(names)))]
        base = min(r.latency_ms for r in profile.rows_for(model, whole) if r.batch == 1)
        slo = base * SLO_FACTORS[int(rng.integers(len(SLO_FACTORS)))]
        best = profile.best(model, whole, slo)
        services.append(Service(f"{shape.name}-{n:03d}-{model}", model,
                                round(float(gpus[n]) * best.throughput, 1), round(slo, 3)))
    return services
