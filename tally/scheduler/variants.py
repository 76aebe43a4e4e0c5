"""Where the executor gets transformed versions of a kernel.

A provider answers, for a backend Function, the sliced or PTB version of the
same kernel: the launch contract (ptx_passes.launch_plan) plus the backend
Function that runs it, or None when the kernel cannot be transformed (no PTX,
grid-wide sync, ...). The real provider runs the PTX passes on the server's
modules; the sim backend models variants (tally.backends.sim.variants).

Contract: answers are stable (same function -> same answer) and cheap after the
first call (providers cache); a provider never launches anything itself.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from ptx_passes.launch_plan import PTBKernel, SlicedKernel
from tally.backends.base import Function


@dataclass(frozen=True)
class SlicedVariant:
    plan: SlicedKernel
    function: Function


@dataclass(frozen=True)
class PTBVariant:
    plan: PTBKernel
    function: Function


class VariantProvider(Protocol):
    def sliced(self, function: Function) -> SlicedVariant | None: ...
    def ptb(self, function: Function) -> PTBVariant | None: ...
