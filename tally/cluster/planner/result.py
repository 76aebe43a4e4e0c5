"""What an algorithm returns: GPU configurations and how many GPUs get each."""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tally.cluster.planner.problem import GpuConfig, Problem


@dataclass
class PlanResult:
    algorithm: str
    configs: list[tuple[GpuConfig, int]]      # (configuration, number of GPUs with it)
    seconds: float
    lp_bound: float | None = None             # the configuration LP's optimum (a lower bound)
    status: str = "ok"
    details: dict = field(default_factory=dict)

    @property
    def gpus(self) -> int:
        return sum(count for _, count in self.configs)

    @property
    def lower_bound(self) -> int | None:
        return None if self.lp_bound is None else math.ceil(self.lp_bound - 1e-6)

    @property
    def gap(self) -> float | None:
        """(GPUs - LP lower bound) / LP lower bound."""
        lb = self.lower_bound
        return None if not lb else (self.gpus - lb) / lb

    def capacity(self, problem: Problem) -> np.ndarray:
        total = np.zeros(problem.n)
        for config, count in self.configs:
            total += count * problem.coverage(config)
        return total

    def meets_demand(self, problem: Problem, tolerance: float = 1e-6) -> bool:
        return bool(np.all(self.capacity(problem) >= problem.demand * (1 - tolerance)))
