"""The `sim` backend's handles: functions, modules, streams, events, and the
kernel definitions tests and benchmarks register."""
from __future__ import annotations

import collections
import functools
from dataclasses import dataclass, field
from typing import Callable

from ptx_passes.launch_plan import PTB_EXTRA, SLICE_EXTRA, extra_params_offset
from tally.backends.base import Dim3, KernelParam, ModuleSource
from tally.backends.sim.memory import SimMemory
from tally.backends.sim.model import KernelCost
from tally.scheduler.run_mode import RunMode

KernelEffect = Callable[[SimMemory, bytes, Dim3, Dim3, range], None]
SIM_MANIFEST_PREFIX = b"tally-sim-module:"


def sim_module_source(*kernel_names: str) -> ModuleSource:
    """A module for the sim made of kernels defined with define_kernel (or
    priced by the cost table), without writing PTX."""
    return ModuleSource(original=SIM_MANIFEST_PREFIX + ",".join(kernel_names).encode())


@dataclass(frozen=True)
class SimKernelDef:
    param_sizes: tuple[int, ...] | None = None   # None: take the layout from the PTX
    cost: KernelCost | None = None               # None: the cost table's entry
    effect: KernelEffect | None = None


def packed_params(sizes: tuple[int, ...]) -> tuple[KernelParam, ...]:
    out, offset = [], 0
    for size in sizes:
        align = min(size, 8) if size in (1, 2, 4, 8) else 8
        offset = -(-offset // align) * align
        out.append(KernelParam(offset, size, align))
        offset += size
    return tuple(out)


@dataclass(eq=False)
class SimFunction:
    name: str
    params: tuple[KernelParam, ...]
    cost: KernelCost
    effect: KernelEffect | None
    params_known: bool
    kind: RunMode = RunMode.WHOLE     # which launch contract it follows (a variant: SLICE, PTB)
    original: "SimFunction | None" = None

    @functools.cached_property
    def original_param_bytes(self) -> int:
        base = self.original or self
        return max((p.offset + p.size for p in base.params), default=0)

    @functools.cached_property
    def launch_param_bytes(self) -> int:
        extra = {RunMode.WHOLE: None, RunMode.SLICE: SLICE_EXTRA, RunMode.PTB: PTB_EXTRA}[self.kind]
        if extra is None:
            return self.original_param_bytes
        return extra_params_offset(self.original_param_bytes) + extra.size


@dataclass(eq=False)
class SimModule:
    entries: dict[str, tuple[KernelParam, ...] | None]
    globals: dict[str, tuple[int, int]] = field(default_factory=dict)
    loaded: bool = True


@dataclass(eq=False)
class SimStream:
    priority: int
    ops: collections.deque = field(default_factory=collections.deque)
    busy: bool = False
    errors: collections.deque = field(default_factory=collections.deque)
    destroyed: bool = False
    waits_released: bool = False   # its job is leaving: waits on values end (ops.ValueWaitOp)

    @property
    def idle(self) -> bool:
        return not self.ops


@dataclass(eq=False)
class SimEvent:
    timing: bool
    record_gen: int = 0
    pending: set = field(default_factory=set)
    time_ns: int | None = None
    waiters: list = field(default_factory=list)     # (gen, stream)

    @property
    def complete(self) -> bool:
        return self.record_gen not in self.pending
