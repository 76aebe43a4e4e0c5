"""The order of a reconfiguration's steps, so no service drops below its floor.

A step changes one GPU: `configure` a free one, `reconfigure` one in place
(stop some instances, start others; instances that stay as they are keep
serving, as MIG allows for instances whose placement the new layout keeps),
`release` one the target no longer needs, or `borrow` a spare when nothing
else can move without a dip. Each step is checked at its low point, after its
stops and before its starts.

Greedy order: fill free GPUs first (capacity only grows); then the in-place
change that keeps the most throughput among those whose stops every floor can
absorb; release what is left over only when nothing is pending.
"""
from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from functools import lru_cache

from tally.cluster.planner.deployment import GpuPlan, PartPlan
from tally.cluster.planner.gpus import MIG, GpuType
from tally.cluster.planner.layouts import mig_layouts

_TOLERANCE = 1e-9


@dataclass
class Step:
    action: str                  # configure | reconfigure | release | borrow
    gpu: int
    started: list[PartPlan] = field(default_factory=list)
    stopped: list[PartPlan] = field(default_factory=list)
    kept: list[PartPlan] = field(default_factory=list)
    floor_met: bool = True       # every service at or above its floor at the step's low point

    def describe(self) -> str:
        words = {"configure": "configure", "reconfigure": "reconfigure", "release": "release",
                 "borrow": "borrow spare"}[self.action]
        pieces = [f"{label} " + ", ".join(_part(p) for p in parts)
                  for label, parts in (("keep", self.kept), ("stop", self.stopped), ("start", self.started)) if parts]
        return f"{words} GPU {self.gpu}" + (": " + "; ".join(pieces) if pieces else "")


def _part(p: PartPlan) -> str:
    return f"{p.profile} {p.service} (b{p.batch})"


def _key(p: PartPlan) -> tuple:
    return (p.partition, p.service, p.batch)


@lru_cache(maxsize=8)
def _placements_by_sizes(gpu: GpuType) -> dict[tuple[int, ...], list[frozenset]]:
    """Every legal MIG layout (maximal or not), by its multiset of sizes."""
    out: dict[tuple[int, ...], list[frozenset]] = {}
    for layout in mig_layouts(gpu, maximal=False):
        out.setdefault(layout.sizes, []).append(frozenset((p.partition, p.units, p.start) for p in layout.parts))
    return out


def reuse(gpu: GpuType, kind: str, old: list[PartPlan], new: list[PartPlan]):
    """(kept, stopped, started) turning a GPU running `old` into one running
    `new` while keeping as many running instances as a legal placement allows."""
    matched: list[tuple[PartPlan, PartPlan]] = []
    unmatched_new = list(new)
    for part in old:
        twin = next((q for q in unmatched_new if _key(q) == _key(part)), None)
        if twin is not None:
            unmatched_new.remove(twin)
            matched.append((part, twin))
    if kind != MIG:
        kept = [o for o, _ in matched]
        return kept, [p for p in old if p not in kept], unmatched_new
    sizes = tuple(sorted((p.units for p in new), reverse=True))
    layouts = _placements_by_sizes(gpu).get(sizes, [])
    subsets = sorted((c for r in range(len(matched), -1, -1) for c in itertools.combinations(matched, r)),
                     key=lambda c: -sum(o.throughput for o, _ in c))
    for chosen in subsets:
        fixed = {(o.partition, o.units, o.start) for o, _ in chosen}
        layout = next((lay for lay in layouts if fixed <= lay), None)
        if layout is None:
            continue
        kept = [o for o, _ in chosen]
        to_place = [n for n in new if all(n is not t for _, t in chosen)]
        slots = sorted(layout - fixed, key=lambda s: (s[2], -s[1]))
        started = []
        for slot in slots:
            part = next(p for p in to_place if p.partition == slot[0])
            to_place.remove(part)
            started.append(dataclasses.replace(part, start=slot[2]))
        return kept, [p for p in old if p not in kept], started
    return [], list(old), list(new)


