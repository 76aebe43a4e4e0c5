"""What a `tally-bench profile` runner is: it measures one model on one
partition at one batch size (profile.py writes the table from its answers)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class Measurement:
    throughput: float          # inputs/s
    latency_ms: float          # p99 of one batch


@dataclass(frozen=True)
class Partition:
    name: str                  # "25%" or "3g", as the table names it
    sms: int                   # its SMs on the table's GPU type
    percent: float | None      # the SM share; None for a MIG instance


class ProfileRunner(Protocol):
    source: str                          # how the numbers were obtained (the table's `source`)
    models: tuple[str, ...]              # what it can run
    default_models: tuple[str, ...]
    memory_gb: dict[str, float]          # what a model needs, where known

    def measure(self, model: str, partition: Partition, batch: int) -> Measurement: ...
