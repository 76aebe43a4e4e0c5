"""Legal ways to cut one GPU, enumerated from the partition rules.

A layout is the set of partitions one GPU is cut into. Only maximal layouts
(nothing more fits) matter to the optimizer: a partition left unused costs
nothing, so every legal layout is a maximal one with some parts idle.

- MIG: every set of (profile, placement) pairs whose memory slices do not
  overlap, whose compute slices fit the GPU and which holds no exclusive pair
  (gpus.py has the rules). Two layouts are distinct when their placements
  differ, which is how NVIDIA draws them and MIG-serving counts them (18 on an
  A100); the optimizer needs only the distinct multisets of sizes (13).
- SM shares: any multiset of shares in steps of `step_percent` summing to at
  most 100%: the integer partitions of 100/step (42 for 10% steps).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

from tally.cluster.planner.errors import PlanInputError
from tally.cluster.planner.gpus import MIG, SM_SHARE, GpuType, MigProfile


@dataclass(frozen=True)
class Part:
    partition: str              # "3g" or "30%"
    units: int                  # compute slices (MIG) or share steps
    start: int | None = None    # first memory slice of a MIG instance


@dataclass(frozen=True)
class Layout:
    parts: tuple[Part, ...]

    @property
    def sizes(self) -> tuple[int, ...]:
        """The multiset of part sizes, largest first: what the optimizer sees."""
        return tuple(sorted((p.units for p in self.parts), reverse=True))


def _mig_legal(gpu: GpuType, chosen: list[tuple[MigProfile, int, int]]) -> bool:
    used: set[int] = set()
    for _, start, size in chosen:
        covered = set(range(start, start + size))
        if used & covered:
            return False
        used |= covered
    slices = [profile.slices for profile, _, _ in chosen]
    if sum(slices) > gpu.compute_slices:
        return False
    present = set(slices)
    return not any(pair <= present for pair in gpu.mig_exclusive)


def mig_layouts(gpu: GpuType, maximal: bool = True) -> list[Layout]:
    """Every legal MIG layout of `gpu` (only the maximal ones by default), each
    with its placements, ordered by first memory slice."""
    items = [(profile, start, size) for profile in gpu.mig_profiles for start, size in profile.placements]
    legal: list[list[tuple[MigProfile, int, int]]] = []

    def extend(chosen: list, first: int) -> None:
        for i in range(first, len(items)):
            candidate = chosen + [items[i]]
            if _mig_legal(gpu, candidate):
                legal.append(candidate)
                extend(candidate, i + 1)

    extend([], 0)
    if maximal:
        legal = [c for c in legal if not any(item not in c and _mig_legal(gpu, c + [item]) for item in items)]
    layouts = [Layout(tuple(Part(p.partition, p.slices, start) for p, start, _ in sorted(c, key=lambda x: x[1])))
               for c in legal]
    return sorted(set(layouts), key=lambda layout: [(p.start, -p.units) for p in layout.parts])


def sm_share_layouts(steps: int) -> list[tuple[int, ...]]:
    """The integer partitions of `steps`, largest part first."""
    out: list[tuple[int, ...]] = []

    def extend(prefix: tuple[int, ...], remaining: int, largest: int) -> None:
        if remaining == 0:
            out.append(prefix)
            return
        for part in range(min(remaining, largest), 0, -1):
            extend(prefix + (part,), remaining - part, part)

    extend((), steps, steps)
    return out


class PartitionScheme:
    """How one GPU type is cut: its partition sizes and legal layouts."""

    def __init__(self, gpu: GpuType, kind: str, step_percent: int = 10):
        if kind not in (MIG, SM_SHARE):
            raise PlanInputError(f"unknown partition kind {kind!r}; use {MIG!r} or {SM_SHARE!r}")
        if kind == SM_SHARE and (not 1 <= step_percent <= 100 or 100 % step_percent):
            raise PlanInputError(f"SM-share step {step_percent}% must divide 100 (e.g. 5, 10, 20, 25)")
        self.gpu, self.kind, self.step_percent = gpu, kind, step_percent

    @cached_property
    def units(self) -> dict[str, int]:
        """Partition name -> size in slices or steps, smallest first."""
        if self.kind == MIG:
            return {p.partition: p.slices for p in self.gpu.mig_profiles}
        return {f"{k * self.step_percent}%": k for k in range(1, 100 // self.step_percent + 1)}

    @property
    def partitions(self) -> tuple[str, ...]:
        return tuple(self.units)

    @property
    def whole(self) -> str:
        return self.partitions[-1]

    @property
    def smallest(self) -> str:
        return self.partitions[0]

    def sms(self, partition: str) -> int:
        if self.kind == MIG:
            return self.gpu.mig_profile(partition).sms
        align = self.gpu.sm_share_alignment
        exact = self.units[partition] * self.step_percent * self.gpu.sms / 100
        return max(align, int(exact // align) * align)

    def memory_gb(self, partition: str) -> float:
        """Memory a partition may use: its MIG profile's, or the whole GPU's for
        an SM share (green contexts share one memory pool)."""
        if self.kind == MIG:
            return self.gpu.mig_profile(partition).memory_gb
        return self.gpu.memory_gb

    def display(self, partition: str) -> str:
        if self.kind == MIG:
            return self.gpu.mig_profile(partition).name
        return f"{partition} SMs"

    @cached_property
    def layouts(self) -> list[Layout]:
        """Maximal layouts, one per distinct multiset of sizes (for MIG, the
        first in placement order stands for the others)."""
        if self.kind == MIG:
            seen: dict[tuple[int, ...], Layout] = {}
            for layout in mig_layouts(self.gpu):
                seen.setdefault(layout.sizes, layout)
            return list(seen.values())
        by_units = {k: name for name, k in self.units.items()}
        return [Layout(tuple(Part(by_units[k], k) for k in sizes))
                for sizes in sm_share_layouts(100 // self.step_percent)]

    def layout_for(self, sizes: list[int]) -> Layout:
        """A legal placement of a sub-multiset of some maximal layout's sizes."""
        wanted = sorted(sizes, reverse=True)
        for layout in self.layouts:
            remaining = list(layout.parts)
            picked = []
            for size in wanted:
                match = next((p for p in remaining if p.units == size), None)
                if match is None:
                    break
                remaining.remove(match)
                picked.append(match)
            else:
                return Layout(tuple(sorted(picked, key=lambda p: (p.start or 0, -p.units))))
        raise PlanInputError(f"no legal {self.kind} layout of {self.gpu.key} holds parts of sizes {wanted}")
