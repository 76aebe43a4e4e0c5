"""How a kernel that the policy starts transformed will run: whole, as
slices, or as a PTB kernel. The variant provider says which versions of the
kernel exist, the profiler which configuration to run (or to measure) now.

The executor asks here and keeps the answer (a KernelPlan) on the kernel's
queue entry; nothing here touches a queue, a stream or the device.
"""
from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass

from ptx_passes.launch_plan import SliceLaunch, total_blocks, transformable_grid
from tally.scheduler.cluster_slices import cluster_slices, rest_of, sliceable_cluster_width
from tally.scheduler.ops import Launch
from tally.scheduler.profiler import WHOLE_KERNEL, RunConfig, TransparentProfiler, kernel_key
from tally.scheduler.run_mode import RunMode
from tally.scheduler.variants import PTBVariant, SlicedVariant, VariantProvider

BE_TRANSFORMS = ("auto", "slice", "ptb", "none")

log = logging.getLogger("tally.server")


@dataclass(frozen=True, slots=True)
class KernelPlan:
    mode: RunMode
    config: RunConfig | None = None      # the profiler's configuration; None when it was not asked
    measuring: bool = False              # the kernel's units are timed and reported to the profiler
    sliced: SlicedVariant | None = None
    ptb: PTBVariant | None = None
    slices: tuple[SliceLaunch, ...] = ()     # SLICE: all of the kernel's slices, in launch order
    untransformable: bool = False        # a transformation was asked for and no variant exists
    cooperative: bool = False            # a cooperative launch: whole, whatever the profiler would say
    # what the profiler was asked, to ask again when a slicing has been measured
    can_slice: bool = False
    can_ptb: bool = False
    max_workers: int | None = None
    # SLICE of a launch with (w, 1, 1) clusters: every slice is whole clusters, launched
    # with cluster (w, 1, 1) (cluster_slices.py); 1: no clusters to keep
    cluster_width: int = 1

    @property
    def slice_cluster(self) -> tuple[int, int, int] | None:
        return (self.cluster_width, 1, 1) if self.cluster_width > 1 else None


WHOLE_PLAN = KernelPlan(RunMode.WHOLE)
_UNTRANSFORMABLE = KernelPlan(RunMode.WHOLE, untransformable=True)
_WHOLE_CHOSEN = KernelPlan(RunMode.WHOLE, WHOLE_KERNEL)   # the profiler's settled answer for many kernels
# A cooperative grid's blocks may wait for each other (grid.sync()): a slice or a PTB
# launch holds only some of them, so the kernel would wait forever.
COOPERATIVE_PLAN = KernelPlan(RunMode.WHOLE, cooperative=True)


class KernelPlanner:
    def __init__(self, profiler: TransparentProfiler, variants: VariantProvider | None, be_transform: str):
        if be_transform not in BE_TRANSFORMS:
            raise ValueError(f"be_transform must be one of {', '.join(BE_TRANSFORMS)}, got {be_transform!r}")
        self.profiler = profiler
        self.variants = variants
        self.be_transform = be_transform
        self._cluster_kernels_logged: set[str] = set()    # reasons are logged once per kernel

    def plan(self, op: Launch, sm_cap: int | None) -> KernelPlan:
        """For a kernel started with transform=True. The SMs granted to the job's share
        (`sm_cap`, None: the whole device) cap its PTB workers: one worker per SM."""
        if op.cooperative:
            return COOPERATIVE_PLAN
        fn = op.function
        width = sliceable_cluster_width(op.cluster)
        if width is None:
            self._log_cluster(fn.name, f"its cluster {op.cluster} spans more than x, so slices cannot keep "
                                       "its clusters whole and PTB cannot either: it runs whole")
            return _UNTRANSFORMABLE
        sliced = ptb = None
        if self.variants is not None and transformable_grid(op.grid):
            if self.be_transform in ("auto", "slice"):
                sliced = self.variants.sliced(fn)
            if self.be_transform in ("auto", "ptb"):
                ptb = self.variants.ptb(fn)
        if width > 1 and ptb is not None:
            self._log_cluster(fn.name, "PTB cannot keep its thread-block clusters; it is only sliced, "
                                       "on cluster boundaries")
            ptb = None
        if sliced is None and ptb is None:
            return WHOLE_PLAN if self.be_transform == "none" else _UNTRANSFORMABLE
        max_workers = None
        if sm_cap is not None and sm_cap < self.profiler.sm_count:
            max_workers = max(1, sm_cap)
        can_slice, can_ptb, blocks = sliced is not None, ptb is not None, total_blocks(op.grid)
        config, measuring = self.profiler.plan(_key(op), blocks, can_slice=can_slice, can_ptb=can_ptb,
                                               max_workers=max_workers)
        if config.kind is RunMode.SLICE:
            slices = cluster_slices(blocks, -(-blocks // config.size), width)
            return KernelPlan(RunMode.SLICE, config, measuring, sliced=sliced, slices=slices,
                              can_slice=can_slice, can_ptb=can_ptb, max_workers=max_workers,
                              cluster_width=width)
        if config.kind is RunMode.PTB:
            return KernelPlan(RunMode.PTB, config, measuring, ptb=ptb,
                              can_slice=can_slice, can_ptb=can_ptb, max_workers=max_workers)
        return KernelPlan(RunMode.WHOLE, config, True) if measuring else _WHOLE_CHOSEN

    def revise(self, plan: KernelPlan, op: Launch, next_slice: int) -> KernelPlan | None:
        """After a slice of a measuring slicing completed, before slice `next_slice`.
        A slicing is measured as soon as it has enough slices, not after the whole
        kernel: the rest of the kernel moves on to the next candidate (if that is a
        slicing too) or to the chosen slicing. The plan from here on, or None to go
        on as planned."""
        key, blocks = _key(op), total_blocks(op.grid)
        if not self.profiler.is_measured(key, plan.config):
            return None
        config, measuring = self.profiler.plan(key, blocks, can_slice=plan.can_slice,
                                               can_ptb=plan.can_ptb, max_workers=plan.max_workers)
        if config.kind is not RunMode.SLICE:
            # finish this kernel as it is; the next one runs the answer
            return dataclasses.replace(plan, measuring=False)
        start = plan.slices[next_slice].block_offset
        rest = rest_of(start, blocks, config.size, plan.cluster_width)
        return dataclasses.replace(plan, config=config, measuring=measuring,
                                   slices=plan.slices[:next_slice] + rest)


    def _log_cluster(self, name: str, why: str) -> None:
        if name not in self._cluster_kernels_logged:     # once per kernel
            self._cluster_kernels_logged.add(name)
            log.info("kernel %s is launched with thread-block clusters: %s", name, why)


def _key(op: Launch) -> str:
    return kernel_key(op.function.name, op.grid, op.block, op.shared_bytes)
