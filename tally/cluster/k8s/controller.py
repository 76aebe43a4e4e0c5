"""The placement controller: binds best-effort pods to GPUs by matching.

Why a controller and not a scheduler extender: MuxFlow's placement is a matching
over all waiting jobs and all free GPUs at once, redone periodically. A scheduler
extender is asked about one pod at a time (filter, prioritize) and cannot see the
other pods it competes with, so it could only approximate the matching; a
controller sees the whole set and binds each pod to the node of its matched GPU,
recording the GPU in the pod's `tally.dev/gpu` annotation, which the device
plugin then honours (GetPreferredAllocation, Allocate). Best-effort pods name it
as their scheduler (`schedulerName: tally-placement`); online (high-priority)
pods keep the default scheduler.

One cycle:
- GPUs: from each Node's `tally.dev/gpus` annotation, published by the node's
  device plugin (state, memory, online job class, best-effort jobs running).
  A GPU takes a best-effort pod when SysProbe says healthy and it has a free
  best-effort slot (counting pods this controller bound recently that have not
  reached the server yet).
- Pods: pending pods for this scheduler; their annotations are checked
  (a malformed one becomes an Event and the pod waits); their profile comes from
  `tally.dev/job-class` (a pod without one, or of an unknown class, is placed
  with the median profile, and told so in an Event).
- Weights: the speed predictor's normalized throughput of the pod next to the
  GPU's online job at the SM share dynamic SM allocation gives; memory that does
  not fit removes the edge. matching.match picks the pairs.
"""
from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass, replace
from statistics import median

import numpy as np

from tally.cluster.k8s.allocation import BEST_EFFORT, RESOURCES, requested
from tally.cluster.k8s.annotations import GPU, AnnotationError, job_request, pod_name
from tally.cluster.placement.matching import UNUSABLE, match, usable_edges
from tally.cluster.placement.pairs import dynamic_sm_percent
from tally.cluster.placement.predictor import SpeedPredictor, features
from tally.cluster.placement.profile import ProfileRecord

log = logging.getLogger(__name__)

GPUS_ANNOTATION = "tally.dev/gpus"
SCHEDULER_NAME = "tally-placement"


@dataclass(frozen=True)
class GpuSlot:
    node: str
    gpu: int
    memory_total: int
    memory_free: int
    online_job_class: str | None
    free_slots: int


