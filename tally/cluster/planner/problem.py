"""The planning problem in numbers, shared by every algorithm.

- cap[i, p]: requests/s service i gets from one partition of size p, at the
  best batch size whose p99 latency meets the service's SLO (0 when none does,
  or when the model does not fit the partition's memory);
- layouts: the maximal legal layouts as counts of each partition size;
- a GPU configuration (a column of the cutting-stock problem) is a layout plus
  the service each of its parts runs; it covers cap[i, p] of service i per part.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.layouts import Layout, PartitionScheme
from tally.cluster.planner.profiles import ProfileRow
from tally.cluster.planner.services import PlanRequest, Service

IDLE = -1   # a part no service runs on


@dataclass(frozen=True)
class GpuConfig:
    """One GPU's partition sizes (partition indices, largest first) and the
    service index each part runs (IDLE for none)."""

    partitions: tuple[int, ...]
    services: tuple[int, ...]


class Problem:
    def __init__(self, request: PlanRequest, step_percent: int | None = None):
        self.request = request
        self.services: list[Service] = request.services
        step = step_percent or request.profile.step_percent
        self.scheme = PartitionScheme(request.gpu, request.kind, step)
        self.partitions = self.scheme.partitions
        self.units = np.array([self.scheme.units[p] for p in self.partitions])
        self.demand = np.array([s.throughput for s in self.services])
        self._check_profile_partitions()
        self.choice: list[list[ProfileRow | None]] = [[self._best(s, p) for p in self.partitions]
                                                      for s in self.services]
        self.cap = np.array([[row.throughput if row else 0.0 for row in rows] for rows in self.choice])
        self._check_slos()

    @property
    def n(self) -> int:
        return len(self.services)

    def _check_profile_partitions(self) -> None:
        known = set(self.partitions)
        unknown = sorted({r.partition for r in self.request.profile.rows} - known)
        if unknown:
            raise PlanInputError(f"the profile table has partitions {', '.join(unknown)}, which {self.request.gpu.key} "
                                 f"{self.scheme.kind} does not have (it has {', '.join(self.partitions)})")

    def _best(self, service: Service, partition: str) -> ProfileRow | None:
        need = self.request.profile.memory_gb.get(service.model)
        if need is not None and need > self.scheme.memory_gb(partition):
            return None
        return self.request.profile.best(service.model, partition, service.p99_ms)

    def _check_slos(self) -> None:
        for i, service in enumerate(self.services):
            if self.cap[i].max() > 0:
                continue
            fastest = self.request.profile.fastest(service.model)
            need = self.request.profile.memory_gb.get(service.model)
            fits = [p for p in self.partitions if need is None or need <= self.scheme.memory_gb(p)]
            if not fits:
                raise PlanInputError(f"service {service.name!r}: model {service.model!r} needs {need:g} GB, more than "
                                     f"any {self.scheme.kind} partition of {self.request.gpu.key} has")
            raise PlanInputError(
                f"service {service.name!r}: no partition meets its p99 SLO of {service.p99_ms:g} ms; the fastest "
                f"{service.model!r} gets in the profile table is {fastest.latency_ms:g} ms "
                f"({self.scheme.display(fastest.partition)}, batch {fastest.batch}). Relax the SLO or use a faster "
                f"GPU type")

    @cached_property
    def layouts(self) -> list[tuple[int, ...]]:
        """Maximal layouts as partition indices, largest first."""
        index = {p: k for k, p in enumerate(self.partitions)}
        return [tuple(sorted((index[part.partition] for part in layout.parts), reverse=True))
                for layout in self.scheme.layouts]

    @cached_property
    def layout_counts(self) -> np.ndarray:
        """layouts x partitions: how many parts of each size a layout has."""
        counts = np.zeros((len(self.layouts), len(self.partitions)))
        for row, layout in enumerate(self.layouts):
            for p in layout:
                counts[row, p] += 1
        return counts

    @property
    def whole(self) -> int:
        return len(self.partitions) - 1

    def coverage(self, config: GpuConfig) -> np.ndarray:
        out = np.zeros(self.n)
        for p, i in zip(config.partitions, config.services):
            if i != IDLE:
                out[i] += self.cap[i, p]
        return out

    def placed_layout(self, config: GpuConfig) -> Layout:
        """A legal placement of the config's busy parts."""
        used = [int(self.units[p]) for p, i in zip(config.partitions, config.services) if i != IDLE]
        return self.scheme.layout_for(used)
