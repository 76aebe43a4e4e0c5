"""A deployment: every GPU, its partitions and what runs in each; the form
`tally-plan` prints and writes, and reads back to plan a reconfiguration."""
from __future__ import annotations

from dataclasses import asdict, dataclass, field

from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.problem import IDLE, GpuConfig, Problem
from tally.cluster.planner.result import PlanResult


@dataclass(frozen=True)
class PartPlan:
    partition: str               # "3g" / "30%"
    profile: str                 # "3g.20gb" / "30% SMs"
    units: int
    start: int | None            # first memory slice (MIG)
    service: str
    model: str
    batch: int
    throughput: float
    latency_ms: float


@dataclass
class GpuPlan:
    index: int
    parts: list[PartPlan]

    @property
    def layout(self) -> tuple[str, ...]:
        return tuple(p.profile for p in self.parts)

    def signature(self) -> tuple:
        """What makes two GPUs configured alike."""
        return tuple((p.partition, p.start, p.service, p.batch) for p in self.parts)


@dataclass
class Deployment:
    gpu: str
    partitions: str
    step_percent: int
    gpus: list[GpuPlan]
    services: list[dict]                       # name, model, throughput (required), p99_ms, capacity, command
    summary: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"gpu": self.gpu, "partitions": self.partitions, "step_percent": self.step_percent,
                "summary": self.summary, "services": self.services,
                "gpus": [{"index": g.index, "parts": [asdict(p) for p in g.parts]} for g in self.gpus]}

    @classmethod
    def from_dict(cls, data, origin: str = "deployment") -> "Deployment":
        try:
            gpus = [GpuPlan(int(g["index"]), [PartPlan(**p) for p in g["parts"]]) for g in data["gpus"]]
            return cls(data["gpu"], data["partitions"], int(data.get("step_percent", 10)), gpus,
                       list(data["services"]), dict(data.get("summary", {})))
        except (KeyError, TypeError, ValueError) as e:
            raise PlanInputError(f"{origin}: not a deployment written by `tally-plan --format json` ({e!r})") from None


def config_parts(problem: Problem, config: GpuConfig) -> list[PartPlan]:
    """The busy parts of a configuration, placed, with what runs in each."""
    busy = [(p, i) for p, i in zip(config.partitions, config.services) if i != IDLE]
    out = []
    for placed in problem.placed_layout(config).parts:
        k = next(k for k, (p, _) in enumerate(busy) if problem.units[p] == placed.units)
        p, i = busy.pop(k)
        row = problem.choice[i][p]
        service = problem.services[i]
        out.append(PartPlan(placed.partition, problem.scheme.display(placed.partition), placed.units, placed.start,
                            service.name, service.model, row.batch, row.throughput, row.latency_ms))
    return out


def deployment_from(problem: Problem, result: PlanResult, summary: dict | None = None) -> Deployment:
    gpus: list[GpuPlan] = []
    ordered = sorted(result.configs, key=lambda c: (-c[1], c[0].partitions, c[0].services))
    for config, count in ordered:
        parts = config_parts(problem, config)
        for _ in range(count):
            if parts:
                gpus.append(GpuPlan(len(gpus), list(parts)))
    capacity = result.capacity(problem)
    services = [{"name": s.name, "model": s.model, "throughput": s.throughput, "p99_ms": s.p99_ms,
                 "capacity": round(float(c), 3), **({"command": s.command} if s.command else {})}
                for s, c in zip(problem.services, capacity)]
    return Deployment(problem.request.gpu.key, problem.scheme.kind, problem.scheme.step_percent, gpus, services,
                      dict(summary or {}))
