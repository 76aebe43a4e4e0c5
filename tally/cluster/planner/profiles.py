"""Profile tables: what each model achieves on each partition size.

One row per (model, partition, batch): throughput in requests/s and p99
latency in ms, measured (or, for the bundled examples, computed) with the
model alone on that partition. A model may name the memory it needs; the
planner then skips MIG partitions too small for it.

File format (YAML or JSON), as `tally-bench profile` writes it:

    gpu: a100-40gb
    partitions: mig              # or sm-share (then also step_percent: 10)
    source: how the numbers were obtained
    example: true                # numbers for trying the planner, not measurements
    models:
      bert-base:
        memory_gb: 0.5
        rows:                    # [partition, batch, throughput req/s, p99 ms]
          - [1g, 1, 91.4, 10.94]
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.files import read_structured
from tally.cluster.planner.gpus import MIG, PARTITION_KINDS, SM_SHARE, gpu_type

EXAMPLE = "example"


@dataclass(frozen=True)
class ProfileRow:
    model: str
    partition: str
    batch: int
    throughput: float            # requests/s
    latency_ms: float            # p99 of one batch


@dataclass
class ProfileTable:
    gpu: str
    partitions: str
    source: str
    rows: list[ProfileRow]
    memory_gb: dict[str, float] = field(default_factory=dict)
    example: bool = False
    step_percent: int = 10

    @property
    def models(self) -> list[str]:
        return sorted({r.model for r in self.rows})

    def rows_for(self, model: str, partition: str) -> list[ProfileRow]:
        return [r for r in self.rows if r.model == model and r.partition == partition]

    def best(self, model: str, partition: str, slo_ms: float) -> ProfileRow | None:
        """The highest-throughput row of `model` on `partition` within the SLO."""
        fits = [r for r in self.rows_for(model, partition) if r.latency_ms <= slo_ms]
        return max(fits, key=lambda r: (r.throughput, -r.batch), default=None)

    def fastest(self, model: str) -> ProfileRow:
        return min((r for r in self.rows if r.model == model), key=lambda r: r.latency_ms)

    # files ---------------------------------------------------------------------
    def to_dict(self) -> dict:
        models: dict[str, dict] = {}
        for model in self.models:
            entry: dict = {}
            if model in self.memory_gb:
                entry["memory_gb"] = self.memory_gb[model]
            entry["rows"] = [[r.partition, r.batch, round(r.throughput, 3), round(r.latency_ms, 4)]
                             for r in self.rows if r.model == model]
            models[model] = entry
        head = {"gpu": self.gpu, "partitions": self.partitions}
        if self.partitions == SM_SHARE:
            head["step_percent"] = self.step_percent
        return {**head, "source": self.source, "example": self.example, "models": models}

    def dump(self, path: Path) -> None:
        data = self.to_dict()
        if path.suffix == ".json":
            path.write_text(json.dumps(data, indent=1) + "\n")
            return
        lines = [f"# tally profile table: {self.gpu}, {self.partitions} partitions"]
        if self.example:
            lines.append("# EXAMPLE NUMBERS for trying the planner, not measurements on a GPU.")
        lines.append("# rows: [partition, batch, throughput requests/s, p99 latency ms]")
        body = yaml.safe_dump({k: v for k, v in data.items() if k != "models"}, sort_keys=False)
        lines.append(body.rstrip())
        lines.append("models:")
        for model, entry in data["models"].items():
            lines.append(f"  {model}:")
            if "memory_gb" in entry:
                lines.append(f"    memory_gb: {entry['memory_gb']}")
            lines.append("    rows:")
            lines += [f"      - [{p}, {b}, {t}, {lat}]" for p, b, t, lat in entry["rows"]]
        path.write_text("\n".join(lines) + "\n")


def _number(value, what: str, origin: str, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > minimum:
        raise PlanInputError(f"{origin}: {what} must be a number > {minimum:g}, got {value!r}")
    return float(value)


def profile_from_dict(data, origin: str) -> ProfileTable:
    if not isinstance(data, dict) or "models" not in data:
        raise PlanInputError(f"{origin}: not a profile table (expected a mapping with 'gpu', 'partitions' "
                             f"and 'models'; `tally-bench profile` writes one)")
    gpu = gpu_type(data.get("gpu", "")).key
    kind = data.get("partitions")
    if kind not in PARTITION_KINDS:
        raise PlanInputError(f"{origin}: 'partitions' must be one of {', '.join(PARTITION_KINDS)}, got {kind!r}")
    step = int(data.get("step_percent", 10))
    models = data["models"]
    if not isinstance(models, dict) or not models:
        raise PlanInputError(f"{origin}: 'models' must map model names to their rows")
    rows: list[ProfileRow] = []
    memory: dict[str, float] = {}
    for model, entry in models.items():
        where = f"{origin}: model {model!r}"
        if not isinstance(entry, dict) or not isinstance(entry.get("rows"), list) or not entry["rows"]:
            raise PlanInputError(f"{where}: needs 'rows': [partition, batch, throughput, p99_ms] lists")
        if "memory_gb" in entry:
            memory[str(model)] = _number(entry["memory_gb"], "memory_gb", where)
        for row in entry["rows"]:
            if not isinstance(row, (list, tuple)) or len(row) != 4:
                raise PlanInputError(f"{where}: row {row!r} is not [partition, batch, throughput, p99_ms]")
            partition, batch, throughput, latency = row
            if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
                raise PlanInputError(f"{where}: batch must be an integer >= 1, got {batch!r}")
            rows.append(ProfileRow(str(model), str(partition), batch,
                                   _number(throughput, "throughput", where), _number(latency, "p99 latency", where)))
    return ProfileTable(gpu=gpu, partitions=kind, source=str(data.get("source", origin)), rows=rows,
                        memory_gb=memory, example=bool(data.get("example", False)), step_percent=step)


def example_profile_path(gpu: str, kind: str) -> Path:
    name = f"{gpu}-{kind}.example.yaml"
    path = Path(str(resources.files("tally") / "data" / "profiles" / name))
    if not path.exists():
        bundled = sorted(p.name for p in path.parent.glob("*.example.yaml"))
        raise PlanInputError(f"no bundled example profile for {gpu} with {kind} partitions (bundled: "
                             f"{', '.join(bundled)}); write one with `tally-bench profile --gpu {gpu} "
                             f"--partitions {kind} -o FILE` and pass it as the profile")
    return path


def load_profile(source: str | Path, gpu: str = "a100-40gb", kind: str = MIG) -> ProfileTable:
    """A profile table from a YAML/JSON file, or the bundled example for
    (gpu, kind) when `source` is "example"."""
    path = example_profile_path(gpu, kind) if str(source) == EXAMPLE else Path(source)
    data = read_structured(path, "profile table")
    return profile_from_dict(data, str(path))
