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
    # what the profiler was asked, to ask again when a slicing has been measured
    can_slice: bool = False
    can_ptb: bool = False
    max_workers: int | None = None


WHOLE_PLAN = KernelPlan(RunMode.WHOLE)
_UNTRANSFORMABLE = KernelPlan(RunMode.WHOLE, untransformable=True)
_WHOLE_CHOSEN = KernelPlan(RunMode.WHOLE, WHOLE_KERNEL)   # the profiler's settled answer for many kernels


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
        fn = op.function
        if op.cluster is not None:
            # Sliced and PTB kernels run the grid as other, one-dimensional launches whose
            # blocks are not the clusters the job asked for (their co-scheduling, their
            # %cluster_* registers): the kernel runs whole, its clusters intact.
            if fn.name not in self._cluster_kernels_logged:
                self._cluster_kernels_logged.add(fn.name)
                log.info("kernel %s is launched with a cluster dimension: it runs whole (slicing and "
                         "PTB cannot keep its thread-block clusters)", fn.name)
            return _UNTRANSFORMABLE
        sliced = ptb = None
        if self.variants is not None and transformable_grid(op.grid):
            if self.be_transform in ("auto", "slice"):
                sliced = self.variants.sliced(fn)
            if self.be_transform in ("auto", "ptb"):
                ptb = self.variants.ptb(fn)
        if sliced is None and ptb is None:
            return WHOLE_PLAN if self.be_transform == "none" else _UNTRANSFORMABLE
        max_workers = None
        if sm_cap is not None and sm_cap < self.profiler.sm_count:
            max_workers = max(1, sm_cap)
        can_slice, can_ptb, blocks = sliced is not None, ptb is not None, total_blocks(op.grid)
        config, measuring = self.profiler.plan(_key(op), blocks, can_slice=can_slice, can_ptb=can_ptb,
                                               max_workers=max_workers)
        if config.kind is RunMode.SLICE:
            slices = tuple(sliced.plan.slices(op.grid, -(-blocks // config.size)))
            return KernelPlan(RunMode.SLICE, config, measuring, sliced=sliced, slices=slices,
                              can_slice=can_slice, can_ptb=can_ptb, max_workers=max_workers)
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
        rest = tuple(SliceLaunch(b, min(config.size, blocks - b)) for b in range(start, blocks, config.size))
        return dataclasses.replace(plan, config=config, measuring=measuring,
                                   slices=plan.slices[:next_slice] + rest)


def _key(op: Launch) -> str:
    return kernel_key(op.function.name, op.grid, op.block, op.shared_bytes)
