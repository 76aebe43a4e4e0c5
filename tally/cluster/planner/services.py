"""The planner's input: the GPU type, the partition kind, the profile table and
the services, from a YAML or JSON file.

    gpu: a100-40gb
    partitions: mig            # or sm-share
    profile: example           # or a profile table's path (relative to this file)
    max_gpus: 40               # optional budget
    services:
      - name: search-ranker
        model: bert-base
        throughput: 1200       # requests/s the service must sustain
        p99_ms: 40             # latency SLO
        command: python serve.py --model bert-base --batch {batch}    # optional, for tally-run lines
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.files import read_structured
from tally.cluster.planner.gpus import MIG, PARTITION_KINDS, GpuType, gpu_type
from tally.cluster.planner.profiles import EXAMPLE, ProfileTable, load_profile


@dataclass(frozen=True)
class Service:
    name: str
    model: str
    throughput: float            # required requests/s
    p99_ms: float                # latency SLO
    command: str | None = None


@dataclass
class PlanRequest:
    gpu: GpuType
    kind: str
    profile: ProfileTable
    services: list[Service]
    max_gpus: int | None = None


def _positive(entry: dict, key: str, where: str) -> float:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise PlanInputError(f"{where}: '{key}' must be a number > 0, got {value!r}")
    return float(value)


def services_from_list(items, origin: str) -> list[Service]:
    if not isinstance(items, list) or not items:
        raise PlanInputError(f"{origin}: 'services' must be a non-empty list of "
                             f"{{name, model, throughput, p99_ms}} entries")
    services: list[Service] = []
    seen: set[str] = set()
    for n, entry in enumerate(items):
        where = f"{origin}: services[{n}]"
        if not isinstance(entry, dict):
            raise PlanInputError(f"{where}: expected a mapping with name, model, throughput, p99_ms")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise PlanInputError(f"{where}: 'name' must be a non-empty string")
        where = f"{origin}: service {name!r}"
        if name in seen:
            raise PlanInputError(f"{where}: two services have this name; names must be unique")
        seen.add(name)
        model = entry.get("model")
        if not isinstance(model, str) or not model:
            raise PlanInputError(f"{where}: 'model' must name a model of the profile table")
        command = entry.get("command")
        services.append(Service(name, model, _positive(entry, "throughput", where), _positive(entry, "p99_ms", where),
                                None if command is None else str(command)))
    return services


def check_request(request: PlanRequest, origin: str = "input") -> PlanRequest:
    profile = request.profile
    if profile.gpu != request.gpu.key:
        raise PlanInputError(f"{origin}: the profile table is for {profile.gpu}, the plan is for {request.gpu.key}; "
                             f"profile the models on {request.gpu.key} (`tally-bench profile --gpu {request.gpu.key}`)")
    if profile.partitions != request.kind:
        raise PlanInputError(f"{origin}: the profile table has {profile.partitions} partitions, the plan asks for "
                             f"{request.kind}; use a {request.kind} profile table")
    known = set(profile.models)
    for service in request.services:
        if service.model not in known:
            raise PlanInputError(f"{origin}: service {service.name!r} runs model {service.model!r}, which the profile "
                                 f"table does not have (it has {', '.join(sorted(known))}); profile it first")
    if request.max_gpus is not None and (isinstance(request.max_gpus, bool) or not isinstance(request.max_gpus, int)
                                         or request.max_gpus < 1):
        raise PlanInputError(f"{origin}: 'max_gpus' must be an integer >= 1, got {request.max_gpus!r}")
    return request


def load_request(path: Path, gpu: str | None = None, kind: str | None = None, profile: str | None = None,
                 max_gpus: int | None = None) -> PlanRequest:
    """Read a services file; command-line values override the file's."""
    data = read_structured(path, "services file")
    if not isinstance(data, dict):
        raise PlanInputError(f"{path}: expected a mapping with 'gpu', 'partitions', 'profile' and 'services'")
    gpu_key = gpu or data.get("gpu")
    if not gpu_key:
        raise PlanInputError(f"{path}: name the GPU type ('gpu: a100-40gb' or --gpu)")
    gpu_t = gpu_type(gpu_key)
    kind = kind or data.get("partitions", MIG)
    if kind not in PARTITION_KINDS:
        raise PlanInputError(f"{path}: 'partitions' must be one of {', '.join(PARTITION_KINDS)}, got {kind!r}")
    source = profile or data.get("profile", EXAMPLE)
    if str(source) != EXAMPLE and not Path(source).is_absolute() and profile is None:
        source = path.parent / source
    table = load_profile(source, gpu_t.key, kind)
    budget = max_gpus if max_gpus is not None else data.get("max_gpus")
    request = PlanRequest(gpu_t, kind, table, services_from_list(data.get("services"), str(path)), budget)
    return check_request(request, str(path))