def gpu_slots(nodes: list[dict], per_gpu: int, recently_bound: dict[tuple[str, int], int]) -> list[GpuSlot]:
    slots = []
    for node in nodes:
        name = node["metadata"]["name"]
        text = (node["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION)
        if not text:
            continue
        try:
            gpus = json.loads(text)
        except json.JSONDecodeError:
            log.warning("node %s: %s is not JSON; skipping the node", name, GPUS_ANNOTATION)
            continue
        for g in gpus:
            if g.get("state") != "healthy":
                continue
            free = per_gpu - int(g.get("best_effort_jobs", 0)) - recently_bound.get((name, int(g["gpu"])), 0)
            if free > 0:
                slots.append(GpuSlot(name, int(g["gpu"]), int(g.get("memory_total", 0)),
                                     int(g.get("memory_free", 0)), g.get("online_job_class"), free))
    return slots


class ProfileStore:
    """Profiles by job class (a JSON object of ProfileRecord fields per class)."""

    def __init__(self, profiles: dict[str, ProfileRecord]):
        if not profiles:
            raise ValueError("the profile store is empty: give at least one profile")
        self.profiles = profiles
        fields = ("solo_throughput", "sm_activity", "gpu_util", "mean_kernel_ms", "mean_block_us",
                  "untransformable_share", "memory_bytes")
        base = next(iter(profiles.values()))
        self.median = replace(base, name="(median)", **{f: type(getattr(base, f))(median(
            getattr(p, f) for p in profiles.values())) for f in fields})

    @classmethod
    def from_json(cls, data: dict) -> "ProfileStore":
        return cls({k: ProfileRecord.from_json(v) for k, v in data.items()})

    def get(self, job_class: str | None) -> tuple[ProfileRecord, bool]:
        """(profile, known)"""
        if job_class in self.profiles:
            return self.profiles[job_class], True
        return self.median, False


@dataclass
class Placement:
    pod: dict
    slot: GpuSlot
    predicted: float


class PlacementController:
    def __init__(self, api, predictor: SpeedPredictor, profiles: ProfileStore, *,
                 scheduler_name: str = SCHEDULER_NAME, best_effort_per_gpu: int = 1,
                 online_load: float = 0.35, max_sm_percent: float = 100.0, bound_ttl_s: float = 60.0):
        self.api = api
        self.predictor = predictor
        self.profiles = profiles
        self.scheduler_name = scheduler_name
        self.best_effort_per_gpu = best_effort_per_gpu
        self.online_load = online_load       # until SysProbe reports the online job's SM activity
        self.max_sm_percent = max_sm_percent
        self.bound_ttl_s = bound_ttl_s
        self._bound: list[tuple[float, str, int]] = []     # (time, node, gpu)
        self._told: set[tuple[str, str]] = set()           # (pod uid, message) already sent as an Event

    def _tell(self, pod: dict, reason: str, message: str, kind: str = "Warning") -> None:
        key = (pod["metadata"].get("uid", pod_name(pod)), message)
        if key not in self._told:
            self._told.add(key)
            self.api.event(pod, reason, message, kind, component=self.scheduler_name)

    def _recently_bound(self) -> dict[tuple[str, int], int]:
        now = time.monotonic()
        self._bound = [b for b in self._bound if now - b[0] < self.bound_ttl_s]
        counts: dict[tuple[str, int], int] = {}
        for _, node, gpu in self._bound:
            counts[(node, gpu)] = counts.get((node, gpu), 0) + 1
        return counts

    def plan(self, pods: list[dict], nodes: list[dict]) -> list[Placement]:
        slots = gpu_slots(nodes, self.best_effort_per_gpu, self._recently_bound())
        candidates, memory, profiles = [], [], []
        for pod in pods:
            if not any(requested(c, RESOURCES[BEST_EFFORT]) for c in pod.get("spec", {}).get("containers", [])):
                self._tell(pod, "TallyNotPlaced", f"pod {pod_name(pod)} names scheduler {self.scheduler_name} "
                           f"but asks for no {RESOURCES[BEST_EFFORT]}; add it to the container's limits")
                continue
            try:
                request = job_request(pod, self.max_sm_percent)
            except AnnotationError as e:
                self._tell(pod, "TallyNotPlaced", f"{e}; the pod waits until the annotation is fixed")
                continue
            profile, known = self.profiles.get(request.job_class)
            if not known:
                self._tell(pod, "TallyDefaultProfile", f"no profile for job class {request.job_class!r}: "
                           f"placed with the median profile", "Normal")
            quota = request.memory_quota
            need = profile.memory_bytes
            if quota is not None and not quota.endswith("%"):
                need = int(quota)
            candidates.append(pod)
            memory.append(need)
            profiles.append(profile)
        if not candidates or not slots:
            return []
        rows = []
        for slot in slots:
            online, _ = self.profiles.get(slot.online_job_class)
            share = dynamic_sm_percent(online, self.online_load)
            rows += [features(online, self.online_load, p, share) for p in profiles]
        weights = self.predictor.predict_rows(np.array(rows)).reshape(len(slots), len(candidates))
        # a slot offered once per free best-effort place on its GPU
        expanded = [k for k, s in enumerate(slots) for _ in range(s.free_slots)]
        weights = usable_edges(weights[expanded], np.array([slots[k].memory_free for k in expanded]),
                               np.array(memory), np.ones(len(expanded), dtype=bool))
        for c, need in enumerate(memory):
            if (weights[:, c] == UNUSABLE).all():
                self._tell(candidates[c], "TallyNotPlaced", f"no healthy GPU has {need / (1 << 30):.1f} GiB "
                           f"free next to its online job; the pod waits", "Normal")
        return [Placement(candidates[c], slots[expanded[r]], float(weights[r, c])) for r, c in match(weights)]

    def cycle(self) -> list[Placement]:
        placements = self.plan(self.api.pending_pods(self.scheduler_name), self.api.nodes())
        for p in placements:
            meta = p.pod["metadata"]
            self.api.annotate_pod(meta["namespace"], meta["name"], {GPU: str(p.slot.gpu)})
            self.api.bind(meta["namespace"], meta["name"], p.slot.node)
            self._bound.append((time.monotonic(), p.slot.node, p.slot.gpu))
            self.api.event(p.pod, "TallyPlaced", f"GPU {p.slot.gpu} of node {p.slot.node}, next to "
                           f"{p.slot.online_job_class or 'no online job'}; predicted normalized throughput "
                           f"{p.predicted:.2f}", "Normal", component=self.scheduler_name)
            log.info("placed %s on %s GPU %d (predicted %.2f)", pod_name(p.pod), p.slot.node, p.slot.gpu,
                     p.predicted)
        return placements

    def run(self, interval: float, stop) -> None:
        while not stop.is_set():
            try:
                self.cycle()
            except Exception as e:  # noqa: BLE001 - the API may be down for a while; keep going
                log.warning("placement cycle failed: %s", e)
            stop.wait(interval)