class Sequencer:
    def __init__(self, gpu: GpuType, kind: str, floor: dict[str, float], demand: dict[str, float],
                 active: dict[int, list[PartPlan]]):
        self.gpu, self.kind, self.floor, self.demand = gpu, kind, floor, demand
        self.on_gpu = {k: list(v) for k, v in active.items()}
        self.capacity: dict[str, float] = {}
        for parts in self.on_gpu.values():
            self._add(parts, +1)
        self.steps: list[Step] = []

    def _add(self, parts: list[PartPlan], sign: int) -> None:
        for p in parts:
            self.capacity[p.service] = self.capacity.get(p.service, 0.0) + sign * p.throughput

    def safe_without(self, parts: list[PartPlan]) -> bool:
        loss: dict[str, float] = {}
        for p in parts:
            loss[p.service] = loss.get(p.service, 0.0) + p.throughput
        return all(self.capacity.get(s, 0.0) - v >= self.floor.get(s, 0.0) * (1 - _TOLERANCE) - _TOLERANCE
                   for s, v in loss.items())

    def floors_met(self) -> bool:
        return all(self.capacity.get(s, 0.0) >= f * (1 - _TOLERANCE) - _TOLERANCE for s, f in self.floor.items())

    def helps(self, parts: list[PartPlan]) -> float:
        short = {s: max(0.0, d - self.capacity.get(s, 0.0)) for s, d in self.demand.items()}
        return sum(min(p.throughput, short.get(p.service, 0.0)) / self.demand[p.service]
                   for p in parts if p.service in self.demand)

    def apply(self, action: str, gpu: int, kept: list[PartPlan], stopped: list[PartPlan],
              started: list[PartPlan]) -> None:
        self._add(stopped, -1)
        low_point_ok = self.floors_met()
        self._add(started, +1)
        if action == "release":
            self.on_gpu.pop(gpu, None)
        else:
            self.on_gpu[gpu] = sorted(kept + started, key=lambda p: (p.start or 0, -p.units))
        self.steps.append(Step(action, gpu, started, stopped, kept, low_point_ok and self.floors_met()))

    def run(self, changing: list[int], pending: list[list[PartPlan]], free: list[int], next_id: int) -> int:
        """Carry out the move; returns the number of spares borrowed."""
        borrowed = 0
        while pending or changing:
            if free and pending:
                k = max(range(len(pending)), key=lambda j: self.helps(pending[j]))
                self.apply("configure", free.pop(0), [], [], pending.pop(k))
                continue
            if not pending:
                gpu = changing.pop(0)
                self.apply("release", gpu, [], self.on_gpu.get(gpu, []), [])
                continue
            move = self._best_in_place(changing, pending)
            if move is not None:
                gpu, k, (kept, stopped, started) = move
                changing.remove(gpu)
                pending.pop(k)
                self.apply("reconfigure", gpu, kept, stopped, started)
                continue
            free.append(next_id)
            self.steps.append(Step("borrow", next_id, floor_met=self.floors_met()))
            next_id += 1
            borrowed += 1
        for gpu in free:
            self.apply("release", gpu, [], [], [])
        return borrowed

    def _best_in_place(self, changing: list[int], pending: list[list[PartPlan]]):
        """(gpu, pending index, (kept, stopped, started)) keeping the most
        running throughput whose stops every floor absorbs, or None."""
        candidates = []
        drainable = [g for g in changing if self.safe_without(self.on_gpu[g])]
        if drainable:                                   # nothing kept: any drainable GPU, the most helpful config
            k = max(range(len(pending)), key=lambda j: self.helps(pending[j]))
            candidates.append(((0.0, self.helps(pending[k])), drainable[0], k,
                               ([], list(self.on_gpu[drainable[0]]), list(pending[k]))))
        by_key: dict[tuple, set[int]] = {}
        for k, new in enumerate(pending):
            for p in new:
                by_key.setdefault(_key(p), set()).add(k)
        for gpu in changing:
            old = self.on_gpu[gpu]
            for k in set().union(*(by_key.get(_key(p), set()) for p in old)):
                kept, stopped, started = reuse(self.gpu, self.kind, old, pending[k])
                if kept and self.safe_without(stopped):
                    candidates.append(((sum(p.throughput for p in kept), self.helps(started)), gpu, k,
                                       (kept, stopped, started)))
        if not candidates:
            return None
        _, gpu, k, change = max(candidates, key=lambda c: c[0])
        return gpu, k, change


def sequence(gpu: GpuType, kind: str, floor: dict[str, float], demand: dict[str, float],
             kept: list[GpuPlan], changing: list[GpuPlan], new_configs: list[list[PartPlan]],
             first_free_id: int) -> tuple[list[Step], list[GpuPlan], int]:
    """Steps from (kept + changing) to (kept + new configurations), the GPUs
    the new configurations end up on, and the spares borrowed."""
    active = {g.index: g.parts for g in kept + changing}
    sequencer = Sequencer(gpu, kind, floor, demand, active)
    extra = max(0, len(new_configs) - len(changing))
    free = list(range(first_free_id, first_free_id + extra))
    borrowed = sequencer.run([g.index for g in changing], list(new_configs), free, first_free_id + extra)
    untouched = {g.index for g in kept}
    placed = [GpuPlan(index, parts) for index, parts in sorted(sequencer.on_gpu.items()) if index not in untouched]
    return sequencer.steps, placed, borrowed
